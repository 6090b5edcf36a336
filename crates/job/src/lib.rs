//! The Job controller of kcm-rs (KCM's `job-controller`).
//!
//! Layout and data flow: `controller/` is the executor (informer handlers,
//! work queues, `sync_job`, claiming, pod and finalizer writes). Each sync
//! runs the stages of `sync/` in upstream `syncJob`'s order over a snapshot
//! of the Job, its pods and `now`: `decide` (the guards and which pods to
//! claim), `prepare` (stage 1: the snapshot's facts, the pod failure
//! policy's verdicts matched once per pod in `verdicts`, the terminal
//! decision), `manage` (the pod work, then what it came to), `decide` (the
//! counts), `tracking` (the uncounted UIDs, finalizer removals, the terminal
//! condition); each stage returns its decision and the executor performs it
//! through one write port, `controller::port::JobPort` (pod create, delete,
//! finalizer removal, adopt, release, status write, events, and the generic
//! create and patch of Workloads and PodGroups; `ApiPort` over the API
//! server), which also owns the "NotFound means done" rule and the bounded
//! fan-out of multi-pod writes. When to sync again is returned too
//! (`sync::Requeue`). The rules the stages apply live in
//! `pod_failure_policy/` (KEP-3329 matching), `indexes` (Indexed Jobs,
//! backoffLimitPerIndex), `success_policy`, `backoff` and `active_pods`;
//! `pods` and `selector` are small predicates; `settings` holds the
//! controller's flags (`--concurrent-job-syncs`, `--job-managed-by`: beside
//! KCM, only Jobs naming kcm-rs in `spec.managedBy`). `explain/` and
//! `lint/` are `kcm-rs explain` and `kcm-rs lint`: they call the same
//! matcher and `sync::prepare`, never a copy of them. `workload` decides
//! the Workload and PodGroup of a Job (`WorkloadWithJob`): one trait of
//! rules (`workload::rules`), 1.37's (`workload::V137`) and 1.36's
//! (`workload::v136::V136`, over the minimal `workload::v1alpha2` types);
//! `controller::scheduling` is the one executor over either; their
//! informers exist only with that gate on. `sync::profile` holds what
//! differs between minors and applies the gates to a Job (`Config::view`,
//! `Config::policy`); `controller::consistency` is 1.36's read-your-writes
//! check. `conflict` finds a second writer of Job status; `untrusted`
//! counts and logs what Job and pod authors wrote that the controller
//! ignores or undoes; `mode` marks the Lease and events with the mode
//! kcm-rs runs in; `metrics` the `job_controller_*` families.

pub mod active_pods;
pub mod backoff;
pub mod conflict;
pub mod controller;
pub mod explain;
pub mod indexes;
pub mod lint;
pub mod metrics;
pub mod mode;
pub mod pod_failure_policy;
pub mod pods;
pub mod selector;
pub mod settings;
pub mod success_policy;
pub mod sync;
pub mod untrusted;
pub mod workload;

pub use settings::JobSettings;

use std::sync::Arc;

use k8s_openapi::api::batch::v1::Job;
use kcm_pod::CachedPod;
use kcm_runtime::controller::{ControllerContext, ControllerSpec, InitError, Started};
use kcm_runtime::events::Recorder;

/// KCM's name and alias for this controller.
pub const SPEC: ControllerSpec = ControllerSpec {
    name: "job-controller",
    aliases: &["job"],
    enabled_by_default: true,
    client_name: NAME,
    init,
};

/// The client and event source name KCM uses.
const NAME: &str = "job-controller";

fn init(ctx: &ControllerContext) -> Result<Started, InitError> {
    let client = ctx.client(NAME)?;
    let jobs = ctx.informers.informer::<Job>();
    let pods = ctx.informers.informer::<CachedPod>();
    controller::add_indexes(&jobs, &pods);
    let settings = ctx.settings.get::<JobSettings>();
    // Source and reporting component stay upstream's `job-controller`
    // (what `kubectl get events --field-selector source=…` and dashboards
    // key on); an annotation says which mode wrote the event.
    let marks = mode::annotations(settings.job_managed_by.as_deref(), true);
    let port = controller::port::ApiPort::new(
        client.clone(),
        Recorder::annotated(client, NAME, marks, &ctx.metrics).with_clock(ctx.clock.clone()),
    );
    let metrics = metrics::Metrics::new(ctx.metrics.registry(), ctx.version);
    let mut config = sync::Config::new(&ctx.features);
    if let Some(name) = settings.job_managed_by.as_deref() {
        config = config.beside(name).map_err(|e| InitError {
            controller: SPEC.name,
            message: e.to_string(),
        })?;
        metrics.set_managed_by(name);
        tracing::info!(
            managed_by = name,
            "job-controller runs beside kube-controller-manager: it syncs only Jobs with spec.managedBy={name}; every other Job and ownerless pod is KCM's"
        );
    }
    let (workload_with_job, workload_api) = (config.workload_with_job, config.workload_api);
    let mut jc = controller::JobController::new(
        port,
        jobs,
        pods,
        config,
        ctx.clock.clone(),
        &ctx.metrics,
        metrics,
    )
    .with_on_conflict(settings.on_conflict);
    if workload_with_job {
        // Only with the gate on: no list/watch (nor RBAC) otherwise; the
        // minor's API version only.
        use controller::scheduling::{Informers, Scheduling};
        let informers = &ctx.informers;
        jc = jc.with_scheduling(match workload_api {
            workload::Api::V1beta1 => {
                Scheduling::V137(Informers::new(informers.informer(), informers.informer()))
            }
            workload::Api::V1alpha2 => {
                Scheduling::V136(Informers::new(informers.informer(), informers.informer()))
            }
        });
    }
    let jc = Arc::new(jc);
    jc.register();
    let host = ctx.host(SPEC.name);
    let workers = settings.concurrent_job_syncs;
    Ok(host.start(
        jc.run(host.clone(), workers, ctx.stop.clone()),
        ctx.stop.clone(),
    ))
}
