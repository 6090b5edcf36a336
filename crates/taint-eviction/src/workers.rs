//! Upstream's worker layout: two de-duplicating queues (`noexec_taint_node`,
//! `noexec_taint_pod`), two dispatchers moving items into per-worker
//! channels by FNV-32a hash of the node name, and workers that handle every
//! pending node item of their shard before a pod item. A pod item hashes by
//! its node, so a node and its pods are handled by one worker, in order.
//! Each item is handled under the controller host's guard (a panic is
//! caught, counted and the item requeued with back-off) and feeds the
//! controller's health through one activity per queue.

use std::sync::Arc;

use kcm_runtime::host::{Activity, Guarded, Host};
use kcm_runtime::workqueue::WorkQueue;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::Span;

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
    host: &Host,
    manager: Arc<TaintManager>,
    node_queue: WorkQueue<String>,
    pod_queue: WorkQueue<PodItem>,
    stop: CancellationToken,
) {
    let mut node_txs = Vec::with_capacity(WORKERS);
    let mut pod_txs = Vec::with_capacity(WORKERS);
    let mut tasks = tokio::task::JoinSet::new();
    let shared = Arc::new(Shared {
        host: host.clone(),
        manager,
        nodes: host.queue_activity(&node_queue),
        pods: host.queue_activity(&pod_queue),
        node_queue: node_queue.clone(),
        pod_queue: pod_queue.clone(),
    });
    shared.nodes.start();
    shared.pods.start();
    for _ in 0..WORKERS {
        let (ntx, nrx) = mpsc::channel(NODE_CHANNEL_SIZE);
        let (ptx, prx) = mpsc::channel(POD_CHANNEL_SIZE);
        node_txs.push(ntx);
        pod_txs.push(ptx);
        tasks.spawn(worker(Arc::clone(&shared), nrx, prx, stop.clone()));
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

/// What every worker shares.
struct Shared {
    host: Host,
    manager: Arc<TaintManager>,
    nodes: Activity,
    pods: Activity,
    node_queue: WorkQueue<String>,
    pod_queue: WorkQueue<PodItem>,
}

impl Shared {
    /// Handles one item under the host's guard: `forget` when handled,
    /// `add_rate_limited` when it panicked; `done` either way.
    async fn handle<K>(
        &self,
        item: K,
        (activity, queue): (&Activity, &WorkQueue<K>),
        label: String,
        apply: fn(&TaintManager, &K),
    ) where
        K: Clone + Eq + std::hash::Hash + Send + Sync + 'static,
    {
        let slot = activity.begin(label);
        let then = "requeued with back-off";
        let manager = &self.manager;
        match self
            .host
            .guard(&slot, &Span::none(), then, || async {
                apply(manager, &item)
            })
            .await
        {
            Guarded::Finished(()) => {
                slot.finish(true);
                queue.forget(&item);
            }
            Guarded::TimedOut | Guarded::Panicked(_) => {
                drop(slot);
                queue.add_rate_limited(item.clone());
            }
        }
        queue.done(&item);
    }

    async fn node(&self, node: String) {
        let label = format!("update of node {node:?}");
        let on = (&self.nodes, &self.node_queue);
        self.handle(node, on, label, |m, n| m.handle_node(n)).await;
    }

    async fn pod(&self, pod: PodItem) {
        let label = format!(
            "update of pod {}/{} on {:?}",
            pod.namespace, pod.name, pod.node_name
        );
        let on = (&self.pods, &self.pod_queue);
        self.handle(pod, on, label, TaintManager::handle_pod).await;
    }
}

/// One worker: node items first; before each pod item, every node item
/// already waiting in this shard.
async fn worker(
    shared: Arc<Shared>,
    mut nodes: mpsc::Receiver<String>,
    mut pods: mpsc::Receiver<PodItem>,
    stop: CancellationToken,
) {
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => return,
            Some(node) = nodes.recv() => shared.node(node).await,
            Some(pod) = pods.recv() => {
                while let Ok(node) = nodes.try_recv() {
                    shared.node(node).await;
                }
                shared.pod(pod).await;
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
