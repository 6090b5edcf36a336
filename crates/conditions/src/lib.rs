//! Condition utilities every kcm-rs controller that writes conditions uses:
//! pod and Job condition lookup and upsert with upstream's transition-time
//! rules, the `DisruptionTarget` reasons and messages, pod predicates, and
//! the body of the status patch that appends a condition (with the pod UID
//! as a precondition). Controllers call these rather than keep copies of
//! their own.
//!
//! Layout: [`pod`] (lookup, upsert, predicates), [`job`] (Job conditions),
//! [`disruption`] (the `DisruptionTarget` condition, reasons, messages),
//! [`pdb`] (PDB conditions), [`patch`] (the status patch that carries a
//! new condition).

pub mod disruption;
pub mod job;
pub mod patch;
pub mod pdb;
pub mod pod;

pub use disruption::{DISRUPTION_TARGET, disruption_target};
pub use patch::{disruption_status_patch, pod_status_patch};
pub use pod::{get_pod_condition, update_pod_condition};
