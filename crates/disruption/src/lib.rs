//! The disruption controller (KCM `disruption-controller`, alias
//! `disruption`; pkg/controller/disruption of 1.34).
//!
//! It keeps every PodDisruptionBudget's status current — `currentHealthy`,
//! `desiredHealthy`, `expectedPods`, `disruptionsAllowed`, `disruptedPods`
//! (entries the eviction API wrote, dropped after 2 minutes), the
//! `DisruptionAllowed` condition — and, with `PodDisruptionConditions` on,
//! resets `DisruptionTarget=True` conditions left on pods that were never
//! deleted.
//!
//! Layout: [`selector`], [`owners`], [`status`] and [`stale`] are pure.
//! [`expected`] is fetch-then-compute: [`expected::Scales::fetch`] looks up
//! every controller a PDB's pods need (owner caches, then [`scale`]'s
//! scale-subresource GETs) before [`expected::expected_pod_count`] does the
//! arithmetic purely. [`controller`] is the executor with the three
//! upstream queues; [`events`] the reasons and messages; [`settings`] its
//! flags. Time is the
//! runtime's one [`Clock`], from the context.
//!
//! Data flow of one PDB sync: pods from the informer (selector) → scales
//! fetched → expected/desired counts → status computed ([`status`]) →
//! one status write when it changed; DisruptionTarget resets go through the
//! stale queue ([`stale`] decides, the controller patches).

pub mod controller;
pub mod events;
pub mod expected;
pub mod owners;
pub mod scale;
pub mod settings;
pub use kcm_runtime::selector;
pub mod stale;
pub mod status;

use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kcm_features::Feature;
use kcm_pod::CachedPod;
use kcm_runtime::controller::{ControllerContext, ControllerSpec, InitError, Started};
use kcm_runtime::events::Recorder;
use kcm_runtime::informer::{BY_NAMESPACE, namespace_index};
use kcm_runtime::workqueue::{RetryRateLimit, WorkQueue, namespace_lane};

pub use crate::controller::{Controller, Owners, SyncError};
pub use kcm_runtime::clock::Clock;
pub use settings::DisruptionSettings;

/// KCM's name for this controller; also its client's user agent component.
pub const NAME: &str = "disruption-controller";

/// Work-queue names (metric label `name`), as upstream.
pub const QUEUE: &str = "disruption";
pub const RECHECK_QUEUE: &str = "disruption_recheck";
pub const STALE_QUEUE: &str = "stale_pod_disruption";

/// The registry entry.
pub const SPEC: ControllerSpec = ControllerSpec {
    name: NAME,
    aliases: &["disruption"],
    enabled_by_default: true,
    client_name: NAME,
    init,
};

/// Builds the controller from the context: takes the six informers,
/// registers the handlers; time from `ctx.clock`. Must run inside a tokio
/// runtime.
pub fn build(ctx: &ControllerContext) -> Result<Arc<Controller>, InitError> {
    let client = ctx.client(NAME)?;
    let pods = ctx.informers.informer::<CachedPod>();
    pods.add_index(BY_NAMESPACE, namespace_index());
    let pdbs = ctx.informers.informer::<PodDisruptionBudget>();
    pdbs.add_index(BY_NAMESPACE, namespace_index());
    let owners = Owners {
        rcs: ctx.informers.informer(),
        rss: ctx.informers.informer(),
        deployments: ctx.informers.informer(),
        statefulsets: ctx.informers.informer(),
    };
    let settings = ctx.settings.get::<DisruptionSettings>();
    let stale_timeout = ctx
        .features
        .enabled(Feature::PodDisruptionConditions)
        .then_some(settings.stale_pod_disruption_timeout);
    let c = Arc::new(Controller {
        scale: scale::ScaleClient::new(client.clone()),
        recorder: Recorder::new(client.clone(), events::COMPONENT, &ctx.metrics)
            .with_clock(ctx.clock.clone()),
        client,
        pods,
        pdbs,
        owners,
        // The main and stale queues use client-go's default controller rate
        // limiter; the recheck queue is only delayed, never rate limited.
        // Tenants create PDBs and pods: their keys (`ns/name`) take turns by
        // namespace (a deviation beyond upstream, see docs/fair-share.md).
        queue: WorkQueue::fair(
            QUEUE,
            RetryRateLimit::controller_default(),
            namespace_lane::<String>,
            &ctx.metrics,
        ),
        recheck: WorkQueue::new(
            RECHECK_QUEUE,
            RetryRateLimit::controller_default(),
            &ctx.metrics,
        ),
        stale: WorkQueue::fair(
            STALE_QUEUE,
            RetryRateLimit::controller_default(),
            namespace_lane::<String>,
            &ctx.metrics,
        ),
        stale_timeout,
        pdb_workers: usize::try_from(settings.concurrent_disruption_syncs)
            .unwrap_or(1)
            .max(1),
        clock: ctx.clock.clone(),
    });
    c.register();
    Ok(c)
}

fn init(ctx: &ControllerContext) -> Result<Started, InitError> {
    let c = build(ctx)?;
    let host = ctx.host(NAME);
    Ok(host.start(c.run(host.clone(), ctx.stop.clone()), ctx.stop.clone()))
}
