#![no_main]
//! `kcm_fuzz::feature_gates` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::feature_gates(data));
