//! `kcm_e2e::manifests` under its old name, for the tests that still
//! include this file by `#[path]` (e2e/tests/in_cluster.rs,
//! e2e/tests/realnode_install.rs); the others import the module.

#![allow(unused_imports)]

pub use kcm_e2e::manifests::*;
