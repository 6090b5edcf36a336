//! The compressed index-set representation behind `status.completedIndexes`,
//! `status.failedIndexes` and `successPolicy.rules[].succeededIndexes`
//! (upstream `orderedIntervals` in indexed_job_utils.go).

use std::fmt;

/// An ordered list of inclusive `(first, last)` index intervals.
///
/// Every constructor in this crate that derives a list from pods or merges
/// sorted input keeps the list sorted, disjoint and non-adjacent. Lists parsed
/// from API strings ([`OrderedIntervals::parse`]) are taken as written (minus
/// inverted pieces), so a hand-edited status such as `"5,2"` yields an
/// unsorted list; like upstream, no repair is attempted there and the other
/// methods then give well-defined but not meaningful answers (they never
/// panic). [`OrderedIntervals::merge`] sorts and coalesces, so what the
/// controller writes back is always well formed.
#[derive(Debug, Clone, PartialEq, Eq, Default, Hash)]
pub struct OrderedIntervals(Vec<(i32, i32)>);

impl OrderedIntervals {
    /// The empty list.
    pub fn new() -> Self {
        Self::default()
    }

    /// Wraps intervals as they are. The caller promises they are sorted,
    /// disjoint and non-adjacent (with `first <= last`); nothing is checked.
    pub fn from_intervals(intervals: Vec<(i32, i32)>) -> Self {
        Self(intervals)
    }

    /// The inclusive `(first, last)` pairs.
    pub fn intervals(&self) -> &[(i32, i32)] {
        &self.0
    }

    /// No intervals at all.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Parses an interval string such as `"1,3-5,7"` against `completions`
    /// (upstream `parseIndexesFromString`), with upstream's exact leniency:
    ///
    /// * `""` is the empty list;
    /// * the string is split on `,`, each piece on `-` (pieces beyond the
    ///   second are ignored, so `"1-2-3"` reads as `1-2`);
    /// * a piece whose start does not parse is skipped;
    /// * the first start `>= completions` ends parsing (later pieces are
    ///   dropped even if they are smaller);
    /// * a piece whose end does not parse is skipped; an end
    ///   `>= completions` is clamped to `completions - 1`;
    /// * a piece whose end is below its start (`"4-1"`) is skipped.
    ///   Deliberate deviation: upstream keeps it, its `total()` is then
    ///   negative and becomes `status.succeeded`, which the API server
    ///   refuses on every write (counters must be >= 0), so the Job's status
    ///   could never be written again;
    /// * a piece starting right after the previous interval's end extends it;
    /// * nothing is sorted and overlaps are kept.
    ///
    /// Numbers follow Go's `strconv.Atoi` on 64-bit platforms (an optional `+`,
    /// decimal digits, no spaces), which `i64::from_str` matches.
    pub fn parse(s: &str, completions: i32) -> Self {
        let mut out: Vec<(i32, i32)> = Vec::new();
        if s.is_empty() {
            return Self(out);
        }
        let limit = i64::from(completions);
        // Upstream logs these at level 0 ("Corrupted indexes interval,
        // ignoring"); so does this, at info. Only a hand-edited status gets
        // here, and the next status write replaces it with a clean string.
        let corrupted = |piece: &str| {
            tracing::info!(
                interval = piece,
                indexes = s,
                "corrupted indexes interval, ignoring"
            );
        };
        for piece in s.split(',') {
            let mut limits = piece.split('-');
            let Some(first) = limits.next().and_then(|f| f.parse::<i64>().ok()) else {
                corrupted(piece);
                continue;
            };
            if first >= limit {
                break;
            }
            let last = match limits.next() {
                None => first,
                Some(raw) => match raw.parse::<i64>() {
                    Ok(l) => l.min(limit - 1),
                    Err(_) => {
                        corrupted(piece);
                        continue;
                    }
                },
            };
            if last < first {
                corrupted(piece);
                continue;
            }
            // Both bounds are below `completions` here, and neither can carry
            // a minus sign (it is the separator), so the conversions succeed;
            // they are checked only to stay panic-free.
            let (Ok(first), Ok(last)) = (i32::try_from(first), i32::try_from(last)) else {
                continue;
            };
            match out.last_mut() {
                Some(prev) if i64::from(prev.1) == i64::from(first) - 1 => prev.1 = last,
                _ => out.push((first, last)),
            }
        }
        Self(out)
    }

    /// A new list that also contains `new_sorted`, which must be in
    /// increasing order (upstream `withOrderedIndexes`).
    pub fn with_ordered_indexes(&self, new_sorted: &[i32]) -> Self {
        let singles = Self(new_sorted.iter().map(|&i| (i, i)).collect());
        self.merge(&singles)
    }

    /// The union of two sorted lists, coalescing overlapping and adjacent
    /// intervals (upstream `merge`: a two-way merge by interval start).
    pub fn merge(&self, other: &Self) -> Self {
        let mut out: Vec<(i32, i32)> = Vec::with_capacity(self.0.len() + other.0.len());
        let mut a = self.0.iter().copied().peekable();
        let mut b = other.0.iter().copied().peekable();
        loop {
            let next = match (a.peek(), b.peek()) {
                (Some(x), Some(y)) if x.0 < y.0 => a.next(),
                (Some(_), Some(_)) | (None, _) => b.next(),
                (Some(_), None) => a.next(),
            };
            let Some(iv) = next else { break };
            match out.last_mut() {
                Some(last) if i64::from(iv.0) <= i64::from(last.1) + 1 => {
                    if last.1 < iv.1 {
                        last.1 = iv.1;
                    }
                }
                _ => out.push(iv),
            }
        }
        Self(out)
    }

    /// Sum of interval lengths, computed without overflow.
    pub(crate) fn total_i64(&self) -> i64 {
        self.0
            .iter()
            .map(|&(f, l)| i64::from(l) - i64::from(f) + 1)
            .sum()
    }

    /// Number of indexes in the list (upstream `total`); saturates at the
    /// `i32` range, which only malformed parsed lists can reach.
    pub fn total(&self) -> i32 {
        let t = self.total_i64();
        i32::try_from(t).unwrap_or(if t < 0 { i32::MIN } else { i32::MAX })
    }

    /// Whether `ix` is in the list (upstream `has`: binary search for the
    /// first interval ending at or after `ix`).
    pub fn has(&self, ix: i32) -> bool {
        // Hand-rolled rather than `partition_point` so that the answer on a
        // malformed (unsorted) list is the same as upstream's.
        let (mut lo, mut hi) = (0usize, self.0.len());
        while hi > lo {
            let mid = lo + (hi - lo) / 2;
            if self.0.get(mid).is_some_and(|iv| iv.1 >= ix) {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        self.0.get(hi).is_some_and(|iv| iv.0 <= ix)
    }

    /// Every index, interval by interval (an inverted interval yields none).
    pub fn iter(&self) -> impl Iterator<Item = i32> + '_ {
        self.0.iter().flat_map(|&(f, l)| f..=l)
    }
}

/// Upstream's string form: comma-separated; runs of three or more as
/// `first-last`, runs of two as `a,b`, singletons as is; empty → `""`.
impl fmt::Display for OrderedIntervals {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (n, &(first, last)) in self.0.iter().enumerate() {
            if n > 0 {
                f.write_str(",")?;
            }
            write!(f, "{first}")?;
            if last > first {
                let sep = if i64::from(last) == i64::from(first) + 1 {
                    ','
                } else {
                    '-'
                };
                write!(f, "{sep}{last}")?;
            }
        }
        Ok(())
    }
}
