//! Every gate kube-controller-manager of each supported minor accepts, with
//! its default, stage and lock, and (1.35+) the gates each depends on. The
//! data files in `gates/` were generated from each release's registered
//! gate set (see `docs/upstream-versions.md`). Under `--emulated-version`
//! the binary's versioned specs (`docs/upstream-gates/1.N.versioned.txt`)
//! give each gate as that older minor had it (component-base's
//! `featureSpecAtEmulationVersion`).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::{Emulation, KubeVersion};

/// A gate's maturity, as component-base labels it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    Alpha,
    Beta,
    Ga,
    Deprecated,
}

/// One gate as a KCM release registers it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GateSpec {
    pub name: &'static str,
    pub default: bool,
    pub stage: Stage,
    /// Set to anything but `default` is refused.
    pub locked: bool,
}

/// The gates of one KCM minor, at one emulation version.
#[derive(Debug)]
pub struct Table {
    pub version: KubeVersion,
    pub emulation: Emulation,
    /// The gates available at the emulation version (not PRE-ALPHA).
    gates: HashMap<&'static str, GateSpec>,
    /// Every gate the binary registers, available or not.
    known: Vec<&'static str>,
    deps: HashMap<&'static str, Vec<&'static str>>,
}

impl Table {
    /// The table of `version`, not emulating.
    pub fn of(version: KubeVersion) -> &'static Table {
        Table::at(Emulation::of(version))
    }

    /// The table of a binary at an emulation version.
    pub fn at(emulation: Emulation) -> &'static Table {
        static TABLES: OnceLock<Vec<Table>> = OnceLock::new();
        let all = TABLES.get_or_init(|| {
            Emulation::all()
                .map(|e| {
                    let own = Table::parse(e.binary(), gates_of(e.binary()), deps_of(e.binary()));
                    if e.is_emulating() {
                        own.emulated(e)
                    } else {
                        own
                    }
                })
                .collect()
        });
        all.iter()
            .find(|t| t.emulation == emulation)
            .unwrap_or_else(|| &all[0])
    }

    /// Whether the binary registers `name` (PRE-ALPHA at the emulation
    /// version included): setting such a gate is refused, not unknown.
    pub fn is_known(&self, name: &str) -> bool {
        self.known.contains(&name)
    }

    /// This (non-emulating) table seen at `emulation`: each gate's spec in
    /// force at that minor, PRE-ALPHA gates left out. A default KCM
    /// overrides at its own minor (1.34's `WatchListClient`) follows the
    /// spec it overrode.
    fn emulated(self, emulation: Emulation) -> Table {
        let versioned = versioned(self.version);
        let mut gates = HashMap::new();
        for (name, specs) in &versioned {
            let own = Emulation::of(self.version);
            let own = spec_index(specs, own.minor(), own.min_compatibility());
            let at = spec_index(specs, emulation.minor(), emulation.min_compatibility());
            let Some(at) = at else { continue };
            let mut spec = specs[at].1;
            if own == Some(at)
                && let Some(flat) = self.gates.get(name)
            {
                spec.default = flat.default;
            }
            gates.insert(*name, spec);
        }
        Table {
            emulation,
            gates,
            ..self
        }
    }

    fn parse(version: KubeVersion, gates: &'static str, deps: &'static str) -> Table {
        let rows = |text: &'static str| {
            text.lines()
                .map(str::trim)
                .filter(|l| !l.is_empty() && !l.starts_with('#'))
                .map(|l| l.split_whitespace().collect::<Vec<_>>())
        };
        let mut table = Table {
            version,
            emulation: Emulation::of(version),
            gates: HashMap::new(),
            known: Vec::new(),
            deps: HashMap::new(),
        };
        for cols in rows(gates) {
            // Generated data: a malformed row is a build-time mistake the
            // tests catch (`every_table_parses`); skip it here.
            let [name, default, stage, locked] = cols[..] else {
                continue;
            };
            let stage = stage_of(stage);
            table.known.push(name);
            table.gates.insert(
                name,
                GateSpec {
                    name,
                    default: default == "true",
                    stage,
                    locked: locked == "true",
                },
            );
        }
        table.known.sort_unstable();
        for cols in rows(deps) {
            if let [gate, rest @ ..] = &cols[..] {
                table.deps.insert(gate, rest.to_vec());
            }
        }
        table
    }

    pub fn get(&self, name: &str) -> Option<&GateSpec> {
        self.gates.get(name)
    }

    /// Every gate, in name order.
    pub fn gates(&self) -> Vec<&GateSpec> {
        let mut v: Vec<_> = self.gates.values().collect();
        v.sort_by_key(|g| g.name);
        v
    }

    /// The gates `name` needs on when it is on (1.35+).
    pub fn deps(&self, name: &str) -> &[&'static str] {
        self.deps.get(name).map_or(&[], Vec::as_slice)
    }

    pub fn len(&self) -> usize {
        self.gates.len()
    }

    pub fn is_empty(&self) -> bool {
        self.gates.is_empty()
    }
}

