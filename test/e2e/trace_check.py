#!/usr/bin/python3
"""Checks a --trace file: valid Chrome trace JSON with named tracks, a slice per
step on "steps", kernel slices on "compute" inside the steps, and the CPU
optimizer's slices on a track of its own; with the state on SSD, the store's
busy periods on "ssd", one after another, each having moved bytes.

    trace_check.py TRACE.json STEPS
"""
import collections
import json
import sys

path, steps = sys.argv[1], int(sys.argv[2])
events = json.load(open(path))["traceEvents"]
tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
slices = [e for e in events if e["ph"] == "X"]
by_track = collections.defaultdict(list)
for e in slices:
    by_track[tracks[e["tid"]]].append(e)
errors = []
if len(by_track["steps"]) != steps:
    errors.append(f"{len(by_track['steps'])} step slices, expected {steps}")
kernels = collections.Counter(e["name"] for e in by_track["compute"])
if kernels["matmul"] == 0 or kernels["softmax_cross_entropy"] != steps:
    errors.append(f"compute track lacks kernels: {dict(kernels)}")
if not any(e["name"].startswith("adamw") for e in by_track["cpu optimizer"]):
    errors.append("no optimizer slices")
first, last = by_track["steps"][0], by_track["steps"][-1]
for e in by_track["compute"]:
    if e["ts"] < first["ts"] or e["ts"] + e["dur"] > last["ts"] + last["dur"] + 1:
        errors.append(f"kernel slice {e['name']} outside the steps")
        break
# One store here (the state's): its busy periods cannot overlap.
io = sorted(by_track.get("ssd", []), key=lambda e: e["ts"])
if any(b["ts"] < a["ts"] + a["dur"] for a, b in zip(io, io[1:])):
    errors.append("overlapping busy periods on the ssd track")
if any(e.get("args", {}).get("bytes", 0) <= 0 for e in io):
    errors.append("an ssd busy period that moved no bytes")
if any(e["dur"] < 0 for e in slices):
    errors.append("negative duration")
if errors:
    sys.exit("trace_check: FAIL: " + "; ".join(errors))
print(f"trace_check: PASS: {len(slices)} slices on {sorted(by_track)}")
