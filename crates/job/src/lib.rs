//! The Job controller of kcm-rs (KCM's `job-controller`).

pub mod pods;
