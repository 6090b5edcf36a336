//! Property tests of the Job controller invariants (perf-reliability-notes
//! §3c) over random histories: kubelet transitions, user deletions, scale
//! and suspend changes, clock steps, and syncs that crash part-way. Each
//! sync is the shipped `JobController::sync_job` against the model world
//! ([`World`]); a crash kills the controller process part-way (every later
//! write fails) and the next sync runs in a fresh one.
//!
//! Checked on every persisted status write:
//! * exactly-once: a UID leaves `uncountedTerminatedPods` at most once, is
//!   never re-added once counted, and the counters equal the number of UIDs
//!   that left the lists (NonIndexed succeeded; failed for both modes);
//! * counters never decrease;
//! * a terminal condition only with empty uncounted lists, `active == 0`
//!   and `terminating == 0`; never Complete and Failed; Complete needs
//!   SuccessCriteriaMet, Failed needs FailureTarget; terminal conditions
//!   never change;
//! * nothing the API server's status validation refuses: `ready <=
//!   active`, `completionTime` exactly with Complete and not before
//!   `startTime`, no finished Job without `startTime`.
//!
//! Checked after syncs: a terminal pod loses its finalizer only once its UID
//! is persisted (or counted); after a sync that did not crash `active <=
//! parallelism` and `active <= completions - succeeded`; replaying a sync
//! reaches a fixed point without changing counters; a sync fails exactly
//! when its process died and starts with its expectations satisfied (both
//! in [`World::sync`]). At the end the Job finishes and no pod keeps the
//! finalizer.

use std::collections::{HashMap, HashSet};

use k8s_openapi::api::batch::v1::JobStatus;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use proptest::prelude::*;

use super::*;
use crate::indexes::OrderedIntervals;
use crate::sync::manage::PodWork;
use crate::sync::tests::world::full::{has_tracking_finalizer, is_active, is_terminal, phase};

#[derive(Debug, Clone)]
enum Op {
    Sync(Crash),
    Run(usize),
    Succeed(usize),
    Fail(usize),
    Delete(usize),
    KubeletStop(usize),
    Advance(i64),
    Parallelism(i32),
    Suspend(bool),
}

fn crash() -> impl Strategy<Value = Crash> {
    prop_oneof![
        6 => Just(Crash::None),
        1 => Just(Crash::AfterPodWork),
        1 => Just(Crash::AfterFlush),
        1 => (0usize..4).prop_map(Crash::MidRemoval),
        1 => Just(Crash::BeforeLastWrite),
        1 => (0usize..3).prop_map(Crash::MidCreation),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => crash().prop_map(Op::Sync),
        3 => any::<usize>().prop_map(Op::Run),
        3 => any::<usize>().prop_map(Op::Succeed),
        2 => any::<usize>().prop_map(Op::Fail),
        1 => any::<usize>().prop_map(Op::Delete),
        1 => any::<usize>().prop_map(Op::KubeletStop),
        1 => (0i64..30).prop_map(Op::Advance),
        1 => (0i32..5).prop_map(Op::Parallelism),
        1 => any::<bool>().prop_map(Op::Suspend),
    ]
}

/// Follows the persisted status across writes.
#[derive(Default)]
struct Checker {
    indexed: bool,
    completions: i32,
    counted_s: HashSet<String>,
    counted_f: HashSet<String>,
    prev_s: HashSet<String>,
    prev_f: HashSet<String>,
    last: (i32, i32),
    terminal: Option<Vec<(String, String, String)>>,
    /// Failures are ignored by the policy: released without being counted.
    ignored_failures: bool,
}

fn set(v: Vec<String>) -> HashSet<String> {
    v.into_iter().collect()
}

