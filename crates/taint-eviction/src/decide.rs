//! The pure part of the taint manager: which taints count, which toleration
//! covers which taint, how long a pod may stay, and what to do about it.
//! No client, no clock, no globals: `now` is an argument.

use std::time::Duration;

use k8s_openapi::api::core::v1::Taint;
use kcm_pod::Toleration;
use tokio::time::Instant;

/// The only taint effect this controller acts on.
pub const NO_EXECUTE: &str = "NoExecute";

/// The longest toleration a Go `time.Duration` can express (its nanosecond
/// count is an int64, about 292 years). Upstream multiplies
/// `tolerationSeconds` by `time.Second` and treats `math.MaxInt64` as
/// "forever"; longer values overflow there. We treat every value above this
/// bound as forever instead of wrapping.
pub const MAX_TOLERATION_SECONDS: i64 = i64::MAX / 1_000_000_000;

/// The node's `NoExecute` taints, in node order.
pub fn no_execute_taints(taints: &[Taint]) -> Vec<Taint> {
    taints
        .iter()
        .filter(|t| t.effect == NO_EXECUTE)
        .cloned()
        .collect()
}

/// Whether two taint lists are the same for this controller: same order and,
/// per taint, same key, value, effect and time added (an absent value equals
/// an empty one, as in Go).
pub fn same_taints(a: &[Taint], b: &[Taint]) -> bool {
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            x.key == y.key
                && x.value.as_deref().unwrap_or("") == y.value.as_deref().unwrap_or("")
                && x.effect == y.effect
                && x.time_added == y.time_added
        })
}

/// `Toleration.ToleratesTaint` (k8s.io/api core/v1, 1.34): a non-empty
/// effect or key must be equal; operator `Exists` matches any value, `Equal`
/// or empty needs equal values; any other operator matches nothing.
/// `tolerationSeconds` plays no part in matching.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect = toleration.effect.as_deref().unwrap_or("");
    if !effect.is_empty() && effect != taint.effect {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or("");
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("") {
        "" | "Equal" => {
            toleration.value.as_deref().unwrap_or("") == taint.value.as_deref().unwrap_or("")
        }
        "Exists" => true,
        _ => false,
    }
}

/// `GetMatchingTolerations`: for each taint in order, the first toleration
/// in pod order that tolerates it; `None` when some taint is not tolerated.
/// No taints means `Some(empty)`.
pub fn matching_tolerations<'a>(
    taints: &[Taint],
    tolerations: &'a [Toleration],
) -> Option<Vec<&'a Toleration>> {
    taints
        .iter()
        .map(|taint| tolerations.iter().find(|t| tolerates(t, taint)))
        .collect()
}

/// How long the picked tolerations let a pod stay.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MinToleration {
    /// Evict at once: some picked toleration has `tolerationSeconds <= 0`
    /// (or, as upstream, nothing was picked at all).
    Now,
    /// Evict after the smallest positive `tolerationSeconds`.
    After(Duration),
    /// Stay forever: no picked toleration has a usable `tolerationSeconds`.
    Forever,
}

/// `getMinTolerationTime` without overflow: any `tolerationSeconds <= 0`
/// wins as [`MinToleration::Now`]; unset ones, and ones above
/// [`MAX_TOLERATION_SECONDS`], mean forever and are ignored; otherwise the
/// smallest value.
pub fn min_toleration_time(used: &[&Toleration]) -> MinToleration {
    if used.is_empty() {
        return MinToleration::Now;
    }
    let mut min: Option<u64> = None;
    for seconds in used.iter().filter_map(|t| t.toleration_seconds) {
        if seconds <= 0 {
            return MinToleration::Now;
        }
        if seconds > MAX_TOLERATION_SECONDS {
            continue;
        }
        let seconds = seconds.unsigned_abs();
        min = Some(min.map_or(seconds, |m| m.min(seconds)));
    }
    match min {
        Some(s) => MinToleration::After(Duration::from_secs(s)),
        None => MinToleration::Forever,
    }
}

/// What to do about one pod on one node (`processPodOnNode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    /// Withdraw a scheduled eviction, if any (taints gone, or tolerated
    /// forever).
    Cancel,
    /// A taint is not tolerated: withdraw any scheduled eviction and evict
    /// at once.
    EvictNow,
    /// Schedule an eviction at this instant (at or before `now` means at
    /// once); no eviction is scheduled yet.
    EvictAt(Instant),
    /// Leave things as they are: an eviction is already scheduled (it keeps
    /// its original time), or the deadline lies beyond what a clock can hold.
    Nothing,
}

