#![no_main]
//! `kcm_fuzz::proto_list` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::proto_list(data));
