#!/usr/bin/env python3
"""Import circles between the modules of each crate (issue 38: "no import
circle anywhere"): module A names module B (a `crate::`/`super::`/`self::`
path, in a `use` or inline) and B names A, directly or through others.
A module and its own ancestors or descendants are not counted (a parent
declares its children; a child naming its parent's items is Rust's way);
cfg(test) files (tests.rs, *_tests.rs, anything under a tests/ module) are
left out. DEPTH=N first folds every module into its ancestor N levels below
the crate root (DEPTH=1: `sync` <-> `workload` even when the files that name
each other are `sync::profile` and `workload::v136`); DEPTH=0 (default)
compares files.

usage: hack/import-circles.py crates/* cmd/* e2e sim bench
       DEPTH=1 hack/import-circles.py crates/* cmd/*
Prints each circle and the count; exits 1 when there is one."""
import os, re, sys

def modules(src):
    mods = {}
    for root, _, files in os.walk(src):
        for f in files:
            if not f.endswith('.rs'): continue
            p = os.path.join(root, f)
            rel = os.path.relpath(p, src)[:-3].split(os.sep)
            if rel[-1] in ('lib', 'main', 'mod'): rel = rel[:-1]
            if rel and rel[0] == 'bin': continue
            mods[tuple(rel)] = p
    return mods

REF = re.compile(r'\b(crate|super|self)((?:\s*::\s*\w+)+)(\s*::\s*\{([^}]*)\})?')

def refs(mod, text):
    here = list(mod)  # the module path of this file
    out = []
    text = re.sub(r'//[^\n]*', '', text)
    for m in REF.finditer(text):
        head, tail, _, group = m.group(1), m.group(2), m.group(3), m.group(4)
        segs = [s for s in re.split(r'\s*::\s*', tail.strip()) if s]
        if head == 'crate': base = []
        elif head == 'self': base = list(here)
        else:
            base = list(here)
            while segs and segs[0] == 'super':
                segs.pop(0); base = base[:-1]
            base = base[:-1]
        full = base + segs
        out.append(full)
        if group:
            for item in group.split(','):
                item = item.strip().split('::')[0].strip()
                if item and item != 'self': out.append(full + [item])
    return out

def resolve(mods, full):
    for n in range(len(full), -1, -1):
        if tuple(full[:n]) in mods: return tuple(full[:n])
    return ()

def is_test(mod, path):
    return any(s == 'tests' or s.endswith('_tests') for s in mod) or path.endswith('tests.rs')

def scc(graph):
    index, low, st, on, out, i = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(10000)
    def go(v):
        index[v] = low[v] = i[0]; i[0] += 1; st.append(v); on.add(v)
        for w in graph.get(v, ()):
            if w not in index: go(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = st.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(comp)
    for v in list(graph): 
        if v not in index: go(v)
    return out

DEPTH = int(os.environ.get('DEPTH', '0'))
total = 0
for crate_dir in sys.argv[1:]:
    src = os.path.join(crate_dir, 'src')
    if not os.path.isdir(src): continue
    mods = modules(src)
    graph = {}
    for mod, path in mods.items():
        if is_test(mod, path): continue
        for full in refs(mod, open(path).read()):
            t = resolve(mods, full)
            if t == mod or t[:len(mod)] == mod or mod[:len(t)] == t: continue
            if is_test(t, mods[t]): continue
            a, b = (mod, t) if not DEPTH else (mod[:DEPTH], t[:DEPTH])
            if DEPTH and (a == b or a[:len(b)] == b or b[:len(a)] == a): continue
            graph.setdefault(a, set()).add(b)
    for comp in scc(graph):
        total += 1
        names = sorted('::'.join(c) or '(root)' for c in comp)
        print(f'{crate_dir}: circle of {len(comp)}: ' + ', '.join(names))
print(f'circles: {total}')
sys.exit(1 if total else 0)