impl Checker {
    fn on_write(&mut self, s: &JobStatus) {
        let (us, uf) = uncounted(s);
        let (us, uf) = (set(us), set(uf));
        assert!(us.is_disjoint(&uf), "a UID in both uncounted lists: {s:?}");
        for (prev, cur, counted) in [
            (&self.prev_s, &us, &mut self.counted_s),
            (&self.prev_f, &uf, &mut self.counted_f),
        ] {
            for id in prev.difference(cur) {
                assert!(counted.insert(id.clone()), "{id} counted twice");
            }
        }
        for id in us.iter().chain(&uf) {
            assert!(
                !self.counted_s.contains(id) && !self.counted_f.contains(id),
                "{id} back in uncounted after being counted"
            );
        }
        let (succeeded, failed) = (s.succeeded.unwrap_or(0), s.failed.unwrap_or(0));
        if self.indexed {
            let ci = s.completed_indexes.as_deref().unwrap_or("");
            let parsed = OrderedIntervals::parse(ci, self.completions);
            assert_eq!(
                succeeded,
                parsed.total(),
                "succeeded from completedIndexes {ci}"
            );
        } else {
            assert_eq!(
                usize::try_from(succeeded).ok(),
                Some(self.counted_s.len()),
                "{s:?}"
            );
        }
        assert_eq!(
            usize::try_from(failed).ok(),
            Some(self.counted_f.len()),
            "{s:?}"
        );
        assert!(
            succeeded >= self.last.0 && failed >= self.last.1,
            "counter decreased"
        );
        self.last = (succeeded, failed);
        self.prev_s = us;
        self.prev_f = uf;

        let cs = conditions(s);
        let is = |t: &str| cs.iter().any(|c| c.0 == t && c.1 == "True");
        assert!(!(is("Complete") && is("Failed")), "{cs:?}");
        assert!(!is("Complete") || is("SuccessCriteriaMet"), "{cs:?}");
        assert!(!is("Failed") || is("FailureTarget"), "{cs:?}");
        assert!(!(is("SuccessCriteriaMet") && is("FailureTarget")), "{cs:?}");
        // What the API server's strengthened status validation refuses when
        // the fields change: a controller write it refuses would be retried
        // for ever (docs/bad-input.md, "inconsistent status we write").
        let ready = s.ready.unwrap_or(0);
        assert!(
            (0..=s.active.unwrap_or(0)).contains(&ready),
            "ready above active: {s:?}"
        );
        assert_eq!(
            s.completion_time.is_some(),
            is("Complete"),
            "completionTime exactly with Complete: {s:?}"
        );
        if let (Some(start), Some(done)) = (&s.start_time, &s.completion_time) {
            assert!(done.0 >= start.0, "completionTime before startTime: {s:?}");
        }
        if is("Complete") || is("Failed") {
            assert!(s.start_time.is_some(), "finished without startTime: {s:?}");
        }
        if is("Complete") || is("Failed") {
            assert!(
                self.prev_s.is_empty() && self.prev_f.is_empty(),
                "terminal with uncounted"
            );
            assert_eq!(s.active, None, "terminal with active");
            assert_eq!(s.terminating.unwrap_or(0), 0, "terminal with terminating");
            if let Some(t) = &self.terminal {
                assert_eq!(t, &cs, "terminal conditions changed");
            }
            self.terminal = Some(cs);
        } else {
            assert!(self.terminal.is_none(), "terminal condition removed");
        }
    }
}

fn finished(w: &World) -> bool {
    let s = w.job.status.clone().unwrap_or_default();
    conditions(&s)
        .iter()
        .any(|c| (c.0 == "Complete" || c.0 == "Failed") && c.1 == "True")
}

/// One sync (the shipped one also runs for a finished Job, and must write
/// nothing), plus the checks that need the pods before and after.
fn checked_sync(w: &mut World, c: &mut Checker, crash_: Crash) -> Report {
    let before: HashMap<String, (String, bool)> = w
        .pods
        .iter()
        .map(|p| (uid(p), (phase(p).to_string(), has_tracking_finalizer(p))))
        .collect();
    let r = w.sync(crash_);
    for s in &r.writes {
        c.on_write(s);
    }
    let after: HashMap<String, bool> = w
        .pods
        .iter()
        .map(|p| (uid(p), has_tracking_finalizer(p)))
        .collect();
    for (id, (ph, had)) in &before {
        let lost = *had && !after.get(id).copied().unwrap_or(false);
        if !lost {
            continue;
        }
        let recorded_s = c.counted_s.contains(id) || c.prev_s.contains(id);
        let recorded_f = c.counted_f.contains(id) || c.prev_f.contains(id);
        match ph.as_str() {
            "Succeeded" if !c.indexed => {
                assert!(
                    recorded_s || recorded_f,
                    "{id} released before being recorded"
                );
            }
            "Failed" if !c.ignored_failures => {
                assert!(recorded_f, "failed {id} released before being recorded")
            }
            _ => {}
        }
    }
    if !r.crashed {
        let spec = w.job.spec.clone().unwrap_or_default();
        let active = w.pods.iter().filter(|p| is_active(p)).count();
        let active = i32::try_from(active).unwrap_or(i32::MAX);
        let succeeded = w.job.status.as_ref().and_then(|s| s.succeeded).unwrap_or(0);
        assert!(
            active <= spec.parallelism.unwrap_or(1).max(0),
            "active above parallelism"
        );
        if let Some(comp) = spec.completions {
            assert!(
                active <= (comp - succeeded).max(0),
                "active above remaining completions"
            );
        }
    }
    r
}

