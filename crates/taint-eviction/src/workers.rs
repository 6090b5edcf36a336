//! Upstream's worker layout: two de-duplicating queues (`noexec_taint_node`,
//! `noexec_taint_pod`) and [`WORKERS`] workers, each owning the items whose
//! node name hashes (FNV-32a) to it, handling every waiting node item of its
//! shard before its next pod item. A pod item hashes by its node, so a node
//! and its pods are handled by one worker, in order. The workers are the
//! controller host's sharded workers ([`Host::sharded`]): each item is
//! handled under the host's guard and feeds its health through one activity
//! per queue.

use std::convert::Infallible;
use std::sync::Arc;

use kcm_runtime::hash::fnv32a;
use kcm_runtime::host::Host;
use kcm_runtime::workqueue::WorkQueue;
use tokio_util::sync::CancellationToken;

use crate::manager::{PodItem, TaintManager};

/// Number of workers (upstream `UpdateWorkerSize`).
pub const WORKERS: usize = 8;
/// Per-worker buffer of node items (upstream `NodeUpdateChannelSize`).
const NODE_CHANNEL_SIZE: usize = 10;
/// Per-worker buffer of pod items (upstream `podUpdateChannelSize`): pods
/// wait in the queue, where duplicates fold, rather than in the channel.
const POD_CHANNEL_SIZE: usize = 1;

/// FNV-1a 32-bit hash of `value`, modulo `shards` (upstream `hash`).
pub fn shard(value: &str, shards: usize) -> usize {
    let h = fnv32a(&[value.as_bytes()]);
    let shards = u32::try_from(shards.max(1)).unwrap_or(u32::MAX);
    usize::try_from(h % shards).unwrap_or(0)
}

/// Runs the workers on the controller's host until `stop` is cancelled,
/// then shuts both queues down. Handling an item cannot fail; one that
/// panics (or outlasts the sync timeout) is requeued with back-off.
pub async fn run(
    host: &Host,
    manager: Arc<TaintManager>,
    node_queue: WorkQueue<String>,
    pod_queue: WorkQueue<PodItem>,
    stop: CancellationToken,
) {
    let nodes = Arc::clone(&manager);
    let handle_node = move |node: String| {
        nodes.handle_node(&node);
        std::future::ready(Ok::<(), Infallible>(()))
    };
    let handle_pod = move |pod: PodItem| {
        manager.handle_pod(&pod);
        std::future::ready(Ok::<(), Infallible>(()))
    };
    host.sharded(WORKERS)
        .lane(
            &node_queue,
            "node",
            NODE_CHANNEL_SIZE,
            |node: &String| shard(node, WORKERS),
            handle_node,
        )
        .lane(
            &pod_queue,
            "pod",
            POD_CHANNEL_SIZE,
            |pod: &PodItem| shard(&pod.node_name, WORKERS),
            handle_pod,
        )
        .run(stop)
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fnv32a_matches_go() {
        // hash/fnv New32a reference values: "" -> 0x811c9dc5, "a" -> 0xe40c292c.
        assert_eq!(shard("", 1 << 31), 0x811c_9dc5 % (1 << 31));
        assert_eq!(shard("a", 1 << 31), 0xe40c_292c % (1 << 31));
        assert_eq!(shard("foobar", 1 << 31), 0xbf9c_f968 % (1 << 31));
        for name in ["node-1", "node-2", "", "x"] {
            assert!(shard(name, WORKERS) < WORKERS);
        }
        assert_eq!(shard("anything", 0), 0);
    }
}
