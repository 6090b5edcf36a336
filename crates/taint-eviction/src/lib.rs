//! The taint-eviction controller (KCM `taint-eviction-controller`, the
//! NoExecute taint manager of pkg/controller/tainteviction, 1.34).
//!
//! Pods bound to a node with `NoExecute` taints they do not tolerate are
//! deleted at once; pods tolerating them for `tolerationSeconds` are deleted
//! when the shortest such toleration runs out (counted from when this
//! controller first saw them tolerating); pods tolerating them forever stay.
//! Before deleting, the pod gets `DisruptionTarget=True` (reason
//! `DeletionByTaintManager`) unless `PodDisruptionConditions` is off.
//!
//! Layout: [`decide`] is pure; [`handlers`] turn informer events into work
//! items; [`workers`] shard them by node as upstream does; [`manager`] keeps
//! the tainted nodes and applies decisions to the [`timed_queue`] of
//! scheduled evictions; [`evict`] performs a fired eviction; [`events`]
//! and [`metrics`] are upstream's reasons and families.

pub mod decide;
pub mod events;
pub mod evict;
pub mod handlers;
pub mod manager;
pub mod metrics;
pub mod timed_queue;
pub mod workers;

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use kcm_features::Feature;
use kcm_pod::CachedPod;
use kcm_runtime::clock::Clock;
use kcm_runtime::controller::{ControllerContext, ControllerSpec, InitError, Started};
use kcm_runtime::events::Recorder;
use kcm_runtime::host::{Guarded, Host};
use kcm_runtime::informer::{BY_NODE_NAME, Informer, pod_node_index};
use kcm_runtime::workqueue::{RetryRateLimit, WorkQueue};
use tokio_util::sync::CancellationToken;

pub use crate::decide::{Decision, decide};
pub use crate::events::EvictionEvents;
pub use crate::evict::{EvictError, Evictor, Outcome};
pub use crate::manager::{Cache, InformerCache, PodItem, TaintManager};
pub use crate::timed_queue::{TimedQueue, WorkArgs, WorkFn};

/// KCM's name for this controller; also its event source and client name.
pub const NAME: &str = "taint-eviction-controller";

/// Work-queue names (metric label `name`), as upstream.
pub const NODE_QUEUE: &str = "noexec_taint_node";
pub const POD_QUEUE: &str = "noexec_taint_pod";

/// The registry entry: on by default, no aliases (as KCM).
pub const SPEC: ControllerSpec = ControllerSpec {
    name: NAME,
    aliases: &[],
    enabled_by_default: true,
    client_name: NAME,
    init,
};

/// Takes the pod (indexed by node) and node informers, registers the
/// handlers and returns the workers. Must run inside a tokio runtime.
fn init(ctx: &ControllerContext) -> Result<Started, InitError> {
    let client = ctx.client(NAME)?;
    let pods = ctx.informers.informer::<CachedPod>();
    pods.add_index(BY_NODE_NAME, pod_node_index());
    let nodes = ctx.informers.informer::<Node>();
    let events: Arc<dyn EvictionEvents> =
        Arc::new(Recorder::new(client.clone(), NAME, &ctx.metrics).with_clock(ctx.clock.clone()));
    let parts = Parts {
        client,
        events,
        pods,
        nodes,
        conditions: ctx.features.enabled(Feature::PodDisruptionConditions),
        host: ctx.host(NAME),
        clock: ctx.clock.clone(),
        metrics: ctx.metrics.clone(),
    };
    Ok(start(parts, ctx.stop.clone()))
}

/// What the controller is built from: [`init`] takes them from the
/// process's context, tests from fed informers and a mock API.
struct Parts {
    client: kube::Client,
    events: Arc<dyn EvictionEvents>,
    /// Indexed by node ([`BY_NODE_NAME`]).
    pods: Arc<Informer<CachedPod>>,
    nodes: Arc<Informer<Node>>,
    /// `PodDisruptionConditions`.
    conditions: bool,
    host: Host,
    clock: Clock,
    /// The runtime's families (its queues count there); its own go on
    /// their registry.
    metrics: kcm_runtime::metrics::Metrics,
}

/// Registers the handlers and returns the workers on the host.
fn start(parts: Parts, stop: CancellationToken) -> Started {
    let Parts {
        client,
        events,
        pods,
        nodes,
        conditions,
        host,
        clock,
        metrics,
    } = parts;
    let evictor = Evictor::new(
        client,
        Arc::clone(&events),
        conditions,
        clock.clone(),
        metrics::Metrics::new(metrics.registry()),
    );
    // Evictions run under the host's guard too: one that panics or runs
    // past the sync timeout ends like a failed one (dropped, re-evaluated on
    // a later pod or node event), freeing its pod's key.
    let evictions = host.activity("evictions", None);
    let guard = host.clone();
    let work: WorkFn = Arc::new(move |args, fire_at| {
        let (evictor, host, evictions) = (evictor.clone(), guard.clone(), evictions.clone());
        Box::pin(async move {
            let slot = evictions.begin(format!("eviction of pod {}", args.key()));
            let then = "eviction dropped";
            let span = tracing::Span::none();
            // Failures are logged inside; the eviction is then dropped.
            let evict = || evictor.evict(args, fire_at);
            if let Guarded::Finished(_) = host.guard(&slot, &span, then, evict).await {
                slot.finish(true);
            }
        })
    });
    let cache = Arc::new(InformerCache {
        pods: Arc::clone(&pods),
        nodes: Arc::clone(&nodes),
    });
    let timers = TimedQueue::new(work, clock.clone());
    let manager = Arc::new(TaintManager::new(cache, timers, events, clock));

    // De-duplicating queues: only an item whose handling panicked is
    // retried through them.
    let node_queue = WorkQueue::new(NODE_QUEUE, RetryRateLimit::controller_default(), &metrics);
    let pod_queue = WorkQueue::new(POD_QUEUE, RetryRateLimit::controller_default(), &metrics);
    handlers::register(&pods, &nodes, pod_queue.clone(), node_queue.clone());

    let run = run(
        host.clone(),
        pods,
        nodes,
        manager,
        node_queue,
        pod_queue,
        stop.clone(),
    );
    host.start(run, stop)
}

/// Waits for both caches, runs the workers until `stop`, then stops the
/// pending evictions and waits for the running ones.
async fn run(
    host: Host,
    pods: Arc<Informer<CachedPod>>,
    nodes: Arc<Informer<Node>>,
    manager: Arc<TaintManager>,
    node_queue: WorkQueue<String>,
    pod_queue: WorkQueue<PodItem>,
    stop: CancellationToken,
) {
    tracing::info!(controller = NAME, "starting");
    host.track(&pods);
    host.track(&nodes);
    if host.wait_for_sync(&stop).await {
        workers::run(
            &host,
            Arc::clone(&manager),
            node_queue.clone(),
            pod_queue.clone(),
            stop,
        )
        .await;
    }
    node_queue.shutdown();
    pod_queue.shutdown();
    manager.evictions().shutdown();
    manager.evictions().wait().await;
    tracing::info!(controller = NAME, "shut down");
}

#[cfg(test)]
mod tests;
