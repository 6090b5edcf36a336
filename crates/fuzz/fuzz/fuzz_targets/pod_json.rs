#![no_main]
//! `kcm_fuzz::pod_json` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::pod_json(data));
