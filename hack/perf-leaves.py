#!/usr/bin/env python3
"""Shares of a `perf script` dump of kcm-rs by the function a sample was in
(its leaf frame), grouped: user-space leaves by library (`U:`), kernel leaves
by the user-space function that entered the kernel (`K:`, i.e. which system
call the time went to: sleeping in epoll_wait, writev to a socket, ...).

Usage: perf script -i perf.data > s.txt; hack/perf-leaves.py s.txt
"""
import collections
import re
import sys

# First match wins; applied to a user-space leaf's symbol.
GROUPS = [
    ("malloc/free", r"malloc|free|_int_|tcache|unlink_chunk|realloc|memalign"),
    ("mem*", r"memmove|memcpy|memcmp|memset|strlen"),
    ("TLS", r"rustls|ring::|aes|gcm|chacha|ghash"),
    ("h2", r"^h2::|hpack"),
    ("hyper", r"hyper"),
    ("tokio/mio", r"tokio::|mio::"),
    ("pod decode", r"kcm_pod::|kcm_proto::|prost"),
    ("prometheus", r"prometheus"),
    ("tracing", r"tracing"),
    ("serde", r"serde"),
    ("kcm other", r"kcm_"),
]


def symbol(frame):
    return re.sub(r"^[0-9a-f]+\s+", "", frame.strip()).split("+0x")[0]


def group(stack):
    leaf = stack[0]
    if "[kernel.kallsyms]" in leaf:
        user = [f for f in stack if "[kernel.kallsyms]" not in f]
        return "K: " + (symbol(user[0])[:80] if user else "?")
    name = symbol(leaf)
    for label, pattern in GROUPS:
        if re.search(pattern, name, re.I):
            return "U: " + label
    return "U: other " + ("libc" if "libc" in leaf else "binary")


def main(path):
    counts, total = collections.Counter(), 0
    for sample in open(path).read().split("\n\n"):
        lines = sample.strip().split("\n")
        if len(lines) < 2:
            continue
        total += 1
        counts[group(lines[1:])] += 1
    print(f"{total} samples")
    for label, n in counts.most_common(20):
        print(f"{100 * n / total:5.1f}% {label}")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
