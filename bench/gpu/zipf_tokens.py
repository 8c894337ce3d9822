#!/usr/bin/python3
"""Token ids over the GPT-2 vocabulary drawn with Zipf-like frequencies
(rank r with probability ~ 1 / (r + 2.7)^1.07), as BPE text roughly has:
a batch of 8 x 1024 holds ~3,100 distinct ids, where the byte-level
tokens.bin holds at most 256. What the token embedding's rows-first update
costs depends on that count, so its benchmarks use these.

    zipf_tokens.py OUT [N]   (raw little-endian uint16, N ids, default 2,000,000)
"""
import sys

import numpy as np

out, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 2_000_000
V = 50304
p = 1.0 / (np.arange(V) + 2.7) ** 1.07
ids = np.random.default_rng(0).choice(V, size=n, p=p / p.sum()).astype("<u2")
ids.tofile(out)
print(f"{out}: {n} ids, {len(np.unique(ids[:8192]))} distinct in the first 8,192")
