//! Mixed outcomes for benchmarks: `sim.kcm-rs.io/outcomes` gives weighted
//! outcomes (`70=0,10=42,10=condition:DisruptionTarget:TerminationByKubelet,10=1`)
//! and `sim.kcm-rs.io/run` may be a range (`1s..3s`). Every pod of a Job
//! gets a draw from a hash of the Job's name and the pod's ordinal among the
//! Job's pods as the simulator sees them, so two runs of the same workload
//! (upstream and kcm-rs) see the same sequence of outcomes per Job.

use std::time::Duration;

use super::{PlanError, parse_duration};

pub const ANN_OUTCOMES: &str = "sim.kcm-rs.io/outcomes";

/// One weighted outcome.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Every container exits with this code.
    Exit(i32),
    /// The pod fails with this condition (`Type`, `Reason`), exit code 137.
    Condition(String, String),
}

/// Parses `WEIGHT=OUTCOME,...`; OUTCOME is an exit code or
/// `condition:Type:Reason`.
pub fn parse_outcomes(v: &str) -> Result<Vec<(u64, Outcome)>, PlanError> {
    let err = |why: String| PlanError {
        key: ANN_OUTCOMES,
        value: v.to_string(),
        why,
    };
    let mut out = Vec::new();
    for part in v.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (w, o) = part
            .split_once('=')
            .ok_or_else(|| err(format!("{part:?} lacks '='")))?;
        let w: u64 = w
            .trim()
            .parse()
            .map_err(|_| err(format!("weight {w:?} is not a whole number")))?;
        let o = o.trim();
        let outcome = match o.strip_prefix("condition:") {
            Some(rest) => {
                let (t, r) = rest.split_once(':').unwrap_or((rest, "Simulated"));
                if t.trim().is_empty() {
                    return Err(err("empty condition type".into()));
                }
                Outcome::Condition(t.trim().into(), r.trim().into())
            }
            None => Outcome::Exit(o.parse().map_err(|_| {
                err(format!(
                    "outcome {o:?} is neither an exit code nor condition:Type:Reason"
                ))
            })?),
        };
        out.push((w, outcome));
    }
    if out.iter().map(|(w, _)| w).sum::<u64>() == 0 {
        return Err(err("weights sum to zero".into()));
    }
    Ok(out)
}

/// Picks the outcome a draw selects.
pub fn pick(outcomes: &[(u64, Outcome)], draw: u64) -> Option<&Outcome> {
    let total: u64 = outcomes.iter().map(|(w, _)| w).sum();
    if total == 0 {
        return None;
    }
    let mut x = draw % total;
    for (w, o) in outcomes {
        if x < *w {
            return Some(o);
        }
        x -= w;
    }
    None
}

/// Parses `D` or `LOW..HIGH`; a range picks a duration by `draw`, in
/// 100 ms steps.
pub fn parse_run(v: &str, draw: u64) -> Result<Option<Duration>, String> {
    let Some((lo, hi)) = v.split_once("..") else {
        return parse_duration(v);
    };
    let lo = parse_duration(lo)?.ok_or("a range cannot start at never")?;
    let hi = parse_duration(hi)?.ok_or("a range cannot end at never")?;
    if hi < lo {
        return Err(format!("{v:?}: the range ends before it starts"));
    }
    let steps = ((hi - lo).as_millis() / 100) as u64;
    let step = draw.rotate_right(17) % (steps + 1);
    Ok(Some(lo + Duration::from_millis(step * 100)))
}

/// FNV-1a of the Job's key and the pod's ordinal: stable across processes
/// and runs, unlike std's randomly seeded hasher.
pub fn draw(job_key: &str, ordinal: u64) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in job_key.bytes().chain(ordinal.to_le_bytes()) {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    // Mix the high bits down so `% small` uses all of them.
    h ^ (h >> 29)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_parse_and_pick_by_weight() -> Result<(), PlanError> {
        let o =
            parse_outcomes("70=0, 10=42,10=condition:DisruptionTarget:TerminationByKubelet,10=1")?;
        assert_eq!(o.len(), 4);
        assert_eq!(pick(&o, 0), Some(&Outcome::Exit(0)));
        assert_eq!(pick(&o, 75), Some(&Outcome::Exit(42)));
        assert_eq!(
            pick(&o, 85),
            Some(&Outcome::Condition(
                "DisruptionTarget".into(),
                "TerminationByKubelet".into()
            ))
        );
        assert_eq!(pick(&o, 199), Some(&Outcome::Exit(1)));
        // Over many ordinals the shares follow the weights.
        let fails = (0..10_000)
            .filter(|n| pick(&o, draw("ns/job-7", *n)) != Some(&Outcome::Exit(0)))
            .count();
        assert!((2_700..3_300).contains(&fails), "{fails}");
        Ok(())
    }

    #[test]
    fn bad_outcomes_are_errors() {
        for v in ["x=0", "10", "10=abc", "0=1", "10=condition:"] {
            assert!(parse_outcomes(v).is_err(), "{v}");
        }
    }

    #[test]
    fn run_ranges() {
        assert_eq!(parse_run("2s", 5), Ok(Some(Duration::from_secs(2))));
        for n in 0..200 {
            let d = parse_run("1s..3s", draw("j", n)).ok().flatten();
            assert!(d.is_some_and(|d| d >= Duration::from_secs(1) && d <= Duration::from_secs(3)));
        }
        assert!(parse_run("3s..1s", 0).is_err());
        assert!(parse_run("1s..never", 0).is_err());
    }

    #[test]
    fn draws_are_stable() {
        assert_eq!(draw("a", 1), draw("a", 1));
        assert_ne!(draw("a", 1), draw("a", 2));
    }
}