/// Applies one op to the world (ops that find no matching pod do nothing).
fn apply(w: &mut World, c: &mut Checker, op: &Op) {
    let now = w.now;
    let pick = |w: &mut World, i: usize, f: &dyn Fn(&Pod) -> bool| -> Option<usize> {
        let idx: Vec<usize> = (0..w.pods.len()).filter(|&k| f(&w.pods[k])).collect();
        (!idx.is_empty()).then(|| idx[i % idx.len()])
    };
    match *op {
        Op::Sync(cr) => {
            let r = checked_sync(w, c, cr);
            if cr == Crash::None {
                replay(w, c, &r);
            }
        }
        Op::Run(i) => {
            if let Some(k) = pick(w, i, &|p| is_active(p) && phase(p) == "Pending") {
                let p = &mut w.pods[k];
                p.spec.get_or_insert_with(Default::default).node_name = Some("node".into());
                p.status.get_or_insert_with(Default::default).phase = Some("Running".into());
                w.pods[k] = ready(w.pods[k].clone());
            }
        }
        Op::Succeed(i) | Op::Fail(i) => {
            // Some failures exit 42, which the FailJob rule of `pfp` matches.
            let code = match op {
                Op::Fail(_) if i % 4 == 0 => 42,
                Op::Fail(_) => 1,
                _ => 0,
            };
            if let Some(k) = pick(w, i, &|p| !is_terminal(p)) {
                let p = &mut w.pods[k];
                p.status.get_or_insert_with(Default::default).phase =
                    Some(if code == 0 { "Succeeded" } else { "Failed" }.into());
                set_exit(p, code, now);
            }
        }
        Op::Delete(i) => {
            if let Some(k) = pick(w, i, &|p| p.metadata.deletion_timestamp.is_none()) {
                w.pods[k].metadata.deletion_timestamp = Some(Time(now));
            }
        }
        Op::KubeletStop(i) => {
            if let Some(k) = pick(w, i, &crate::sync::tests::world::full::is_terminating) {
                let p = &mut w.pods[k];
                p.status.get_or_insert_with(Default::default).phase = Some("Failed".into());
                set_exit(p, 137, now);
            }
        }
        Op::Advance(s) => w.advance(s),
        Op::Parallelism(n) => {
            if let Some(s) = w.job.spec.as_mut() {
                s.parallelism = Some(n);
            }
        }
        Op::Suspend(b) => {
            if let Some(s) = w.job.spec.as_mut() {
                s.suspend = Some(b);
            }
        }
    }
    w.gc();
}

/// Replays syncs with nothing changed: a fixed point within 3 syncs, and
/// no counter moves.
fn replay(w: &mut World, c: &mut Checker, _first: &Report) {
    let counters = |w: &World| {
        let s = w.job.status.clone().unwrap_or_default();
        (s.succeeded, s.failed)
    };
    let before = counters(w);
    for _ in 0..3 {
        let r = checked_sync(w, c, Crash::None);
        assert_eq!(counters(w), before, "a replayed sync changed the counters");
        let quiet = r.writes.is_empty()
            && match &r.work {
                PodWork::Nothing | PodWork::Backoff(_) => true,
                // A suspended Job "removes" its zero active pods every sync.
                PodWork::Remove(p) | PodWork::DeleteActive(p) => p.is_empty(),
                PodWork::Create(p) => p.is_empty(),
            };
        if quiet {
            return;
        }
    }
    panic!("no fixed point after 3 replayed syncs");
}

