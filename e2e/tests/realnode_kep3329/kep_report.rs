//! The table and the verdict of `realnode_kep3329/`: per cause, what
//! kcm-rs and KCM made of the same disruption.

use std::collections::BTreeMap;

use kcm_e2e::realnode::procs::Which;
use kcm_e2e::realnode::{PodEnd, RealNode, secs};

use crate::{Cause, Outcome};

/// Markdown: the sources table (one row per cause, kcm-rs beside KCM) and
/// the timings.
pub fn render(
    node: &RealNode,
    results: &BTreeMap<(Cause, Which), Outcome>,
    causes: &[Cause],
) -> String {
    let mut s = format!(
        "# KEP-3329 on a real node: every source of DisruptionTarget, Kubernetes {}\n\n{}\n\n\
         `make realnode-kep K8S_VERSIONS={}` (e2e/tests/realnode_kep3329/). One Job per cause \
         (e2e/realnode/scenarios/job.yaml: FailJob on exit code 42, Ignore on DisruptionTarget, \
         backoffLimit 1, two real pods); then a real exit 42. Victim: DisruptionTarget reason, \
         phase/status.reason, exit code, as the pod watch last saw it. Counted: the Job's \
         status.failed once the victims are accounted for and replaced.\n\n",
        node.version,
        kcm_e2e::realnode::run_header(node),
        node.version
    );
    s.push_str("| cause | upstream's reason | victim (kcm-rs) | victim (KCM) | counted kcm-rs / KCM | Job conditions kcm-rs | Job conditions KCM | failed at end kcm-rs / KCM | notes | same |\n");
    s.push_str("|---|---|---|---|---|---|---|---|---|---|\n");
    for &c in causes {
        let rs = &results[&(c, Which::KcmRs)];
        let kcm = &results[&(c, Which::Kcm)];
        let victims = |o: &Outcome| {
            o.victims
                .iter()
                .map(PodEnd::render)
                .collect::<Vec<_>>()
                .join("; ")
        };
        let counted = |o: &Outcome| o.failed_after.map_or("-".into(), |f| f.to_string());
        let notes = |o: &Outcome| {
            let mut n = o.notes.clone();
            if let Some(e) = &o.error {
                n.push(format!("ERROR: {e}"));
            }
            n.join("; ")
        };
        let notes = if notes(rs) == notes(kcm) {
            notes(rs)
        } else {
            format!("kcm-rs: {} / KCM: {}", notes(rs), notes(kcm))
        };
        s.push_str(&format!(
            "| {} | {} | {} | {} | {} / {} | {} | {} | {} / {} | {} | {} |\n",
            c.label(),
            c.expected_reason(),
            victims(rs),
            victims(kcm),
            counted(rs),
            counted(kcm),
            rs.conditions.join(" → "),
            kcm.conditions.join(" → "),
            rs.failed_end,
            kcm.failed_end,
            notes.replace('|', "\\|"),
            if rs.key() == kcm.key() && rs.error.is_none() && kcm.error.is_none() {
                "yes"
            } else {
                "**no**"
            },
        ));
    }
    s.push_str(
        "| (e) kubelet node-pressure eviction (memory.available, nodefs) | TerminationByKubelet | not run | not run | | | | | \
         this VM is shared: the node's thresholds (100Mi memory, 1% disk) are the machine's own, \
         and reaching them would starve every other process on it | |\n\
         | (e) kubelet graceful node shutdown | TerminationByKubelet | not run | not run | | | | | \
         needs systemd-logind's inhibitor locks over D-Bus; this VM has no systemd | |\n",
    );
    s.push_str("\nTimings in seconds (disruption to victims ended; to accounted and replaced; exit 42 to FailureTarget; FailureTarget to Failed):\n\n");
    s.push_str("| cause | kcm-rs | KCM |\n|---|---|---|\n");
    for &c in causes {
        let t = |o: &Outcome| {
            format!(
                "{} / {} / {} / {}",
                secs(o.t_disrupted),
                secs(o.t_replaced),
                secs(o.t_target),
                secs(o.t_failed)
            )
        };
        s.push_str(&format!(
            "| {} | {} | {} |\n",
            c.slug(),
            t(&results[&(c, Which::KcmRs)]),
            t(&results[&(c, Which::Kcm)])
        ));
    }
    s
}

/// What is wrong: a victim without upstream's reason, a count or
/// conditions that are not KEP-3329's, a PDB that let a second eviction
/// through, or kcm-rs and KCM disagreeing.
pub fn failures(results: &BTreeMap<(Cause, Which), Outcome>, causes: &[Cause]) -> Vec<String> {
    let mut failures = Vec::new();
    for ((cause, which), o) in results {
        let who = format!("{} {}", which.label(), cause.slug());
        if let Some(e) = &o.error {
            failures.push(format!("{who}: {e}"));
            continue;
        }
        if o.victims.is_empty()
            || o.victims
                .iter()
                .any(|v| v.disruption != cause.expected_reason())
        {
            failures.push(format!(
                "{who}: victims {:?}, want reason {}",
                o.victims,
                cause.expected_reason()
            ));
        }
        let want = if cause.counted() {
            o.victims.len() as i32
        } else {
            0
        };
        if o.failed_after != Some(want) {
            failures.push(format!(
                "{who}: failed {:?} after the disruption, want {want}",
                o.failed_after
            ));
        }
        if o.conditions
            != [
                "FailureTarget(PodFailurePolicy)",
                "Failed(PodFailurePolicy)",
            ]
        {
            failures.push(format!("{who}: conditions {:?}", o.conditions));
        }
        if *cause == Cause::EvictionApi
            && o.notes.first().map(String::as_str) != Some("second eviction: 429")
        {
            failures.push(format!(
                "{who}: the PDB did not refuse the second eviction: {:?}",
                o.notes
            ));
        }
    }
    for &c in causes {
        let (rs, kcm) = (&results[&(c, Which::KcmRs)], &results[&(c, Which::Kcm)]);
        if rs.key() != kcm.key() {
            failures.push(format!(
                "{}: kcm-rs {:?} != KCM {:?}",
                c.slug(),
                rs.key(),
                kcm.key()
            ));
        }
    }
    failures
}
