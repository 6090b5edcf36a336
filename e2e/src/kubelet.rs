//! Helpers that play the kubelet (and the scheduler): nodes, bindings and pod
//! status written through the status subresource, the way a kubelet would.

use std::collections::BTreeMap;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{
    Binding, ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    Node, NodeCondition, NodeSpec, NodeStatus, ObjectReference, Pod, PodCondition, Taint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::Api;
use kube::api::{ObjectMeta, Patch, PatchParams, PostParams};
use serde_json::json;

use crate::HarnessError;

/// Creates a Node with the given readiness and taints (status written too).
/// The API server's TaintNodesByCondition admission adds
/// `node.kubernetes.io/not-ready:NoSchedule` to every new node, as on a real
/// cluster; nothing here removes it.
pub async fn create_node(
    client: &kube::Client,
    name: &str,
    ready: bool,
    taints: Vec<Taint>,
) -> Result<Node, HarnessError> {
    let nodes = Api::<Node>::all(client.clone());
    let node = Node {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            labels: Some(BTreeMap::from([(
                "kubernetes.io/hostname".to_string(),
                name.to_string(),
            )])),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            taints: if taints.is_empty() {
                None
            } else {
                Some(taints)
            },
            ..Default::default()
        }),
        ..Default::default()
    };
    nodes.create(&PostParams::default(), &node).await?;
    set_node_ready(client, name, ready).await
}

/// Writes the node's Ready condition (and a generous capacity).
pub async fn set_node_ready(
    client: &kube::Client,
    name: &str,
    ready: bool,
) -> Result<Node, HarnessError> {
    let nodes = Api::<Node>::all(client.clone());
    let now = Time(Timestamp::now());
    let capacity = BTreeMap::from([
        ("cpu".to_string(), Quantity("1000".into())),
        ("memory".to_string(), Quantity("1Ti".into())),
        ("pods".to_string(), Quantity("10000".into())),
    ]);
    let status = NodeStatus {
        capacity: Some(capacity.clone()),
        allocatable: Some(capacity),
        conditions: Some(vec![NodeCondition {
            type_: "Ready".into(),
            status: if ready { "True" } else { "False" }.into(),
            reason: Some(
                if ready {
                    "KubeletReady"
                } else {
                    "KubeletNotReady"
                }
                .into(),
            ),
            message: Some("set by the kcm-rs e2e harness".into()),
            last_heartbeat_time: Some(now.clone()),
            last_transition_time: Some(now),
        }]),
        ..Default::default()
    };
    Ok(nodes
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(json!({ "status": status })),
        )
        .await?)
}

/// A NoExecute or NoSchedule taint.
pub fn taint(key: &str, value: Option<&str>, effect: &str) -> Taint {
    Taint {
        key: key.to_string(),
        value: value.map(str::to_string),
        effect: effect.to_string(),
        time_added: None,
    }
}

/// Binds a pending pod to a node, as the scheduler does.
pub async fn bind_pod(pods: &Api<Pod>, name: &str, node: &str) -> Result<(), HarnessError> {
    let binding = Binding {
        metadata: ObjectMeta {
            name: Some(name.to_string()),
            ..Default::default()
        },
        target: ObjectReference {
            api_version: Some("v1".into()),
            kind: Some("Node".into()),
            name: Some(node.to_string()),
            ..Default::default()
        },
    };
    let _: serde_json::Value = pods
        .create_subresource("binding", name, &PostParams::default(), &binding)
        .await?;
    Ok(())
}