fn stage_of(s: &str) -> Stage {
    match s {
        "ALPHA" => Stage::Alpha,
        "BETA" => Stage::Beta,
        "GA" => Stage::Ga,
        _ => Stage::Deprecated,
    }
}

fn gates_of(v: KubeVersion) -> &'static str {
    match v.minor() {
        34 => include_str!("../gates/1.34.txt"),
        35 => include_str!("../gates/1.35.txt"),
        36 => include_str!("../gates/1.36.txt"),
        _ => include_str!("../gates/1.37.txt"),
    }
}

fn deps_of(v: KubeVersion) -> &'static str {
    match v.minor() {
        34 => "",
        35 => include_str!("../gates/1.35.deps.txt"),
        36 => include_str!("../gates/1.36.deps.txt"),
        _ => include_str!("../gates/1.37.deps.txt"),
    }
}

fn versioned_source(v: KubeVersion) -> &'static str {
    match v.minor() {
        34 => include_str!("../../../docs/upstream-gates/1.34.versioned.txt"),
        35 => include_str!("../../../docs/upstream-gates/1.35.versioned.txt"),
        36 => include_str!("../../../docs/upstream-gates/1.36.versioned.txt"),
        _ => include_str!("../../../docs/upstream-gates/1.37.versioned.txt"),
    }
}

/// One versioned spec: (from minor, spec, min-compatibility minor).
type Versioned = (u32, GateSpec, Option<u32>);

/// The binary's versioned specs by gate, oldest first. Rows are
/// `name ver:stage:default:locked[@mincompatX.Y] ...`; a malformed entry is
/// skipped (generated data; `versioned_specs_agree_with_the_tables` checks).
fn versioned(v: KubeVersion) -> Vec<(&'static str, Vec<Versioned>)> {
    let minor_of = |s: &str| s.split_once('.').and_then(|(_, m)| m.parse::<u32>().ok());
    versioned_source(v)
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| {
            let mut cols = l.split_whitespace();
            let name = cols.next()?;
            let specs = cols
                .filter_map(|e| {
                    let (e, min_compat) = match e.split_once("@mincompat") {
                        Some((e, m)) => (e, Some(minor_of(m)?)),
                        None => (e, None),
                    };
                    let [ver, stage, default, locked] = e.split(':').collect::<Vec<_>>()[..] else {
                        return None;
                    };
                    let spec = GateSpec {
                        name,
                        default: default == "true",
                        stage: stage_of(stage),
                        locked: locked == "true",
                    };
                    Some((minor_of(ver)?, spec, min_compat))
                })
                .collect();
            Some((name, specs))
        })
        .collect()
}