/// Lets everything run to the end: resumed, every pod succeeds, time
/// jumps past any back-off.
fn drain(w: &mut World, c: &mut Checker, parallelism: i32) {
    if let Some(s) = w.job.spec.as_mut() {
        s.suspend = Some(false);
        s.parallelism = Some(parallelism);
    }
    for _ in 0..60 {
        if finished(w) {
            break;
        }
        w.advance(700);
        checked_sync(w, c, Crash::None);
        for p in &mut w.pods {
            if !is_terminal(p) {
                let failed = p.metadata.deletion_timestamp.is_some();
                p.status.get_or_insert_with(Default::default).phase =
                    Some(if failed { "Failed" } else { "Succeeded" }.into());
                set_exit(p, i32::from(failed), w.now);
            }
        }
        w.gc();
    }
    assert!(finished(w), "the Job never finished: {:#?}", w.job.status);
    assert!(
        w.pods.iter().all(|p| !has_tracking_finalizer(p)),
        "finalizers left on a finished Job's pods"
    );
    let s = w.job.status.clone().unwrap_or_default();
    if types(&s).iter().any(|t| t == "Complete") {
        assert!(s.succeeded.unwrap_or(0) >= c.completions);
    }
}

/// The Job under test; `prp == "FailJob"` means a FailJob rule on exit
/// code 42 (with podReplacementPolicy Failed, as validation requires).
fn run_model(indexed: bool, completions: i32, parallelism: i32, limit: i32, prp: &str, ops: &[Op]) {
    let mut spec = json!({"completions": completions, "parallelism": parallelism,
        "backoffLimit": limit, "podReplacementPolicy": prp});
    if prp == "FailJob" {
        spec["podReplacementPolicy"] = json!("Failed");
        spec["podFailurePolicy"] = json!({"rules": [{"action": "FailJob",
            "onExitCodes": {"operator": "In", "values": [42]}}]});
    }
    if prp == "Ignore" {
        // Every failure Op::Fail produces (exit 1 or 42) is ignored.
        spec["podReplacementPolicy"] = json!("Failed");
        spec["podFailurePolicy"] = json!({"rules": [{"action": "Ignore",
            "onExitCodes": {"operator": "In", "values": [1, 42]}}]});
    }
    if indexed {
        spec["completionMode"] = json!("Indexed");
    }
    let mut w = World::new(job(spec));
    let mut c = Checker {
        indexed,
        completions,
        ignored_failures: prp == "Ignore",
        ..Default::default()
    };
    for op in ops {
        apply(&mut w, &mut c, op);
        if prp == "Ignore" {
            let failed = w.job.status.as_ref().and_then(|s| s.failed).unwrap_or(0);
            assert_eq!(
                failed, 0,
                "an ignored failure changed status.failed after {op:?}"
            );
        }
    }
    drain(&mut w, &mut c, parallelism);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn nonindexed_invariants(
        completions in 1i32..7,
        parallelism in 1i32..4,
        limit in 0i32..8,
        prp in prop_oneof![Just("TerminatingOrFailed"), Just("Failed"), Just("FailJob")],
        ops in proptest::collection::vec(op(), 0..60),
    ) {
        run_model(false, completions, parallelism, limit, prp, &ops);
    }

    /// Ignore never changes `status.failed` (failures only from Op::Fail,
    /// all matched by the Ignore rule; no deletions, whose exit 137 counts).
    #[test]
    fn ignore_never_counts(
        completions in 1i32..6,
        parallelism in 1i32..4,
        ops in proptest::collection::vec(
            op().prop_filter("no deletions", |o| !matches!(o, Op::Delete(_) | Op::KubeletStop(_) | Op::Parallelism(_) | Op::Suspend(_))),
            0..60,
        ),
    ) {
        run_model(false, completions, parallelism, 0, "Ignore", &ops);
    }

    #[test]
    fn indexed_invariants(
        completions in 1i32..6,
        parallelism in 1i32..4,
        limit in 0i32..8,
        prp in prop_oneof![Just("TerminatingOrFailed"), Just("Failed"), Just("FailJob")],
        ops in proptest::collection::vec(op(), 0..60),
    ) {
        run_model(true, completions, parallelism, limit, prp, &ops);
    }
}
