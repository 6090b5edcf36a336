#![no_main]
//! `kcm_fuzz::proto_watch` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::proto_watch(data));
