use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kcm_pod::CachedPod;
use kube::api::ObjectMeta;
use kube::runtime::watcher::Event;
use parking_lot::Mutex;

use super::*;

fn pod(ns: &str, name: &str, rv: &str, node: Option<&str>) -> CachedPod {
    full_pod(ns, name, rv, node).into()
}

fn full_pod(ns: &str, name: &str, rv: &str, node: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            resource_version: Some(rv.into()),
            managed_fields: Some(vec![Default::default()]),
            ..Default::default()
        },
        spec: node.map(|n| k8s_openapi::api::core::v1::PodSpec {
            node_name: Some(n.into()),
            ..Default::default()
        }),
        ..Default::default()
    }
}

fn recorder(inf: &Informer<CachedPod>) -> Arc<Mutex<Vec<String>>> {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = Arc::clone(&seen);
    inf.add_handler(Arc::new(move |c: &Change<CachedPod>| {
        let rv = |p: &CachedPod| p.resource_version().to_string();
        s.lock().push(match c {
            Change::Added(p) => format!("add {} {}", p.key(), rv(p)),
            Change::Updated { old, new } => {
                format!("update {} {}->{}", new.key(), rv(old), rv(new))
            }
            Change::Deleted(p) => format!("delete {} {}", p.key(), rv(p)),
        });
    }));
    seen
}

fn list(inf: &Informer<CachedPod>, pods: Vec<CachedPod>) {
    let mut relist = None;
    inf.apply(Event::Init, &mut relist);
    for p in pods {
        inf.apply(Event::InitApply(p), &mut relist);
    }
    inf.apply(Event::InitDone, &mut relist);
}

#[test]
fn events_fan_out_with_old_objects() {
    let inf = Informer::<CachedPod>::new();
    inf.add_index(BY_NODE_NAME, pod_node_index());
    let seen = recorder(&inf);
    assert!(!inf.has_synced());
    list(&inf, vec![pod("a", "p1", "1", Some("n1"))]);
    assert!(inf.has_synced());
    let mut relist = None;
    inf.apply(Event::Apply(pod("a", "p1", "2", Some("n2"))), &mut relist);
    inf.apply(Event::Apply(pod("a", "p2", "3", None)), &mut relist);
    inf.apply(Event::Delete(pod("a", "p2", "4", None)), &mut relist);
    assert_eq!(
        *seen.lock(),
        vec![
            "add a/p1 1",
            "update a/p1 1->2",
            "add a/p2 3",
            "delete a/p2 3"
        ]
    );
    let p1 = inf.store().get("a/p1").expect("p1");
    assert_eq!(p1.node_name(), Some("n2"));
    assert!(inf.store().by_index(BY_NODE_NAME, "n1").is_empty());
    assert_eq!(inf.store().by_index(BY_NODE_NAME, "n2").len(), 1);
}

#[test]
fn relist_reports_deletes_missed_while_the_watch_was_down() {
    let inf = Informer::<CachedPod>::new();
    inf.add_index(BY_NODE_NAME, pod_node_index());
    list(
        &inf,
        vec![
            pod("a", "keep", "1", Some("n")),
            pod("a", "gone", "1", Some("n")),
            pod("a", "changed", "1", None),
        ],
    );
    let seen = recorder(&inf);
    seen.lock().clear();
    list(
        &inf,
        vec![
            pod("a", "keep", "1", Some("n")),
            pod("a", "changed", "5", None),
            pod("a", "new", "6", None),
        ],
    );
    let mut got = seen.lock().clone();
    got.sort();
    assert_eq!(
        got,
        vec!["add a/new 6", "delete a/gone 1", "update a/changed 1->5"]
    );
    assert_eq!(inf.store().by_index(BY_NODE_NAME, "n").len(), 1);
    assert_eq!(inf.store().len(), 3);
}

#[test]
fn a_late_handler_sees_existing_objects_once() {
    let inf = Informer::<CachedPod>::new();
    list(
        &inf,
        vec![pod("a", "p1", "1", None), pod("b", "p2", "1", None)],
    );
    let seen = recorder(&inf);
    let mut got = seen.lock().clone();
    got.sort();
    assert_eq!(got, vec!["add a/p1 1", "add b/p2 1"]);
}

#[test]
fn controller_uid_and_namespace_indexes() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    let inf = Informer::<CachedPod>::new();
    inf.add_index(BY_CONTROLLER_UID, pod_controller_uid_index());
    inf.add_index(BY_NAMESPACE, namespace_index());
    let mut owned = full_pod("a", "p1", "1", None);
    owned.metadata.owner_references = Some(vec![
        OwnerReference {
            uid: "job-uid".into(),
            controller: Some(true),
            ..Default::default()
        },
        OwnerReference {
            uid: "other".into(),
            controller: None,
            ..Default::default()
        },
    ]);
    list(&inf, vec![owned.into(), pod("b", "p2", "1", None)]);
    assert_eq!(inf.store().by_index(BY_CONTROLLER_UID, "job-uid").len(), 1);
    assert!(inf.store().by_index(BY_CONTROLLER_UID, "other").is_empty());
    assert_eq!(inf.store().by_index(BY_NAMESPACE, "b").len(), 1);
    assert!(inf.store().by_index("no-such-index", "b").is_empty());
}

#[test]
fn a_fed_informer_is_synced_and_takes_the_watch_path() {
    let inf = Informer::<CachedPod>::fed();
    assert!(inf.has_synced());
    inf.add_index(BY_NODE_NAME, pod_node_index());
    let seen = recorder(&inf);
    assert_eq!(inf.last_resource_version(), None);
    inf.feed_apply(pod("a", "p1", "7", Some("n1")));
    inf.feed_apply(pod("a", "p1", "9", Some("n2")));
    assert_eq!(inf.last_resource_version(), Some(9));
    let p1 = inf.store().get("a/p1").expect("p1");
    assert_eq!(p1.node_name(), Some("n2"));
    assert_eq!(inf.store().by_index(BY_NODE_NAME, "n2").len(), 1);
    inf.feed_delete(pod("a", "p1", "10", Some("n2")));
    assert!(inf.store().get("a/p1").is_none());
    assert_eq!(inf.last_resource_version(), Some(10));
    assert_eq!(
        *seen.lock(),
        vec!["add a/p1 7", "update a/p1 7->9", "delete a/p1 9"]
    );
}
