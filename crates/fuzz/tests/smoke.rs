//! The stable smoke of every fuzz target (part of `make test`): the
//! committed seed corpus replayed, then generated variants of it, through
//! the same entry functions the cargo-fuzz targets call. A panic fails the
//! test; each target has a time budget so a hang (or a quadratic blow-up)
//! fails too. `make fuzz` is the real, coverage-guided run.

use std::time::{Duration, Instant};

use kcm_fuzz::{Entry, Mutator, TARGETS, seeds};

/// Generated inputs per target (on top of the seeds).
const VARIANTS: usize = 2_000;
/// What one target may take in a debug build on a loaded 2-core machine.
const BUDGET: Duration = Duration::from_secs(10);

fn smoke(name: &str) {
    let entry: Entry = TARGETS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, e)| *e)
        .expect("a target of that name");
    let seeds = seeds(name);
    assert!(
        !seeds.is_empty(),
        "no seed corpus in crates/fuzz/corpus/{name}"
    );
    let start = Instant::now();
    for s in &seeds {
        entry(s);
    }
    // The seed of the generator is the target's name: the same inputs on
    // every run, different ones per target.
    let mut m = Mutator::new(
        name.bytes()
            .fold(7u64, |h, b| h.wrapping_mul(31) ^ u64::from(b)),
    );
    for _ in 0..VARIANTS {
        entry(&m.variant(&seeds));
    }
    let took = start.elapsed();
    eprintln!("{name}: {} inputs in {took:?}", seeds.len() + VARIANTS);
    assert!(
        took < BUDGET,
        "{name}: {} inputs took {took:?}",
        seeds.len() + VARIANTS
    );
}

/// The inputs the issue names, each through every target it could reach:
/// length prefixes claiming 4 GiB (a watch frame, a protobuf field, a
/// varint of 2^64 - 1) must not be allocated or waited for, and nesting
/// far deeper than any real object must be refused, not recursed into.
#[test]
fn huge_length_prefixes_and_deep_nesting_are_bounded() {
    let start = Instant::now();
    let mut inputs: Vec<Vec<u8>> = vec![
        // A watch frame claiming 4 GiB, then one claiming 16 MiB + 1.
        vec![0xff, 0xff, 0xff, 0xff, 0x0a, 0x05],
        vec![0x01, 0x00, 0x00, 0x01, 0x0a],
        // An enveloped list whose first item claims 4 GiB.
        [
            b"k8s\0".as_slice(),
            &[0x12, 0x07, 0x12, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x0a],
        ]
        .concat(),
        // A pod field 1 (metadata) whose length varint is 2^64 - 1.
        vec![
            0x0a, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
        ],
    ];
    // Metadata nested in metadata 100,000 deep (the decoders follow the
    // schema, so only its first levels are read).
    let varint = |mut n: usize, out: &mut Vec<u8>| {
        while n >= 0x80 {
            out.push((n as u8) | 0x80);
            n >>= 7;
        }
        out.push(n as u8);
    };
    // Each level's length from the inside out, then written outside in.
    let mut lens = vec![2usize];
    for _ in 0..100_000 {
        let inner = *lens.last().expect("one");
        let mut prefix = Vec::new();
        varint(inner, &mut prefix);
        lens.push(1 + prefix.len() + inner);
    }
    let mut nested = Vec::new();
    for len in lens[..lens.len() - 1].iter().rev() {
        nested.push(0x0a);
        varint(*len, &mut nested);
    }
    nested.extend_from_slice(&[0x12, 0x00]);
    inputs.push(nested);
    for open in ["[", "{\"a\":", "- ", "a: {", "kind: List\nitems: ["] {
        inputs.push(open.repeat(100_000).into_bytes());
    }
    for input in &inputs {
        for (_, entry) in TARGETS {
            entry(input);
        }
    }
    assert!(start.elapsed() < BUDGET, "took {:?}", start.elapsed());
}

#[test]
fn every_target_has_a_smoke_test() {
    let here = include_str!("smoke.rs");
    for (name, _) in TARGETS {
        assert!(
            here.contains(&format!("fn {name}()")),
            "no smoke test for {name}"
        );
    }
}

#[test]
fn proto_list() {
    smoke("proto_list");
}

#[test]
fn proto_watch() {
    smoke("proto_watch");
}

#[test]
fn pod_proto() {
    smoke("pod_proto");
}

#[test]
fn pod_json() {
    smoke("pod_json");
}

#[test]
fn kubeconfig() {
    smoke("kubeconfig");
}

#[test]
fn feature_gates() {
    smoke("feature_gates");
}

#[test]
fn flag_values() {
    smoke("flag_values");
}

#[test]
fn manifests() {
    smoke("manifests");
}
