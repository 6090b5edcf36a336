//! The committed seed corpus and a small deterministic mutator: what the
//! stable smoke test feeds the entries where libFuzzer (nightly) is not
//! available. It is no substitute for coverage-guided fuzzing; it keeps
//! every target exercised on every `make test` with inputs near the
//! real ones (bit flips, boundary bytes, huge length prefixes, cuts,
//! splices, repeated tokens for nesting).

use std::path::PathBuf;

/// `crates/fuzz/corpus/<target>`.
pub fn corpus_dir(target: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("corpus")
        .join(target)
}

/// The seeds of `target`, sorted by file name (empty without a corpus).
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let Ok(dir) = std::fs::read_dir(corpus_dir(target)) else {
        return Vec::new();
    };
    let mut paths: Vec<PathBuf> = dir.filter_map(|e| e.ok().map(|e| e.path())).collect();
    paths.sort();
    paths.iter().filter_map(|p| std::fs::read(p).ok()).collect()
}

/// Tokens the text targets' grammars are made of; spliced in at random.
const TOKENS: &[&[u8]] = &[
    b"kind: List\nitems:\n- ",
    b"[",
    b"{",
    b"&a ",
    b"*a",
    b"<<: *a\n",
    b"---\n",
    b",",
    b"=",
    b"=true",
    b"kube:",
    b"1.35",
    b"v1.37.0",
    b"1h1m1s1ms1us1ns",
    b"9999999999999999999h",
    b"\"",
    b"\xff\xfe",
    b"k8s\0",
];

/// A xorshift generator of variants of the seeds.
pub struct Mutator {
    state: u64,
}

impl Mutator {
    pub fn new(seed: u64) -> Self {
        Mutator { state: seed.max(1) }
    }

    fn next(&mut self) -> u64 {
        let mut x = self.state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.state = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next() % n as u64) as usize
        }
    }

    /// One variant of `seeds[i]` for a random `i` (1 to 4 mutations).
    pub fn variant(&mut self, seeds: &[Vec<u8>]) -> Vec<u8> {
        let mut out = seeds
            .get(self.below(seeds.len()))
            .cloned()
            .unwrap_or_default();
        for _ in 0..=self.below(4) {
            self.mutate(&mut out, seeds);
        }
        out
    }

    fn mutate(&mut self, b: &mut Vec<u8>, seeds: &[Vec<u8>]) {
        let at = self.below(b.len() + 1);
        match self.below(9) {
            0 if !b.is_empty() => {
                let i = self.below(b.len());
                b[i] ^= 1 << self.below(8);
            }
            1 if !b.is_empty() => {
                let i = self.below(b.len());
                b[i] = [0x00, 0x01, 0x7f, 0x80, 0xff][self.below(5)];
            }
            // A length prefix or varint claiming nearly 4 GiB (or 2^64).
            2 => {
                let huge: &[u8] = if self.below(2) == 0 {
                    &[0xff, 0xff, 0xff, 0xf0]
                } else {
                    &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]
                };
                let end = (at + huge.len()).min(b.len());
                b.splice(at..end, huge.iter().copied());
            }
            3 => b.truncate(at),
            4 if !b.is_empty() => {
                let end = (at + 1 + self.below(16)).min(b.len());
                b.drain(at.min(end)..end);
            }
            5 => {
                let token = TOKENS[self.below(TOKENS.len())];
                let times = 1 + self.below(64);
                let bytes: Vec<u8> = token.repeat(times);
                b.splice(at..at, bytes);
            }
            // A piece of another seed (or of this one, duplicated).
            6 => {
                let other = seeds.get(self.below(seeds.len())).unwrap_or(b).clone();
                if !other.is_empty() {
                    let from = self.below(other.len());
                    let to = (from + 1 + self.below(256)).min(other.len());
                    b.splice(at..at, other[from..to].iter().copied());
                }
            }
            7 => b.insert(at, self.next() as u8),
            _ => {
                let n = self.below(8);
                b.splice(at..at, (0..n).map(|_| self.next() as u8));
            }
        }
    }
}
