//! Go's `hash/fnv` 32-bit FNV-1a, which upstream hashes with where kcm-rs
//! must agree with it: the taint-eviction worker a node's items go to, the
//! names of a Job's Workload and PodGroup.

const OFFSET: u32 = 0x811c_9dc5;
const PRIME: u32 = 0x0100_0193;

/// FNV-1a (32 bits) of the concatenated `parts` (Go's `fnv.New32a`, each
/// part written in turn).
pub fn fnv32a(parts: &[&[u8]]) -> u32 {
    parts
        .iter()
        .flat_map(|p| p.iter())
        .fold(OFFSET, |h, b| (h ^ u32::from(*b)).wrapping_mul(PRIME))
}

#[cfg(test)]
mod tests {
    use super::fnv32a;

    #[test]
    fn matches_go() {
        // hash/fnv New32a reference values.
        assert_eq!(fnv32a(&[]), 0x811c_9dc5);
        assert_eq!(fnv32a(&[b"a"]), 0xe40c_292c);
        assert_eq!(fnv32a(&[b"foobar"]), 0xbf9c_f968);
        assert_eq!(fnv32a(&[b"foo", b"", b"bar"]), fnv32a(&[b"foobar"]));
    }
}
