//! The controller registry: a controller is a value with a KCM name, an
//! init step that takes the informers it needs and registers its handlers,
//! and a run step that drives its workers until told to stop.

use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::client::identity::TokenSource;
use crate::informer::InformerFactory;

/// What a controller gets at start-up.
#[derive(Clone)]
pub struct ControllerContext {
    /// Shared informers (one watch per kind for the whole process).
    pub informers: InformerFactory,
    /// Cluster connection settings; controllers build their own rate-limited
    /// client from it (each controller has its own QPS budget, as in KCM).
    pub kube_config: kube::Config,
    pub qps: f32,
    pub burst: u32,
    /// `--feature-gates`.
    pub features: kcm_features::FeatureGates,
    /// The Kubernetes minor whose KCM the controllers behave as (the API
    /// server's, or `--emulated-version`).
    pub version: kcm_features::KubeVersion,
    /// Each controller's settings from flags, by type.
    pub settings: Settings,
    /// Cancelled when the process shuts down.
    pub stop: CancellationToken,
    /// `--use-service-account-credentials`: each controller's token, by its
    /// client name (= its ServiceAccount in `kube-system`, as in KCM).
    /// Empty: every controller uses `kube_config`'s own credentials.
    pub identities: Arc<HashMap<String, TokenSource>>,
    /// The bounds of every controller's host (`--controller-sync-timeout`,
    /// `--controller-stall-timeout`).
    pub host_settings: crate::host::HostSettings,
    /// The leadership write fence every controller client obeys: open
    /// without leader election, moved by each lease renewal with it.
    pub fence: crate::client::Fence,
    /// The one clock: wall and monotonic time for hosts and controllers.
    pub clock: crate::clock::Clock,
    /// The runtime's metric families, on the registry the process serves:
    /// hosts, clients and queues built from this context count there, and
    /// each controller registers its own families on
    /// [`Metrics::registry`](crate::metrics::Metrics::registry).
    pub metrics: crate::metrics::Metrics,
}

/// Each controller's settings, by type: a controller crate defines its own
/// settings type (with its flags) and reads it with [`Settings::get`]; a
/// process that sets none gets the type's `Default`, KCM's values. The
/// runtime knows no controller's settings.
#[derive(Clone, Default)]
pub struct Settings(HashMap<TypeId, Arc<dyn Any + Send + Sync>>);

impl Settings {
    /// These settings with `value` for its type (replacing any before).
    #[must_use]
    pub fn with<T: Any + Send + Sync>(mut self, value: T) -> Self {
        self.0.insert(TypeId::of::<T>(), Arc::new(value));
        self
    }

    /// The settings of type `T`, or `T::default()` when none were given.
    pub fn get<T: Any + Clone + Default>(&self) -> T {
        self.0
            .get(&TypeId::of::<T>())
            .and_then(|v| v.downcast_ref::<T>())
            .cloned()
            .unwrap_or_default()
    }
}

impl std::fmt::Debug for Settings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Settings({} types)", self.0.len())
    }
}

impl ControllerContext {
    /// The host that runs `controller`'s workers and feeds its health.
    pub fn host(&self, controller: &'static str) -> crate::host::Host {
        crate::host::Host::new(
            controller,
            self.host_settings,
            self.clock.clone(),
            &self.metrics,
        )
    }

    /// A client of the controller's own, with its own QPS budget and user
    /// agent, as KCM gives each controller (`--kube-api-qps`/`--kube-api-burst`).
    pub fn client(&self, component: &'static str) -> Result<kube::Client, InitError> {
        let opts = crate::client::ClientOptions {
            qps: self.qps,
            burst: self.burst,
            user_agent_component: component.to_string(),
            request_timeout: crate::client::REQUEST_TIMEOUT,
            fence: self.fence.clone(),
            metrics: self.metrics.clone(),
        };
        let built = match self.identities.get(component) {
            Some(token) => {
                crate::client::build_client_as(self.kube_config.clone(), &opts, token.clone())
            }
            None if !self.identities.is_empty() => {
                return Err(InitError {
                    controller: component,
                    message: format!("no ServiceAccount token for {component}"),
                });
            }
            None => crate::client::build_client(self.kube_config.clone(), &opts),
        };
        built.map_err(|e| InitError {
            controller: component,
            message: e.to_string(),
        })
    }
}

