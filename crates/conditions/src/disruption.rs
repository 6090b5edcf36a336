//! The `DisruptionTarget` pod condition (KEP-3329): the type, every reason
//! upstream writes and the exact messages of the writers kcm-rs replaces.

use jiff::Timestamp;
use k8s_openapi::api::core::v1::PodCondition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// The condition type a pod gets before a component deletes it.
pub const DISRUPTION_TARGET: &str = "DisruptionTarget";

/// Reason written by pod GC for a pod whose node no longer exists.
pub const REASON_DELETION_BY_POD_GC: &str = "DeletionByPodGC";
/// Reason written by the taint-eviction controller.
pub const REASON_DELETION_BY_TAINT_MANAGER: &str = "DeletionByTaintManager";
/// Reason written by kube-apiserver's eviction subresource.
pub const REASON_EVICTION_BY_EVICTION_API: &str = "EvictionByEvictionAPI";
/// Reason written by kube-scheduler preemption.
pub const REASON_PREEMPTION_BY_SCHEDULER: &str = "PreemptionByScheduler";
/// Reason written by the kubelet (node-pressure eviction, node shutdown,
/// critical-pod preemption). The disruption controller never resets it.
pub const REASON_TERMINATION_BY_KUBELET: &str = "TerminationByKubelet";
/// Reason written by the DRA device-taint eviction controller.
pub const REASON_DELETION_BY_DEVICE_TAINT_MANAGER: &str = "DeletionByDeviceTaintManager";

/// Pod GC's message (gc_controller.go, gcOrphaned).
pub const MESSAGE_POD_GC_NODE_GONE: &str = "PodGC: node no longer exists";
/// The taint manager's message (taint_eviction.go, addConditionAndDeletePod).
pub const MESSAGE_TAINT_MANAGER: &str = "Taint manager: deleting due to NoExecute taint";

/// A `DisruptionTarget=True` condition with the given reason and message,
/// stamped with `now` (the upsert keeps an older transition time when the
/// status does not change).
pub fn disruption_target(reason: &str, message: &str, now: Timestamp) -> PodCondition {
    PodCondition {
        type_: DISRUPTION_TARGET.to_string(),
        status: "True".to_string(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_transition_time: Some(Time(now)),
        ..Default::default()
    }
}
