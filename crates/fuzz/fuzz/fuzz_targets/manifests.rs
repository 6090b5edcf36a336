#![no_main]
//! `kcm_fuzz::manifests` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::manifests(data));
