//! The controllers kcm-rs runs, by KCM name.

use kcm_runtime::controller::ControllerSpec;

pub const REGISTRY: &[ControllerSpec] = &[
    kcm_job::SPEC,
    kcm_podgc::SPEC,
    kcm_taint_eviction::SPEC,
    kcm_disruption::SPEC,
];
