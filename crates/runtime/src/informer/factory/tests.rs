//! The factory's one wait for sync: woken by the informers' own synced
//! flags, and covering informers created while it waits.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Node;
use kcm_mock_api::MockApi;

use super::InformerFactory;

#[tokio::test]
async fn wait_for_sync_wakes_on_each_informer_and_on_late_ones() {
    let mock = MockApi::new();
    // Not started: nothing lists; the test plays the informers' syncs.
    let factory = InformerFactory::new(mock.client());
    let jobs = factory.informer::<Job>();
    let waiter = {
        let f = factory.clone();
        tokio::spawn(async move { f.wait_for_sync().await })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished(), "nothing synced yet");
    // An informer created while the wait runs is waited for too.
    let nodes = factory.informer::<Node>();
    jobs.synced.send_replace(true);
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!waiter.is_finished(), "nodes not synced yet");
    assert_eq!(factory.unsynced_kinds(), vec!["Node".to_string()]);
    nodes.synced.send_replace(true);
    tokio::time::timeout(Duration::from_secs(1), waiter)
        .await
        .expect("woken once every informer synced")
        .expect("the wait does not panic");
    assert!(factory.has_synced());
}

#[tokio::test]
async fn wait_for_sync_returns_at_once_with_nothing_to_wait_for() {
    let factory = InformerFactory::new(MockApi::new().client());
    tokio::time::timeout(Duration::from_millis(100), factory.wait_for_sync())
        .await
        .expect("no informers: synced");
}