/// What a process decides for its controllers: the binary from its flags,
/// the test harness from a test's choices. Everything else in a
/// [`ControllerContext`] is built the same way for both by [`ControllerContext::new`].
#[derive(Clone)]
pub struct Options {
    pub qps: f32,
    pub burst: u32,
    /// The encoding of the shared informers' lists and watches.
    pub content_type: crate::informer::ContentType,
    pub features: kcm_features::FeatureGates,
    pub version: kcm_features::KubeVersion,
    pub settings: Settings,
    pub identities: Arc<HashMap<String, TokenSource>>,
    pub host_settings: crate::host::HostSettings,
    pub fence: crate::client::Fence,
    pub clock: crate::clock::Clock,
    pub metrics: crate::metrics::Metrics,
}

impl ControllerContext {
    /// The context of the binary and of the test harness alike: shared
    /// informers on a client of their own (`shared-informers`; the QPS
    /// budget covers the initial lists, watches are not throttled) and each
    /// controller's client built from `config` later by [`client`](Self::client).
    pub fn new(
        config: kube::Config,
        opts: Options,
        stop: CancellationToken,
    ) -> Result<Self, InitError> {
        let informer_client = crate::client::build_client(
            config.clone(),
            &crate::client::ClientOptions {
                qps: opts.qps,
                burst: opts.burst,
                user_agent_component: "shared-informers".into(),
                ..crate::client::ClientOptions::for_component("", &opts.metrics)
            },
        )
        .map_err(|e| InitError {
            controller: "shared-informers",
            message: e.to_string(),
        })?;
        Ok(ControllerContext {
            informers: InformerFactory::with_content_type(informer_client, opts.content_type),
            kube_config: config,
            qps: opts.qps,
            burst: opts.burst,
            features: opts.features,
            version: opts.version,
            settings: opts.settings,
            stop,
            identities: opts.identities,
            host_settings: opts.host_settings,
            fence: opts.fence,
            clock: opts.clock,
            metrics: opts.metrics,
        })
    }
}

/// The one start of the binary and the test harness: initialises `specs`
/// in order (each takes its informers and registers its handlers), spawns
/// each one's workers, then starts the shared informers (handlers must be
/// in place before the first event). Returns each controller's name,
/// health and task.
pub fn start(
    ctx: &ControllerContext,
    specs: &[&ControllerSpec],
) -> Result<Vec<Running>, InitError> {
    let mut running = Vec::with_capacity(specs.len());
    for spec in specs {
        let started = (spec.init)(ctx)?;
        running.push(Running {
            name: spec.name,
            health: started.health,
            task: tokio::spawn(started.run),
        });
    }
    ctx.informers.start(ctx.stop.child_token());
    Ok(running)
}

/// A controller [`start`] spawned.
pub struct Running {
    pub name: &'static str,
    pub health: Health,
    pub task: tokio::task::JoinHandle<()>,
}

/// Liveness of one controller, served under `/healthz`, and a controller
/// ready to run; both made by its [`Host`](crate::host::Host).
pub use crate::host::{Health, RunFuture, Started};

#[derive(Debug, thiserror::Error)]
#[error("starting {controller}: {message}")]
pub struct InitError {
    pub controller: &'static str,
    pub message: String,
}

/// Builds a controller: take informers, register handlers, return workers.
pub type InitFn = fn(&ControllerContext) -> Result<Started, InitError>;

/// One entry of the registry.
#[derive(Clone, Copy)]
pub struct ControllerSpec {
    /// The canonical KCM name, e.g. `job-controller`.
    pub name: &'static str,
    /// Older names KCM also accepts, e.g. `job`.
    pub aliases: &'static [&'static str],
    /// Whether `*` selects it (all four are on by default in KCM).
    pub enabled_by_default: bool,
    /// Its client name, which is also its ServiceAccount in `kube-system`
    /// under `--use-service-account-credentials` (KCM's `ClientOrDie(name)`).
    pub client_name: &'static str,
    pub init: InitFn,
}

#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SelectError {
    #[error("unknown controller {name:?} in --controllers; kcm-rs runs: {known}")]
    Unknown { name: String, known: String },
}

