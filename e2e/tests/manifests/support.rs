//! `kcm_e2e::manifests` under its old name, for the one test that still
//! includes this file by `#[path]` (e2e/tests/realnode_install.rs); the
//! others import the module.

#![allow(unused_imports)]

pub use kcm_e2e::manifests::*;
