#!/usr/bin/env python3
"""Shares of a `perf script` dump of kcm-rs by where each sample falls: the first
category, in order, whose pattern some frame of the sample's stack matches.

Usage: perf script -i perf.data > s.txt; hack/perf-categories.py s.txt...
(bench/results/apiserver-cost/w1-cpu/profile.txt)"""
import re,collections,sys
cats=[('job sync (decide + its writes)','sync_inner'),
('client: request path (rate limit, retry, metrics, buffer)','LeanApi|client::metrics::Instrument|ClientRateLimit|tower::buffer'),
('informers: read, decode, store, fan-out','reflector|run_proto|Informer<K>::run'),
('HTTP/2 connection task: TLS, framing, socket reads and writes','H2ClientFuture|h2::proto::connection'),
('scheduler: parking in epoll, timers, wake-ups','park_internal|park_condvar|Context::park|park_timeout'),
('other controllers (podgc, taint eviction, disruption)','kcm_podgc|kcm_taint|kcm_disruption'),
]
for f in sys.argv[1:]:
    txt=open(f).read().split('\n\n')
    c=collections.Counter(); n=0
    for s in txt:
        ls=s.strip().split('\n')
        if len(ls)<2: continue
        n+=1; body='\n'.join(ls[1:])
        for name,pat in cats:
            if re.search(pat,body): c[name]+=1; break
        else: c['other']+=1
    print(f, n, 'samples')
    for name,_ in cats+[('other','')]:
        print(f'  {name}: {100*c[name]/n:.0f}%')
