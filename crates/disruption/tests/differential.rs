//! The PDB scenarios of `support/scenarios.rs` against upstream
//! kube-controller-manager's disruption-controller and against kcm-rs,
//! each on its own control plane; the final PDB status (all fields but
//! times) and the events about each PDB must be identical, and the status
//! as each scenario expects.

mod support;

use std::collections::{BTreeMap, BTreeSet};

use kcm_e2e::{ControlPlane, UpstreamKcm, in_process};
use kcm_features::FeatureGates;
use kcm_runtime::controller::Settings;

use support::scenarios::{self, SCENARIOS};
use support::*;

type Results = BTreeMap<String, (Observed, BTreeSet<String>)>;

async fn run(upstream: bool) -> Results {
    let cp = ControlPlane::start().expect("control plane");
    let c = cp.client().await.expect("client");
    let _ours;
    let _theirs;
    if upstream {
        _theirs =
            Some(UpstreamKcm::start(&cp, &["disruption-controller"], &[]).expect("upstream KCM"));
    } else {
        in_process::init_tracing();
        _ours = Some(
            in_process::start(
                &cp,
                &[kcm_disruption::SPEC],
                Settings::default(),
                FeatureGates::default(),
            )
            .await
            .expect("kcm-rs"),
        );
    }
    let runs = SCENARIOS.iter().map(|s| {
        let c = c.clone();
        async move { (s.to_string(), scenarios::run(&c, s).await) }
    });
    futures::future::join_all(runs).await.into_iter().collect()
}

#[tokio::test]
async fn pdb_status_matches_upstream() {
    let theirs = run(true).await;
    let ours = run(false).await;
    let mut table = String::from("scenario | upstream | kcm-rs | same\n");
    let mut diffs = Vec::new();
    for s in SCENARIOS {
        let (u, o) = (&theirs[*s], &ours[*s]);
        let short = |x: &Observed| {
            format!(
                "cur={} des={} exp={} allowed={} gen={:?} disrupted={:?} cond={:?}",
                x.current_healthy,
                x.desired_healthy,
                x.expected_pods,
                x.disruptions_allowed,
                x.observed_generation,
                x.disrupted_pods,
                x.conditions
                    .iter()
                    .map(|c| format!("{}/{}/{}", c.1, c.2, c.3))
                    .collect::<Vec<_>>()
            )
        };
        table.push_str(&format!(
            "{s} | {} | {} | {}\n",
            short(&u.0),
            short(&o.0),
            u == o
        ));
        if u != o {
            diffs.push(format!("{s}:\n  upstream {u:?}\n  kcm-rs   {o:?}"));
        }
    }
    eprintln!("{table}");
    assert!(diffs.is_empty(), "differences:\n{}", diffs.join("\n"));
    for s in SCENARIOS {
        scenarios::expect(s, &theirs[*s].0);
    }
}
