#!/usr/bin/env python3
"""Where a traced CUDA run's device time goes: the kernels on the trace's "gpu"
track (timed by CUDA events), summed by name over every step but the first,
per step, largest first, against the step's wall time from the "steps" track.

    trace_summary.py TRACE.json [TOP]
"""
import collections
import json
import sys

path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20
events = json.load(open(path))["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
slices = [e for e in events if e["ph"] == "X"]
steps = sorted((e for e in slices if tracks[e["tid"]] == "steps"), key=lambda e: e["ts"])
if len(steps) < 2:
    sys.exit("trace_summary: need at least two steps")
start = steps[1]["ts"]
n = len(steps) - 1
total, count = collections.Counter(), collections.Counter()
for e in slices:
    if tracks[e["tid"]] == "gpu" and e["ts"] >= start:
        total[e["name"]] += e["dur"]
        count[e["name"]] += 1
wall = sum(e["dur"] for e in steps[1:]) / n / 1000.0
busy = sum(total.values()) / n / 1000.0
print(f"{n} steps after the first: wall {wall:.2f} ms/step, kernels {busy:.2f} ms/step ({100 * busy / wall:.0f}%)")
print(f"{'kernel':<28}{'ms/step':>9}{'share':>7}{'calls':>7}")
for name, us in total.most_common(top):
    print(f"{name:<28}{us / n / 1000:9.2f}{100 * us / n / 1000 / wall:6.1f}%{count[name] // n:7d}")
