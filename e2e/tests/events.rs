//! kcm-runtime's event recorder against the real API server: core/v1
//! Events with the controller as source component, repeats aggregated.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Event, ObjectReference, Pod};
use kcm_e2e::{TestNamespace, shared};
use kcm_runtime::events::{EventType, Recorder};
use kube::Api;
use kube::api::{ListParams, PostParams};
use serde_json::json;

#[tokio::test]
async fn events_carry_the_source_component_and_repeats_are_counted() {
    let client = shared().client().await.expect("client");
    let ns = TestNamespace::create(&client, "events").await.expect("ns");
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": { "name": "victim" },
        "spec": { "containers": [{ "name": "main", "image": "busybox" }] }
    }))
    .expect("pod");
    let pod = pods
        .create(&PostParams::default(), &pod)
        .await
        .expect("pod");
    let reference = ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(ns.name.clone()),
        name: pod.metadata.name.clone(),
        uid: pod.metadata.uid.clone(),
        ..Default::default()
    };
    let recorder = Recorder::new(
        client.clone(),
        "taint-eviction-controller",
        &Default::default(),
    );
    let msg = format!("Marking for deletion Pod {}/victim", ns.name);
    recorder.event(
        &reference,
        EventType::Normal,
        "TaintManagerEviction",
        msg.clone(),
    );
    recorder.event(
        &reference,
        EventType::Normal,
        "TaintManagerEviction",
        msg.clone(),
    );
    recorder.event(&reference, EventType::Warning, "Other", "something else");
    recorder.flush().await;
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let start = std::time::Instant::now();
    let list = loop {
        let list = events
            .list(&ListParams::default())
            .await
            .expect("list")
            .items;
        if list.len() == 2 && list.iter().any(|e| e.count == Some(2)) {
            break list;
        }
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "events: {list:#?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let e = list
        .iter()
        .find(|e| e.reason.as_deref() == Some("TaintManagerEviction"))
        .expect("event");
    assert_eq!(e.count, Some(2));
    assert_eq!(e.type_.as_deref(), Some("Normal"));
    assert_eq!(e.message.as_deref(), Some(msg.as_str()));
    assert_eq!(
        e.source.as_ref().and_then(|s| s.component.as_deref()),
        Some("taint-eviction-controller")
    );
    assert_eq!(e.involved_object.uid, pod.metadata.uid);
    assert!(
        e.metadata
            .name
            .as_deref()
            .is_some_and(|n| n.starts_with("victim."))
    );
    let w = list
        .iter()
        .find(|e| e.reason.as_deref() == Some("Other"))
        .expect("warning");
    assert_eq!(w.type_.as_deref(), Some("Warning"));
}
