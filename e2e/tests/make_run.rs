//! `make run-examples`: `make run` (local control plane, simulator, kcm-rs,
//! the example Jobs) in the mode that exits when every Job has finished.
//! The example Jobs end as their pod failure policies say: the sample
//! completes; `policy-count-ignore` completes with its exit-1 pods counted
//! (Count) and its DisruptionTarget pods not counted (Ignore); `policy-failjob`
//! fails at its first exit-42 pod (FailJob). Every pod is counted once.

use std::collections::BTreeMap;
use std::process::Command;

use kcm_e2e::binaries::repo_root;

/// `job <ns>/<name>: <Type> (<Reason>) key=value ...` lines of kcm-dev.
fn parse(stdout: &str) -> BTreeMap<String, (String, BTreeMap<String, i64>)> {
    let mut jobs = BTreeMap::new();
    for line in stdout.lines().filter_map(|l| l.strip_prefix("job ")) {
        let (name, rest) = line.split_once(": ").expect("job line");
        let (end, counts) = rest.split_once(") ").expect("end");
        let counts = counts.split_whitespace().map(|kv| {
            let (k, v) = kv.split_once('=').expect("key=value");
            (k.to_string(), v.parse().expect("number"))
        });
        jobs.insert(name.to_string(), (format!("{end})"), counts.collect()));
    }
    jobs
}

#[test]
fn make_run_examples_exits_when_the_example_jobs_finish() {
    let state = tempfile::tempdir().expect("tempdir");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let out = Command::new("make")
        .current_dir(repo_root())
        .env_remove("KUBECONFIG")
        .env_remove("MAKEFLAGS")
        .arg("--no-print-directory")
        .arg("run-examples")
        .arg(format!("CARGO={cargo}"))
        .arg(format!("DEV_ARGS=--state-dir={}", state.path().display()))
        .output()
        .expect("make");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert!(
        out.status.success(),
        "make run-examples: {}\n{stderr}",
        out.status
    );

    let jobs = parse(&stdout);
    let names: Vec<&str> = jobs.keys().map(String::as_str).collect();
    let want = [
        "default/policy-count-ignore",
        "default/policy-failjob",
        "default/sample",
    ];
    assert_eq!(names, want, "{stdout}");
    for (name, (end, c)) in &jobs {
        // Each pod is counted once: succeeded, counted as failed, or ignored.
        assert_eq!(c["pods"], c["pods-succeeded"] + c["pods-failed"], "{name}");
        assert_eq!(c["succeeded"], c["pods-succeeded"], "{name}");
        assert_eq!(c["failed"], c["pods-failed"] - c["ignored"], "{name}");
        eprintln!("{name}: {end} {c:?}");
    }
    let (end, c) = &jobs["default/sample"];
    assert_eq!(
        (end.as_str(), c["succeeded"], c["failed"]),
        ("Complete (CompletionsReached)", 6, 0)
    );
    let (end, c) = &jobs["default/policy-count-ignore"];
    assert_eq!(end, "Complete (CompletionsReached)");
    assert_eq!(c["succeeded"], 6);
    assert!(c["failed"] >= 1, "no pod hit the Count rule: {c:?}");
    assert!(c["ignored"] >= 1, "no pod hit the Ignore rule: {c:?}");
    let (end, c) = &jobs["default/policy-failjob"];
    assert_eq!(
        (end.as_str(), c["failed"], c["pods"]),
        ("Failed (PodFailurePolicy)", 1, 1)
    );
}