/// Resolves KCM's `--controllers` syntax against a registry: `*` selects the
/// controllers enabled by default, `name` selects one, `-name` deselects one;
/// later entries do not override an explicit `-name` (as in KCM, where a
/// disabled name always wins).
pub fn select<'a>(
    registry: &'a [ControllerSpec],
    flags: &[String],
) -> Result<Vec<&'a ControllerSpec>, SelectError> {
    let canonical = |name: &str| {
        registry
            .iter()
            .find(|c| c.name == name || c.aliases.contains(&name))
            .map(|c| c.name)
    };
    let known = registry
        .iter()
        .map(|c| c.name)
        .collect::<Vec<_>>()
        .join(", ");
    let mut star = false;
    let mut on = Vec::new();
    let mut off = Vec::new();
    for raw in flags.iter().flat_map(|f| f.split(',')).map(str::trim) {
        if raw.is_empty() {
            continue;
        }
        if raw == "*" {
            star = true;
            continue;
        }
        let (negated, name) = match raw.strip_prefix('-') {
            Some(n) => (true, n),
            None => (false, raw),
        };
        let Some(c) = canonical(name) else {
            return Err(SelectError::Unknown {
                name: name.to_string(),
                known: known.clone(),
            });
        };
        if negated { off.push(c) } else { on.push(c) }
    }
    Ok(registry
        .iter()
        .filter(|c| !off.contains(&c.name))
        .filter(|c| on.contains(&c.name) || (star && c.enabled_by_default))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, Clone, PartialEq)]
    struct Workers(u32);
    impl Default for Workers {
        fn default() -> Self {
            Workers(5)
        }
    }

    #[test]
    fn settings_by_type_with_defaults() {
        let none = Settings::default();
        assert_eq!(none.get::<Workers>(), Workers(5));
        let set = none.with(Workers(1)).with(7u8);
        assert_eq!(set.get::<Workers>(), Workers(1));
        assert_eq!(set.get::<u8>(), 7);
        assert_eq!(set.with(Workers(2)).get::<Workers>(), Workers(2));
    }

    fn never(_: &ControllerContext) -> Result<Started, InitError> {
        Err(InitError {
            controller: "x",
            message: "test".into(),
        })
    }

    const REG: &[ControllerSpec] = &[
        ControllerSpec {
            name: "job-controller",
            client_name: "job-controller",
            aliases: &["job"],
            enabled_by_default: true,
            init: never,
        },
        ControllerSpec {
            name: "disruption-controller",
            client_name: "disruption-controller",
            aliases: &["disruption"],
            enabled_by_default: true,
            init: never,
        },
        ControllerSpec {
            name: "optional-controller",
            client_name: "optional-controller",
            aliases: &[],
            enabled_by_default: false,
            init: never,
        },
    ];

    fn names(flags: &[&str]) -> Result<Vec<&'static str>, SelectError> {
        let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
        select(REG, &flags).map(|v| v.iter().map(|c| c.name).collect())
    }

    #[test]
    fn star_selects_defaults_and_minus_removes() {
        assert_eq!(
            names(&["*"]),
            Ok(vec!["job-controller", "disruption-controller"])
        );
        assert_eq!(
            names(&["*,-job-controller"]),
            Ok(vec!["disruption-controller"])
        );
        assert_eq!(names(&["*", "-disruption"]), Ok(vec!["job-controller"]));
        assert_eq!(
            names(&["*,optional-controller"]),
            Ok(vec![
                "job-controller",
                "disruption-controller",
                "optional-controller"
            ])
        );
    }

    #[test]
    fn explicit_names_and_aliases() {
        assert_eq!(names(&["job"]), Ok(vec!["job-controller"]));
        assert_eq!(names(&["job-controller,-job"]), Ok(vec![]));
        assert_eq!(names(&[""]), Ok(vec![]));
    }

    #[test]
    fn unknown_names_are_errors() {
        let e = names(&["*,deployment-controller"]).expect_err("unknown");
        assert!(e.to_string().contains("deployment-controller"), "{e}");
        assert!(e.to_string().contains("job-controller"), "{e}");
        assert!(names(&["-nope"]).is_err());
    }
}
