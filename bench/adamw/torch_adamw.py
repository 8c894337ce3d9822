"""torch.optim.AdamW on the CPU, for bench/adamw/run.sh: one fp32 parameter
tensor of N elements with its gradient, best of R timed steps after one
untimed step (which allocates exp_avg and exp_avg_sq), for each thread count
in --threads and for foreach=True (the baseline the goal refers to) and
foreach=False. Prints key=value lines starting with "result "."""
import argparse
import os
import time

import torch

ap = argparse.ArgumentParser()
ap.add_argument("--n", type=int, default=64 << 20)
ap.add_argument("--reps", type=int, default=5)
ap.add_argument("--threads", type=int, nargs="+", default=[1, len(os.sched_getaffinity(0))])
a = ap.parse_args()

cap = torch.__config__.show().split("CPU capability usage: ")
print(f"torch {torch.__version__} ({cap[1].split()[0] if len(cap) > 1 else '?'} kernels), {a.n} params, best of {a.reps}")
gen = torch.Generator().manual_seed(0)
for foreach in (True, False):
    p = torch.nn.Parameter(torch.rand(a.n, generator=gen) * 2 - 1)
    p.grad = torch.rand(a.n, generator=gen) * 2 - 1
    opt = torch.optim.AdamW([p], lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01, foreach=foreach)
    opt.step()
    for t in a.threads:
        torch.set_num_threads(t)
        opt.step()
        best = 1e30
        for _ in range(a.reps):
            t0 = time.perf_counter()
            opt.step()
            best = min(best, time.perf_counter() - t0)
        pps = a.n / best
        tag = "foreach" if foreach else "single"
        print(f"torch AdamW foreach={str(foreach):5} {t:2} thread{'s' if t > 1 else ' '} {pps / 1e6:7.1f} Mparam/s "
              f"= {28 * pps / 1e9:6.2f} GB/s at 28 B/param")
        print(f"result torch_{tag}_pps_{t}t={pps:.6e}")
    del opt, p
