//! `make run-real-examples`: `make run` on a real node (containerd, runc,
//! kubelet, kube-scheduler from e2e/realnode) until every example Job has
//! finished, then teardown and the leftover check. Ignored by default: it
//! needs root and builds kubelet; `make run-real-test` runs it.
//!
//! The pods are real containers, so the outcomes are exact: `sample` runs 6
//! pods that exit 0; `policy-count-ignore` (e2e/realnode/examples) has two
//! pods exit 1 (Count: failed=2) and one evicted through the Eviction API
//! (DisruptionTarget with reason EvictionByEvictionAPI: Ignore, not counted);
//! `policy-failjob`'s first pod exits 42 and the Job gets FailureTarget, then
//! Failed. After the run nothing of the node is left (check-clean.sh).

use std::collections::BTreeMap;
use std::process::Command;

use kcm_e2e::binaries::repo_root;

/// One Job's `job ...` and `detail ...` lines of kcm-dev.
#[derive(Debug, Default)]
struct JobEnd {
    end: String,
    counts: BTreeMap<String, i64>,
    detail: BTreeMap<String, String>,
}

fn parse(stdout: &str) -> BTreeMap<String, JobEnd> {
    let mut jobs: BTreeMap<String, JobEnd> = BTreeMap::new();
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("job ") {
            let (name, rest) = rest.split_once(": ").expect("job line");
            let (end, counts) = rest.split_once(") ").expect("end");
            let job = jobs.entry(name.to_string()).or_default();
            job.end = format!("{end})");
            for kv in counts.split_whitespace() {
                let (k, v) = kv.split_once('=').expect("key=value");
                job.counts.insert(k.into(), v.parse().expect("number"));
            }
        } else if let Some(rest) = line.strip_prefix("detail ") {
            let (name, rest) = rest.split_once(": ").expect("detail line");
            let job = jobs.entry(name.to_string()).or_default();
            for kv in rest.split_whitespace() {
                let (k, v) = kv.split_once('=').expect("key=value");
                job.detail.insert(k.into(), v.into());
            }
        }
    }
    jobs
}

#[test]
#[ignore = "needs root and a kubelet build: make run-real-test"]
fn make_run_real_examples_runs_the_example_jobs_as_real_containers() {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new("make")
        .current_dir(repo_root())
        .env_remove("KUBECONFIG")
        .env_remove("MAKEFLAGS")
        .arg("--no-print-directory")
        .arg("run-real-examples")
        .arg(format!("CARGO={cargo}"))
        .output()
        .expect("make");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    // The run tears the node down and runs check-clean.sh, whose verdict
    // is part of the exit status.
    assert!(
        out.status.success(),
        "make run-real-examples: {}\n{stderr}",
        out.status
    );
    assert!(
        stderr.contains("clean: nothing of the real node is left")
            || stdout.contains("clean: nothing of the real node is left"),
        "no clean verdict after teardown:\n{stderr}"
    );

    let jobs = parse(&stdout);
    let names: Vec<&str> = jobs.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "default/policy-count-ignore",
            "default/policy-failjob",
            "default/sample"
        ],
        "{stdout}"
    );
    for (name, job) in &jobs {
        let c = &job.counts;
        assert_eq!(c["pods"], c["pods-succeeded"] + c["pods-failed"], "{name}");
        assert_eq!(c["succeeded"], c["pods-succeeded"], "{name}");
        assert_eq!(c["failed"], c["pods-failed"] - c["ignored"], "{name}");
    }

    let sample = &jobs["default/sample"];
    assert_eq!(sample.end, "Complete (CompletionsReached)");
    assert_eq!(
        (sample.counts["succeeded"], sample.counts["failed"]),
        (6, 0)
    );
    assert_eq!(sample.detail["exit-codes"], "0,0,0,0,0,0");

    let ci = &jobs["default/policy-count-ignore"];
    assert_eq!(ci.end, "Complete (CompletionsReached)");
    let c = &ci.counts;
    assert_eq!(
        (c["succeeded"], c["failed"], c["ignored"], c["pods"]),
        (6, 2, 1, 9),
        "two exit-1 pods counted, one evicted pod ignored: {ci:?}"
    );
    // The evicted pod ended on SIGTERM (143); the Count pods with 1.
    assert_eq!(ci.detail["exit-codes"], "0,0,0,0,0,0,1,1,143", "{ci:?}");
    assert_eq!(ci.detail["disruption-reasons"], "EvictionByEvictionAPI");

    let fj = &jobs["default/policy-failjob"];
    assert_eq!(fj.end, "Failed (PodFailurePolicy)");
    assert_eq!((fj.counts["failed"], fj.counts["pods"]), (1, 1));
    assert_eq!(fj.detail["exit-codes"], "42");
    assert_eq!(fj.detail["conditions"], "FailureTarget,Failed");
}
