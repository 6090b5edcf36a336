#![no_main]
//! `kcm_fuzz::kubeconfig` under libFuzzer.
libfuzzer_sys::fuzz_target!(|data: &[u8]| kcm_fuzz::kubeconfig(data));