/// Decides for a pod with `tolerations` on a node whose NoExecute taints are
/// `taints`. `scheduled` says whether an eviction of this pod is already
/// scheduled or running.
///
/// An existing eviction is never moved by later finite changes: upstream
/// compares `createdAt + min` with `now + min`, which keeps the old timer
/// whenever it was created earlier. Only "not tolerated" (evict now) and
/// "tolerated forever / no taints" (cancel) change it.
pub fn decide(
    taints: &[Taint],
    tolerations: &[Toleration],
    scheduled: bool,
    now: Instant,
) -> Decision {
    if taints.is_empty() {
        return Decision::Cancel;
    }
    let Some(used) = matching_tolerations(taints, tolerations) else {
        return Decision::EvictNow;
    };
    match min_toleration_time(&used) {
        MinToleration::Forever => Decision::Cancel,
        _ if scheduled => Decision::Nothing,
        MinToleration::Now => Decision::EvictAt(now),
        MinToleration::After(d) => now
            .checked_add(d)
            .map_or(Decision::Nothing, Decision::EvictAt),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(
        key: Option<&str>,
        op: Option<&str>,
        value: Option<&str>,
        effect: Option<&str>,
        seconds: Option<i64>,
    ) -> Toleration {
        Toleration {
            key: key.map(Into::into),
            operator: op.map(Into::into),
            value: value.map(Into::into),
            effect: effect.map(Into::into),
            toleration_seconds: seconds,
        }
    }

    fn exists(key: &str, seconds: Option<i64>) -> Toleration {
        tol(Some(key), Some("Exists"), None, Some(NO_EXECUTE), seconds)
    }

    #[test]
    fn only_no_execute_taints_count() {
        let all = vec![
            taint("a", None, "NoSchedule"),
            taint("b", None, NO_EXECUTE),
            taint("c", None, "PreferNoSchedule"),
            taint("d", Some("x"), NO_EXECUTE),
        ];
        let keys: Vec<_> = no_execute_taints(&all).into_iter().map(|t| t.key).collect();
        assert_eq!(keys, ["b", "d"]);
    }

    #[test]
    fn taint_lists_compare_in_order_with_empty_values_equal() {
        let a = vec![taint("a", None, NO_EXECUTE), taint("b", None, NO_EXECUTE)];
        let mut b = a.clone();
        assert!(same_taints(&a, &b));
        b[0].value = Some(String::new());
        assert!(same_taints(&a, &b), "nil and empty value are equal");
        b.swap(0, 1);
        assert!(!same_taints(&a, &b), "order matters");
        let mut c = a.clone();
        c[1].time_added = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            jiff::Timestamp::UNIX_EPOCH,
        ));
        assert!(!same_taints(&a, &c), "timeAdded matters");
        assert!(!same_taints(&a, &a[..1]));
    }

    #[test]
    fn toleration_matching_rules() {
        let t = taint("k", Some("v"), NO_EXECUTE);
        // Equal (explicit or empty operator) needs equal values.
        assert!(tolerates(
            &tol(Some("k"), Some("Equal"), Some("v"), None, None),
            &t
        ));
        assert!(tolerates(&tol(Some("k"), None, Some("v"), None, None), &t));
        assert!(!tolerates(&tol(Some("k"), None, Some("w"), None, None), &t));
        assert!(!tolerates(&tol(Some("k"), None, None, None, None), &t));
        // Exists ignores the value; an empty key with Exists matches all keys.
        assert!(tolerates(
            &tol(Some("k"), Some("Exists"), None, None, None),
            &t
        ));
        assert!(tolerates(&tol(None, Some("Exists"), None, None, None), &t));
        assert!(tolerates(
            &tol(Some(""), Some("Exists"), None, Some(""), None),
            &t
        ));
        // Key and effect must match when set.
        assert!(!tolerates(
            &tol(Some("x"), Some("Exists"), None, None, None),
            &t
        ));
        assert!(!tolerates(
            &tol(Some("k"), Some("Exists"), None, Some("NoSchedule"), None),
            &t
        ));
        assert!(tolerates(
            &tol(Some("k"), Some("Exists"), None, Some(NO_EXECUTE), None),
            &t
        ));
        // Unknown operators (and the 1.35+ Lt/Gt, gate off in 1.34) never match.
        assert!(!tolerates(
            &tol(Some("k"), Some("Lt"), Some("9"), None, None),
            &t
        ));
        assert!(!tolerates(
            &tol(Some("k"), Some("exists"), None, None, None),
            &t
        ));
        // An empty taint value equals an absent one.
        let bare = taint("k", None, NO_EXECUTE);
        assert!(tolerates(
            &tol(Some("k"), None, Some(""), None, None),
            &bare
        ));
    }

    #[test]
    fn first_matching_toleration_per_taint_is_picked() {
        let taints = vec![taint("a", None, NO_EXECUTE), taint("b", None, NO_EXECUTE)];
        let tols = vec![
            exists("a", Some(10)),
            tol(None, Some("Exists"), None, None, None),
            exists("b", Some(1)),
        ];
        let used = matching_tolerations(&taints, &tols).expect("all tolerated");
        assert_eq!(used.len(), 2);
        assert_eq!(used[0].toleration_seconds, Some(10));
        assert_eq!(used[1].toleration_seconds, None, "the wildcard comes first");
        assert_eq!(
            min_toleration_time(&used),
            MinToleration::After(Duration::from_secs(10))
        );

        assert!(matching_tolerations(&taints, &tols[..1]).is_none());
        assert!(matching_tolerations(&taints, &[]).is_none());
        assert_eq!(matching_tolerations(&[], &tols).map(|v| v.len()), Some(0));
        // One toleration may be picked for several taints.
        let wide = vec![tol(None, Some("Exists"), None, None, Some(5))];
        assert_eq!(
            matching_tolerations(&taints, &wide).map(|v| v.len()),
            Some(2)
        );
    }

    #[test]
    fn min_toleration_time_edges() {
        let s = |v: Option<i64>| exists("k", v);
        let min = |v: &[Option<i64>]| {
            let tols: Vec<Toleration> = v.iter().map(|x| s(*x)).collect();
            let refs: Vec<&Toleration> = tols.iter().collect();
            min_toleration_time(&refs)
        };
        let after = |secs: u64| MinToleration::After(Duration::from_secs(secs));
        assert_eq!(min(&[]), MinToleration::Now);
        assert_eq!(min(&[None]), MinToleration::Forever);
        assert_eq!(min(&[None, None]), MinToleration::Forever);
        assert_eq!(min(&[Some(30), None, Some(7)]), after(7));
        assert_eq!(min(&[Some(30), Some(0)]), MinToleration::Now);
        assert_eq!(min(&[Some(30), Some(-5)]), MinToleration::Now);
        assert_eq!(min(&[Some(i64::MIN)]), MinToleration::Now);
        assert_eq!(min(&[Some(i64::MIN), Some(i64::MAX)]), MinToleration::Now);
        assert_eq!(min(&[Some(i64::MAX)]), MinToleration::Forever);
        assert_eq!(min(&[Some(i64::MAX), Some(3)]), after(3));
        assert_eq!(
            min(&[Some(MAX_TOLERATION_SECONDS + 1)]),
            MinToleration::Forever
        );
        assert_eq!(
            min(&[Some(MAX_TOLERATION_SECONDS)]),
            after(MAX_TOLERATION_SECONDS.unsigned_abs())
        );
        assert_eq!(min(&[Some(1)]), after(1));
    }

    #[test]
    fn decisions() {
        let now = Instant::now();
        let taints = vec![taint("a", None, NO_EXECUTE)];
        // No taints: cancel (upstream would go on to evict; see the spec).
        assert_eq!(decide(&[], &[], true, now), Decision::Cancel);
        // Not tolerated: evict now, whether or not something is scheduled.
        assert_eq!(decide(&taints, &[], false, now), Decision::EvictNow);
        assert_eq!(
            decide(&taints, &[exists("b", None)], true, now),
            Decision::EvictNow
        );
        // Tolerated forever: cancel.
        assert_eq!(
            decide(&taints, &[exists("a", None)], true, now),
            Decision::Cancel
        );
        assert_eq!(
            decide(&taints, &[exists("a", Some(i64::MAX))], false, now),
            Decision::Cancel
        );
        // Finite: schedule once, then keep the first schedule.
        assert_eq!(
            decide(&taints, &[exists("a", Some(30))], false, now),
            Decision::EvictAt(now + Duration::from_secs(30))
        );
        assert_eq!(
            decide(&taints, &[exists("a", Some(30))], true, now),
            Decision::Nothing
        );
        assert_eq!(
            decide(&taints, &[exists("a", Some(1))], true, now),
            Decision::Nothing
        );
        // Zero or negative seconds: due now, but an existing timer is kept.
        assert_eq!(
            decide(&taints, &[exists("a", Some(0))], false, now),
            Decision::EvictAt(now)
        );
        assert_eq!(
            decide(&taints, &[exists("a", Some(i64::MIN))], false, now),
            Decision::EvictAt(now)
        );
        assert_eq!(
            decide(&taints, &[exists("a", Some(-1))], true, now),
            Decision::Nothing
        );
        // The largest finite toleration does not overflow.
        assert!(matches!(
            decide(
                &taints,
                &[exists("a", Some(MAX_TOLERATION_SECONDS))],
                false,
                now
            ),
            Decision::EvictAt(_) | Decision::Nothing
        ));
    }

    #[test]
    fn taints_added_and_removed() {
        let now = Instant::now();
        let tols = vec![exists("a", Some(60))];
        let a = taint("a", None, NO_EXECUTE);
        let b = taint("b", None, NO_EXECUTE);
        // A tolerated taint schedules; adding an untolerated one evicts now.
        let only_a = std::slice::from_ref(&a);
        assert!(matches!(
            decide(only_a, &tols, false, now),
            Decision::EvictAt(_)
        ));
        assert_eq!(
            decide(&[a.clone(), b.clone()], &tols, true, now),
            Decision::EvictNow
        );
        // Removing the untolerated one again keeps the existing schedule.
        assert_eq!(decide(only_a, &tols, true, now), Decision::Nothing);
        // Removing every taint cancels.
        assert_eq!(decide(&[], &tols, true, now), Decision::Cancel);
        // Only the untolerated one: evict now.
        assert_eq!(decide(&[b], &tols, false, now), Decision::EvictNow);
    }
}
