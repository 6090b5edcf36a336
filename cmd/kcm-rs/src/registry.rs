//! The controllers this build of kcm-rs can run, by KCM name. Each lands
//! here when its issue is done.

use kcm_runtime::controller::ControllerSpec;

pub const REGISTRY: &[ControllerSpec] = &[kcm_job::SPEC, kcm_podgc::SPEC, kcm_taint_eviction::SPEC];
