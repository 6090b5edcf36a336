//! Workers that own shards of the keys, over one or more queues served in
//! priority order: upstream taint eviction's layout (`UpdateWorkerSize`
//! workers, items dealt out by a hash of the node name, every waiting node
//! item of a worker's shard handled before its next pod item), on the same
//! per-key handling as [`Workers`](super::Workers): the guard, `forget`,
//! back-off, `done`, and one activity per queue.
//!
//! Each queue (a lane) has a dispatcher that takes its ready keys and sends
//! each to the worker of its shard through a small channel; a worker takes
//! from its lanes in order, and before an item of a later lane it handles
//! every item already waiting in the earlier ones.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::hash::Hash;
use std::sync::Arc;
use std::task::Poll;

use futures::future::BoxFuture;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::Host;
use crate::workqueue::WorkQueue;

/// One key's handling, ready to run on its worker.
type Job = BoxFuture<'static, ()>;

/// Sharded workers over lanes, built by [`Host::sharded`].
pub struct Sharded {
    host: Host,
    workers: usize,
    lanes: Vec<Box<dyn Open>>,
}

impl Host {
    /// `workers` workers (at least one), each owning the keys a lane's
    /// shard function gives it; add lanes with [`Sharded::lane`].
    pub fn sharded(&self, workers: usize) -> Sharded {
        Sharded {
            host: self.clone(),
            workers: workers.max(1),
            lanes: Vec::new(),
        }
    }
}

/// A lane before it runs: opening it starts its activity and gives its
/// dispatcher, one receiver per worker, and its queue's shutdown.
trait Open: Send {
    fn open(self: Box<Self>, workers: usize, stop: CancellationToken) -> Opened;
}

struct Opened {
    dispatch: BoxFuture<'static, ()>,
    receivers: Vec<mpsc::Receiver<Job>>,
    shutdown: Box<dyn FnOnce() + Send>,
}

struct LaneSpec<K, F, S> {
    workers: super::Workers<K>,
    buffer: usize,
    shard: S,
    sync: F,
}

impl<K, F, Fut, E, S> Open for LaneSpec<K, F, S>
where
    K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
    F: Fn(K) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), E>> + Send + 'static,
    E: Display + Send + 'static,
    S: Fn(&K) -> usize + Send + Sync + 'static,
{
    fn open(self: Box<Self>, workers: usize, stop: CancellationToken) -> Opened {
        let LaneSpec {
            workers: pool,
            buffer,
            shard,
            sync,
        } = *self;
        let lane = Arc::new(pool.lane(sync));
        let (senders, receivers): (Vec<_>, Vec<_>) =
            (0..workers).map(|_| mpsc::channel(buffer.max(1))).unzip();
        let queue = lane.queue.clone();
        let dispatch = Box::pin(async move {
            while let Some(key) = lane.queue.get().await {
                let Some(tx) = senders.get(shard(&key) % senders.len()) else {
                    lane.queue.done(&key);
                    continue;
                };
                let job: Job = Box::pin({
                    let (lane, key) = (Arc::clone(&lane), key.clone());
                    async move { lane.process(key).await }
                });
                // An item that never reaches its worker is done here.
                tokio::select! {
                    () = stop.cancelled() => {
                        lane.queue.done(&key);
                        return;
                    }
                    sent = tx.send(job) => {
                        if sent.is_err() {
                            lane.queue.done(&key);
                            return;
                        }
                    }
                }
            }
        });
        Opened {
            dispatch,
            receivers,
            shutdown: Box::new(move || queue.shutdown()),
        }
    }
}

impl Sharded {
    /// Adds a lane over `queue`, served after the lanes added before it:
    /// `shard` gives a key's worker (taken modulo the number of workers),
    /// `buffer` how many items may wait in each worker's channel (the rest
    /// wait in the queue, where duplicates fold), `sync` handles a key as
    /// [`Workers::run`](super::Workers::run) does; `noun` names what a key
    /// stands for in logs.
    #[must_use]
    pub fn lane<K, F, Fut, E>(
        mut self,
        queue: &WorkQueue<K>,
        noun: &'static str,
        buffer: usize,
        shard: impl Fn(&K) -> usize + Send + Sync + 'static,
        sync: F,
    ) -> Self
    where
        K: Clone + Eq + Hash + Debug + Send + Sync + 'static,
        F: Fn(K) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<(), E>> + Send + 'static,
        E: Display + Send + 'static,
    {
        self.lanes.push(Box::new(LaneSpec {
            workers: self.host.workers(queue, noun),
            buffer,
            shard,
            sync,
        }));
        self
    }

    /// Runs the dispatchers and workers until `stop`, then shuts every
    /// lane's queue down and waits for the items in flight.
    pub async fn run(self, stop: CancellationToken) {
        let mut tasks = tokio::task::JoinSet::new();
        let mut per_worker: Vec<Vec<mpsc::Receiver<Job>>> =
            (0..self.workers).map(|_| Vec::new()).collect();
        let mut shutdowns = Vec::new();
        for lane in self.lanes {
            let opened = lane.open(self.workers, stop.clone());
            tasks.spawn(opened.dispatch);
            for (mine, rx) in per_worker.iter_mut().zip(opened.receivers) {
                mine.push(rx);
            }
            shutdowns.push(opened.shutdown);
        }
        for lanes in per_worker {
            tasks.spawn(worker(lanes, stop.clone()));
        }
        stop.cancelled().await;
        for shutdown in shutdowns {
            shutdown();
        }
        while tasks.join_next().await.is_some() {}
    }
}

/// One worker: the first lane with an item wins; before an item of a later
/// lane, every item already waiting in the earlier ones runs.
async fn worker(mut lanes: Vec<mpsc::Receiver<Job>>, stop: CancellationToken) {
    loop {
        let next = tokio::select! {
            biased;
            () = stop.cancelled() => return,
            next = first_ready(&mut lanes) => next,
        };
        let Some((lane, job)) = next else {
            return;
        };
        for earlier in lanes.iter_mut().take(lane) {
            while let Ok(waiting) = earlier.try_recv() {
                waiting.await;
            }
        }
        job.await;
    }
}

/// The first lane, in order, with an item; `None` once every lane closed.
fn first_ready(lanes: &mut [mpsc::Receiver<Job>]) -> impl Future<Output = Option<(usize, Job)>> {
    std::future::poll_fn(move |cx| {
        let mut open = false;
        for (i, rx) in lanes.iter_mut().enumerate() {
            match rx.poll_recv(cx) {
                Poll::Ready(Some(job)) => return Poll::Ready(Some((i, job))),
                Poll::Ready(None) => {}
                Poll::Pending => open = true,
            }
        }
        if open {
            Poll::Pending
        } else {
            Poll::Ready(None)
        }
    })
}

#[cfg(test)]
mod tests;
