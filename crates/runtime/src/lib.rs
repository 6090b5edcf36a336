//! The runtime every kcm-rs controller stands on: shared informers, keyed
//! work queues with client-go semantics, expectations, a rate-limited client
//! with bounded retries, the metrics registry and the event recorder.

pub mod client;
pub mod controller;
pub mod events;
pub mod expectations;
pub mod informer;
pub mod leader;
pub mod metrics;
pub mod selector;
pub mod workqueue;
