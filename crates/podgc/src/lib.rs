//! The pod garbage collector (KCM's `pod-garbage-collector-controller`):
//! removes terminated pods over `--terminated-pod-gc-threshold`, terminating
//! pods on out-of-service nodes, pods whose node is gone (after a quarantine
//! and a live check, with `DisruptionTarget` reason `DeletionByPodGC`) and
//! terminating pods that were never scheduled. Each non-terminal pod is
//! patched to `Failed` before its force delete; a failed patch skips the
//! delete. Layout: `decide` (pure), `gc` (the executor), `metrics`,
//! `settings` (its flags).

pub mod decide;
pub mod gc;
pub mod metrics;
pub mod settings;

pub use settings::PodGcSettings;

use kcm_features::Feature;
use kcm_runtime::controller::{ControllerContext, ControllerSpec, InitError, Started};
use kcm_runtime::workqueue::{RetryRateLimit, WorkQueue};

/// KCM's name and alias for this controller.
pub const SPEC: ControllerSpec = ControllerSpec {
    name: "pod-garbage-collector-controller",
    aliases: &["podgc"],
    enabled_by_default: true,
    client_name: CLIENT_NAME,
    init,
};

/// The user agent component KCM uses for this controller's client.
const CLIENT_NAME: &str = "pod-garbage-collector";

fn init(ctx: &ControllerContext) -> Result<Started, InitError> {
    let client = ctx.client(CLIENT_NAME)?;
    let settings = ctx.settings.get::<PodGcSettings>();
    let gc = gc::PodGc {
        client,
        pods: ctx.informers.informer(),
        nodes: ctx.informers.informer(),
        // Upstream's delaying queue of node names under quarantine.
        queue: WorkQueue::new(
            "orphaned_pods_nodes",
            RetryRateLimit::default(),
            &ctx.metrics,
        ),
        config: decide::Config {
            terminated_pod_threshold: settings.terminated_pod_gc_threshold,
            disruption_conditions: ctx.features.enabled(Feature::PodDisruptionConditions),
        },
        quarantine: settings.pod_gc_quarantine,
        clock: ctx.clock.clone(),
        metrics: metrics::Metrics::new(ctx.metrics.registry()),
    };
    let host = ctx.host(SPEC.name);
    let period = settings.pod_gc_period;
    let stop = ctx.stop.clone();
    Ok(host.start(gc.run(host.clone(), period, stop.clone()), stop))
}
