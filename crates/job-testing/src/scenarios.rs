//! The Job controller's shared scenarios, in the pattern of taint eviction's
//! `tests/support/scenarios.rs`: each [`Scenario`] is a script (create,
//! patch, delete, play the kubelet, snapshot at settled checkpoints) and
//! what its snapshots must show. The differential suite plays each against
//! upstream and kcm-rs and compares every checkpoint ([`differ`]); the
//! end-to-end suite plays each against kcm-rs alone ([`alone`]). Both check
//! the same expectations, so a scenario is written once.

pub mod lifecycle;
pub mod pods;

use super::script::{Script, Snaps, compare_script_with, play};

/// One scenario: a script and what its snapshots must show.
pub struct Scenario {
    pub name: &'static str,
    pub script: Script,
    /// Drops what legitimately depends on timing before the two sides are
    /// compared (identity for most).
    pub fix: fn(Snaps) -> Snaps,
    /// What kcm-rs's snapshots must show, beyond matching upstream's.
    pub expect: fn(&Snaps),
}

/// Scenarios the third way (`KCM_DIFF_BESIDE=1`) cannot play, and why.
pub const NOT_BESIDE: &[(&str, &str)] = &[(
    "orphan adoption and release",
    "ownerless pods are KCM's: its orphan sweep strips their tracking finalizer \
     while kcm-rs adopts them, so the outcome depends on which comes first",
)];

/// The identity [`Scenario::fix`].
pub fn exact(s: Snaps) -> Snaps {
    s
}

/// Plays `sc` against upstream and kcm-rs, asserts every checkpoint
/// matches, then checks the expectations.
pub async fn differ(sc: &Scenario) {
    eprintln!("scenario: {}", sc.name);
    if super::Side::ours() == super::Side::Beside
        && let Some((_, why)) = NOT_BESIDE.iter().find(|(n, _)| *n == sc.name)
    {
        eprintln!("not played beside KCM: {why}");
        return;
    }
    let ours = compare_script_with(sc.script, sc.fix).await;
    (sc.expect)(&ours);
}

/// Plays `sc` against kcm-rs alone and checks the expectations.
pub async fn alone(sc: &Scenario) {
    eprintln!("scenario: {}", sc.name);
    let ours = (sc.fix)(play(false, sc.script).await);
    (sc.expect)(&ours);
}
