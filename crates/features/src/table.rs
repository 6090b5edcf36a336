//! Every gate kube-controller-manager of each supported minor accepts, with
//! its default, stage and lock, and (1.35+) the gates each depends on. The
//! data files in `gates/` were generated from each release's registered
//! gate set (see `docs/upstream-versions.md`).

use std::collections::HashMap;
use std::sync::OnceLock;

use crate::KubeVersion;

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

/// The gates of one KCM minor.
#[derive(Debug)]
pub struct Table {
    pub version: KubeVersion,
    gates: HashMap<&'static str, GateSpec>,
    deps: HashMap<&'static str, Vec<&'static str>>,
}

impl Table {
    /// The table of `version`.
    pub fn of(version: KubeVersion) -> &'static Table {
        static TABLES: OnceLock<Vec<Table>> = OnceLock::new();
        let all = TABLES.get_or_init(|| {
            KubeVersion::ALL
                .iter()
                .map(|v| {
                    let (gates, deps) = source(*v);
                    Table::parse(*v, gates, deps)
                })
                .collect()
        });
        all.iter()
            .find(|t| t.version == version)
            .unwrap_or_else(|| &all[0])
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
            gates: HashMap::new(),
            deps: HashMap::new(),
        };
        for cols in rows(gates) {
            // Generated data: a malformed row is a build-time mistake the
            // tests catch (`every_table_parses`); skip it here.
            let [name, default, stage, locked] = cols[..] else {
                continue;
            };
            let stage = match stage {
                "ALPHA" => Stage::Alpha,
                "BETA" => Stage::Beta,
                "GA" => Stage::Ga,
                _ => Stage::Deprecated,
            };
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

fn source(v: KubeVersion) -> (&'static str, &'static str) {
    match v.minor() {
        34 => (include_str!("../gates/1.34.txt"), ""),
        35 => (
            include_str!("../gates/1.35.txt"),
            include_str!("../gates/1.35.deps.txt"),
        ),
        36 => (
            include_str!("../gates/1.36.txt"),
            include_str!("../gates/1.36.deps.txt"),
        ),
        _ => (
            include_str!("../gates/1.37.txt"),
            include_str!("../gates/1.37.deps.txt"),
        ),
    }
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
            let (gates, _) = source(v);
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
}
