//! The same `--feature-gates` strings to upstream kube-controller-manager
//! and to kcm-rs's gate checks, per Kubernetes minor (1.34, the default,
//! and 1.37, the newest; `KCM_GATE_VERSIONS="1.34 1.35 1.36 1.37"`, as
//! `make test-versions` sets it, for others): both accept or both reject, except the listed
//! deliberate deviations. Upstream's verdict comes from running its binary
//! against a control plane of that minor: a rejected gate string ends it at
//! once with `"command failed"`; an accepted one lets it start.

use std::io::Read;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kcm_e2e::{ControlPlane, binaries};
use kcm_features::{FeatureGates, KubeVersion};

/// Strings whose verdicts differ on purpose (docs/deviations.md): kcm-rs's
/// own gates, which upstream no longer has, and values of gates kcm-rs
/// reads but implements only at the minor's default.
fn deviation(minor: u32, gates: &str) -> Option<&'static str> {
    match (minor, gates) {
        (_, "JobPodFailurePolicy=false") => Some("kcm-rs's own gate"),
        _ => None,
    }
}

const STRINGS: &[&str] = &[
    "",
    "APIResponseCompression=false",
    "kube:JobManagedBy=true",
    "JobManagedBy=false",
    "JobManagedBy=maybe",
    "SidecarContainers=false",
    "PodIndexLabel=true",
    "NoSuchGate=true",
    "AllAlpha=true",
    "AllBeta=false",
    "AtomicFIFO=false",
    "StaleControllerConsistencyJob=false",
    "MutableSchedulingDirectivesForSuspendedJobs=true",
    "WorkloadWithJob=true",
    "WorkloadWithJob=true,GenericWorkload=true",
    "JobPodFailurePolicy=false",
    "wardle:Foo=true",
];

/// Upstream KCM's verdict on `gates`: true = accepted.
fn upstream_accepts(cp: &ControlPlane, gates: &str) -> bool {
    let bin = binaries::ensure_built_for(cp.version())
        .expect("binaries")
        .join("kcm-e2e-controller-manager");
    let log = cp.dir().join("kcm-gates.log");
    let mut child = Command::new(&bin)
        .arg(format!("--kubeconfig={}", cp.kubeconfig().display()))
        .args([
            "--controllers=job-controller",
            "--leader-elect=false",
            "--secure-port=0",
        ])
        .arg(format!("--feature-gates={gates}"))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::from(std::fs::File::create(&log).expect("log")))
        .spawn()
        .expect("spawn kube-controller-manager");
    let began = Instant::now();
    let read = || {
        let mut s = String::new();
        if let Ok(mut f) = std::fs::File::open(&log) {
            let _ = f.read_to_string(&mut s);
        }
        s
    };
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            let out = read();
            assert!(
                out.contains("command failed"),
                "kube-controller-manager ({gates:?}) exited {status} for another reason:\n{out}"
            );
            return false;
        }
        // Gates are checked before anything starts; once a controller
        // starts (or a few seconds pass), they were accepted.
        let out = read();
        if out.contains("Starting") || began.elapsed() > Duration::from_secs(6) {
            let _ = child.kill();
            let _ = child.wait();
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn gate_strings_get_the_verdict_of_the_minors_kcm() {
    let mut table = String::new();
    let mut wrong = Vec::new();
    let versions = std::env::var("KCM_GATE_VERSIONS").unwrap_or_else(|_| "1.34 1.37".to_string());
    for version in versions.split_whitespace() {
        let cp = ControlPlane::start_version(version).expect("control plane");
        let minor: u32 = version.trim_start_matches("1.").parse().expect("minor");
        let kv = KubeVersion::new(minor).expect("supported");
        for gates in STRINGS {
            let theirs = upstream_accepts(&cp, gates);
            let ours = FeatureGates::parse_for(kv, gates);
            let note = deviation(minor, gates);
            table.push_str(&format!(
                "{version} {gates:?}: upstream {}, kcm-rs {}{}\n",
                if theirs { "accepts" } else { "rejects" },
                match &ours {
                    Ok(_) => "accepts".to_string(),
                    Err(e) => format!("rejects ({e})"),
                },
                note.map(|n| format!(" [deviation: {n}]"))
                    .unwrap_or_default()
            ));
            match note {
                None if theirs != ours.is_ok() => wrong.push(format!("{version} {gates:?}")),
                Some(_) if theirs == ours.is_ok() => wrong.push(format!(
                    "{version} {gates:?}: listed deviation no longer differs"
                )),
                _ => {}
            }
        }
    }
    eprintln!("{table}");
    assert!(wrong.is_empty(), "verdicts differ: {wrong:#?}\n{table}");
}
