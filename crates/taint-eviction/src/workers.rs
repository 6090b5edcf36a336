//! Upstream's worker layout: two de-duplicating queues (`noexec_taint_node`,
//! `noexec_taint_pod`), two dispatchers moving items into per-worker
//! channels by FNV-32a hash of the node name, and workers that handle every
//! pending node item of their shard before a pod item. A pod item hashes by
//! its node, so a node and its pods are handled by one worker, in order.

use std::sync::Arc;

use kcm_runtime::workqueue::WorkQueue;
use tokio::sync::mpsc;
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
    const OFFSET: u32 = 0x811c_9dc5;
    const PRIME: u32 = 0x0100_0193;
    let h = value
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u32::from(b)).wrapping_mul(PRIME));
    let shards = u32::try_from(shards.max(1)).unwrap_or(u32::MAX);
    usize::try_from(h % shards).unwrap_or(0)
}

/// Runs the dispatchers and workers until `stop` is cancelled, then shuts
/// both queues down.
pub async fn run(
    manager: Arc<TaintManager>,
    node_queue: WorkQueue<String>,
    pod_queue: WorkQueue<PodItem>,
    stop: CancellationToken,
) {
    let mut node_txs = Vec::with_capacity(WORKERS);
    let mut pod_txs = Vec::with_capacity(WORKERS);
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..WORKERS {
        let (ntx, nrx) = mpsc::channel(NODE_CHANNEL_SIZE);
        let (ptx, prx) = mpsc::channel(POD_CHANNEL_SIZE);
        node_txs.push(ntx);
        pod_txs.push(ptx);
        tasks.spawn(worker(
            Arc::clone(&manager),
            nrx,
            prx,
            node_queue.clone(),
            pod_queue.clone(),
            stop.clone(),
        ));
    }
    tasks.spawn(dispatch(node_queue.clone(), node_txs, stop.clone(), |n| {
        n.as_str()
    }));
    tasks.spawn(dispatch(pod_queue.clone(), pod_txs, stop.clone(), |p| {
        p.node_name.as_str()
    }));
    stop.cancelled().await;
    node_queue.shutdown();
    pod_queue.shutdown();
    while tasks.join_next().await.is_some() {}
}

/// Moves items from a queue into the channel of their shard. The worker
/// marks them done.
async fn dispatch<K>(
    queue: WorkQueue<K>,
    txs: Vec<mpsc::Sender<K>>,
    stop: CancellationToken,
    node_of: fn(&K) -> &str,
) where
    K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
{
    while let Some(item) = queue.get().await {
        let Some(tx) = txs.get(shard(node_of(&item), txs.len())) else {
            queue.done(&item);
            continue;
        };
        tokio::select! {
            () = stop.cancelled() => {
                queue.done(&item);
                return;
            }
            sent = tx.send(item.clone()) => {
                if sent.is_err() {
                    queue.done(&item);
                    return;
                }
            }
        }
    }
}

/// One worker: node items first; before each pod item, every node item
/// already waiting in this shard.
async fn worker(
    manager: Arc<TaintManager>,
    mut nodes: mpsc::Receiver<String>,
    mut pods: mpsc::Receiver<PodItem>,
    node_queue: WorkQueue<String>,
    pod_queue: WorkQueue<PodItem>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some(node) = nodes.recv() => {
                manager.handle_node(&node);
                node_queue.done(&node);
            }
            Some(pod) = pods.recv() => {
                while let Ok(node) = nodes.try_recv() {
                    manager.handle_node(&node);
                    node_queue.done(&node);
                }
                manager.handle_pod(&pod);
                pod_queue.done(&pod);
            }
            else => return,
        }
    }
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