/// A running container status.
pub fn running(name: &str, ready: bool, started_at: Timestamp) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        image: "busybox".into(),
        image_id: "docker.io/library/busybox@sha256:0".into(),
        ready,
        restart_count: 0,
        started: Some(true),
        state: Some(ContainerState {
            running: Some(ContainerStateRunning {
                started_at: Some(Time(started_at)),
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A terminated container status with the given exit code and finish time.
pub fn terminated(name: &str, exit_code: i32, finished_at: Timestamp) -> ContainerStatus {
    ContainerStatus {
        name: name.to_string(),
        image: "busybox".into(),
        image_id: "docker.io/library/busybox@sha256:0".into(),
        ready: false,
        restart_count: 0,
        started: Some(false),
        state: Some(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code,
                reason: Some(if exit_code == 0 { "Completed" } else { "Error" }.into()),
                started_at: Some(Time(finished_at)),
                finished_at: Some(Time(finished_at)),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// A pod condition with status, reason and message.
pub fn condition(type_: &str, status: bool, reason: &str, message: &str) -> PodCondition {
    PodCondition {
        type_: type_.to_string(),
        status: if status { "True" } else { "False" }.into(),
        reason: Some(reason.to_string()),
        message: Some(message.to_string()),
        last_transition_time: Some(Time(Timestamp::now())),
        ..Default::default()
    }
}

/// What a kubelet writes in one status update. Unset fields are left alone;
/// conditions are merged by type (strategic merge), container lists replaced.
#[derive(Debug, Default, Clone)]
pub struct PodStatusUpdate {
    pub phase: Option<String>,
    pub container_statuses: Option<Vec<ContainerStatus>>,
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    pub conditions: Vec<PodCondition>,
    pub start_time: Option<Timestamp>,
}

impl PodStatusUpdate {
    pub fn phase(mut self, phase: &str) -> Self {
        self.phase = Some(phase.to_string());
        self
    }
    pub fn containers(mut self, statuses: Vec<ContainerStatus>) -> Self {
        self.container_statuses = Some(statuses);
        self
    }
    pub fn init_containers(mut self, statuses: Vec<ContainerStatus>) -> Self {
        self.init_container_statuses = Some(statuses);
        self
    }
    pub fn condition(mut self, c: PodCondition) -> Self {
        self.conditions.push(c);
        self
    }
    /// Sets the Ready (and ContainersReady) condition.
    pub fn ready(self, ready: bool) -> Self {
        let reason = if ready { "" } else { "ContainersNotReady" };
        let mut with = self.condition(condition("Ready", ready, reason, ""));
        with = with.condition(condition("ContainersReady", ready, reason, ""));
        with
    }
    pub fn started(mut self, at: Timestamp) -> Self {
        self.start_time = Some(at);
        self
    }

    fn body(&self) -> serde_json::Value {
        let mut status = serde_json::Map::new();
        if let Some(p) = &self.phase {
            status.insert("phase".into(), json!(p));
        }
        if let Some(c) = &self.container_statuses {
            status.insert("containerStatuses".into(), json!(c));
        }
        if let Some(c) = &self.init_container_statuses {
            status.insert("initContainerStatuses".into(), json!(c));
        }
        if !self.conditions.is_empty() {
            status.insert("conditions".into(), json!(self.conditions));
        }
        if let Some(t) = &self.start_time {
            status.insert("startTime".into(), json!(Time(*t)));
        }
        json!({ "status": status })
    }
}

/// Writes a status update through the pods/status subresource.
pub async fn update_pod_status(
    pods: &Api<Pod>,
    name: &str,
    update: &PodStatusUpdate,
) -> Result<Pod, HarnessError> {
    Ok(pods
        .patch_status(
            name,
            &PatchParams::default(),
            &Patch::Strategic(update.body()),
        )
        .await?)
}

fn container_names(pod: &Pod) -> (Vec<String>, Vec<String>) {
    let spec = pod.spec.as_ref();
    let names = |cs: Option<&Vec<k8s_openapi::api::core::v1::Container>>| {
        cs.map(|v| v.iter().map(|c| c.name.clone()).collect())
            .unwrap_or_default()
    };
    (
        names(spec.map(|s| &s.containers)),
        names(spec.and_then(|s| s.init_containers.as_ref())),
    )
}

/// Marks every container running and the pod Running (and Ready if asked).
pub async fn run_pod(pods: &Api<Pod>, name: &str, ready: bool) -> Result<Pod, HarnessError> {
    let pod = pods.get(name).await?;
    let (regular, _) = container_names(&pod);
    let now = Timestamp::now();
    let update = PodStatusUpdate::default()
        .phase("Running")
        .started(now)
        .containers(regular.iter().map(|c| running(c, ready, now)).collect())
        .ready(ready);
    update_pod_status(pods, name, &update).await
}

/// Terminates every regular container with `exit_code` and sets the phase
/// (`Succeeded` for 0, `Failed` otherwise), as a kubelet does for
/// `restartPolicy: Never`.
pub async fn finish_pod(pods: &Api<Pod>, name: &str, exit_code: i32) -> Result<Pod, HarnessError> {
    let pod = pods.get(name).await?;
    let (regular, _) = container_names(&pod);
    let now = Timestamp::now();
    let update = PodStatusUpdate::default()
        .phase(if exit_code == 0 {
            "Succeeded"
        } else {
            "Failed"
        })
        .containers(
            regular
                .iter()
                .map(|c| terminated(c, exit_code, now))
                .collect(),
        )
        .ready(false);
    update_pod_status(pods, name, &update).await
}

/// Appends (or replaces, by type) one pod condition.
pub async fn add_pod_condition(
    pods: &Api<Pod>,
    name: &str,
    c: PodCondition,
) -> Result<Pod, HarnessError> {
    update_pod_status(pods, name, &PodStatusUpdate::default().condition(c)).await
}

/// A one-container pod named `name` (`restartPolicy: Never`), held by the
/// test finalizer `example.com/hold` if `hold`.
pub fn simple_pod(name: &str, hold: bool) -> Pod {
    let mut p = json!({
        "metadata": { "name": name },
        "spec": { "restartPolicy": "Never", "containers": [{ "name": "main", "image": "busybox" }] }
    });
    if hold {
        p["metadata"]["finalizers"] = json!(["example.com/hold"]);
    }
    // A literal object of the Pod schema: deserializing cannot fail.
    serde_json::from_value(p).unwrap_or_default()
}

/// Creates pod `name`, binds it to `node`, and either runs it (Ready) or,
/// with an exit code, finishes it.
pub async fn create_bound_pod(
    pods: &Api<Pod>,
    name: &str,
    node: &str,
    exit: Option<i32>,
) -> Result<(), HarnessError> {
    pods.create(&PostParams::default(), &simple_pod(name, false))
        .await?;
    bind_pod(pods, name, node).await?;
    match exit {
        None => run_pod(pods, name, true).await?,
        Some(code) => finish_pod(pods, name, code).await?,
    };
    Ok(())
}
