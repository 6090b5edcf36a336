#![no_main]
//! `kcm_fuzz::flag_values` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::flag_values(data));