/// component-base's spec in force at emulation `e` and min-compatibility
/// `c`: the last whose version is at most `e`, skipping those that need a
/// newer min-compatibility version; `None` is PRE-ALPHA.
fn spec_index(specs: &[Versioned], e: u32, c: u32) -> Option<usize> {
    specs
        .iter()
        .rposition(|(from, _, min_compat)| *from <= e && min_compat.is_none_or(|m| m <= c))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_parses_with_upstreams_counts() {
        // The counts KCM prints in its --help (AllAlpha and AllBeta included).
        let counts: Vec<usize> = KubeVersion::ALL
            .iter()
            .map(|v| Table::of(*v).len())
            .collect();
        assert_eq!(counts, [208, 218, 242, 254]);
        for v in KubeVersion::ALL {
            let gates = gates_of(v);
            let rows = gates
                .lines()
                .filter(|l| !l.trim().is_empty() && !l.starts_with('#'))
                .count();
            assert_eq!(rows, Table::of(v).len(), "{v}: a malformed row");
        }
    }

    #[test]
    fn gates_change_between_minors_as_upstream() {
        let at = |m, n: &str| Table::of(KubeVersion::new(m).expect("v")).get(n).copied();
        assert!(at(34, "PodIndexLabel").is_some() && at(35, "PodIndexLabel").is_none());
        let managed = |m| at(m, "JobManagedBy").map(|g| (g.stage, g.locked));
        assert_eq!(managed(34), Some((Stage::Beta, false)));
        assert_eq!(managed(35), Some((Stage::Ga, true)));
        assert!(at(34, "MutableSchedulingDirectivesForSuspendedJobs").is_none());
        assert_eq!(
            at(35, "MutableSchedulingDirectivesForSuspendedJobs").map(|g| g.default),
            Some(false)
        );
        assert_eq!(
            at(36, "MutableSchedulingDirectivesForSuspendedJobs").map(|g| g.default),
            Some(true)
        );
        assert!(at(35, "StaleControllerConsistencyJob").is_none());
        assert!(at(36, "StaleControllerConsistencyJob").is_some_and(|g| g.default));
        assert!(at(36, "SidecarContainers").is_some() && at(37, "SidecarContainers").is_none());
        let t = Table::of(KubeVersion::new(37).expect("v"));
        assert_eq!(t.deps("WorkloadWithJob"), ["GenericWorkload"]);
        assert!(
            Table::of(KubeVersion::OLDEST)
                .deps("WorkloadWithJob")
                .is_empty()
        );
    }

    #[test]
    fn versioned_specs_agree_with_the_tables() {
        // Each binary's versioned specs at its own minor are its table: the
        // same names, stages, locks and defaults (the versioned dump was
        // taken after 1.34's WatchListClient override, so it has it too).
        for v in KubeVersion::ALL {
            let flat = Table::parse(v, gates_of(v), deps_of(v));
            let mut at_own = Table::parse(v, gates_of(v), deps_of(v));
            at_own.gates.clear();
            for (name, specs) in versioned(v) {
                let c = Emulation::of(v).min_compatibility();
                let i = spec_index(&specs, v.minor(), c).expect("available");
                at_own.gates.insert(name, specs[i].1);
            }
            let names = |t: &Table| t.gates().iter().map(|g| g.name).collect::<Vec<_>>();
            assert_eq!(names(&at_own), names(&flat), "{v}");
            let mut overridden = Vec::new();
            for g in flat.gates() {
                let o = at_own.get(g.name).expect("same names");
                assert_eq!((o.stage, o.locked), (g.stage, g.locked), "{v} {}", g.name);
                if o.default != g.default {
                    overridden.push(g.name);
                }
            }
            assert!(overridden.is_empty(), "{v}: {overridden:?}");
            // The emulated table of the binary's own minor is the table.
            let same = Table::parse(v, gates_of(v), deps_of(v)).emulated(Emulation::of(v));
            assert_eq!(names(&same), names(&flat));
            assert!(flat.gates().iter().all(|g| same.get(g.name) == Some(g)));
        }
    }

    #[test]
    fn emulated_tables_hold_the_older_specs() {
        let t = Table::at(Emulation::new(KubeVersion::OLDEST, 32).expect("e"));
        let s = t.get("JobSuccessPolicy").copied().expect("beta in 1.32");
        assert_eq!((s.stage, s.default, s.locked), (Stage::Beta, true, false));
        assert!(t.get("PodObservedGenerationTracking").is_none());
        assert!(t.is_known("PodObservedGenerationTracking") && !t.is_known("Bogus"));
    }
}
