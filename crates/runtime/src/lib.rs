//! The runtime every kcm-rs controller stands on.
//!
//! Layout: [`informer`] (shared informers: one watch per kind, pods in
//! JSON or protobuf, indexed stores, event fan-out) → handlers add keys to a [`workqueue`] (client-go
//! semantics: dedupe, one worker per key, delays, per-key back-off;
//! namespaces in turns where asked) → the
//! [`host`] runs each controller's workers over its queues (plain or
//! sharded; spans, sync timeout, panic safety, wait-for-sync) and feeds its
//! [`Health`] → syncs write through [`client`] (rate-limited, waiting
//! requests served by namespace in turns, bounded retries, per-controller
//! identities) and record through [`events`];
//! [`clock`] (the one clock: wall and monotonic time, paused in tests),
//! [`expectations`], [`selector`], [`hash`] (Go's FNV-1a, where kcm-rs
//! must hash as upstream does), [`metrics`] (the runtime's families on a
//! registry passed in),
//! [`leader`] (leader election), [`controller`] (the registry of
//! controllers and what they get at start-up, each controller's settings
//! by type) and [`flag_values`] (Go-style flag values) complete it.
//! Dependencies point one way: [`controller`] builds on [`host`], never
//! the reverse.
//!
//! [`Health`]: host::Health

pub mod client;
pub mod clock;
pub mod controller;
pub mod events;
pub mod expectations;
pub mod flag_values;
pub mod hash;
pub mod host;
pub mod informer;
pub mod leader;
pub mod metrics;
pub mod selector;
pub mod workqueue;
