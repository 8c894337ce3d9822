#!/usr/bin/python3
"""Overlap under placement (issue 4): does each step take little more than its
busiest stream? For each config the program runs with --trace, and per step
(after the warm-up) the step time is set against the busy time of every
stream read from the trace (trace_busy.py): compute (kernels and, on the CPU
target, the host copies, which run there), the CPU optimizer, and the SSD
(the stores' busy periods: optimizer state and activations). Goal: median
step <= 1.15 x the largest median busy time.

  bench/overlap/placement.py [--build build] [--work /tmp/fy_bench_overlap]
                             [--steps 12] [--warmup 3] [--out rows.json]
                             [--only MODEL:PLACEMENT]... [--run-flag=FLAG]...

Two models: a compute-heavy one (the SSD carries the activations and the
weights' state, the compute stream is the largest) and an I/O-heavy one
(12.5M parameters at batch 1 x 16 tokens, the state's I/O is the largest).
Each is run kept on the device, with its activations to SSD and its weights
streamed, with its activations to host memory, and as the planner places it
under a device budget. The AdamW state lives on SSD in every run.
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import trace_busy  # noqa: E402

PY = "/usr/bin/python3"

MODELS = {
    "compute-heavy": "--model gpt2 --batch 4 --seq 128 --n-layer 4 --d-model 256 --n-head 4 --block-size 128",
    "io-heavy": "--model gpt2 --batch 1 --seq 16 --n-layer 7 --d-model 384 --n-head 6 --block-size 16",
}
# name, compile flags, run flags
PLACEMENTS = [
    ("keep", [], []),
    ("ssd+stream", ["--activations", "ssd", "--params", "stream"], []),
    ("host", ["--activations", "host"], []),
    ("planned", ["--gpu-mem", "BUDGET", "--state", "ssd"], ["--gpu-mem", "BUDGET"]),
]
# The I/O-heavy model gets the host budget and read-ahead that issue 3's
# bench found best (a gradient slot per group, 8 staged groups, state read 7 ahead).
EXTRA = {
    "io-heavy": (["--max-group-bytes", "2500000", "--prefetch-state", "7"], ["--cpu-mem", "100M"]),
    "compute-heavy": ([], []),
}


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"overlap bench: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    return r


def device_bytes(fc, onnx, flags):
    """Device bytes of the plan fuyou-compile makes with `flags` (--emit=plan)."""
    out = run([fc, onnx, "--emit=plan", "--state", "ssd"] + flags).stdout
    for line in out.splitlines():
        if line.startswith("device: "):
            return int(line.split()[1])
    sys.exit("overlap bench: no 'device:' line in --emit=plan")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/fy_bench_overlap")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--out")
    ap.add_argument("--only", action="append", default=[],
                    help="MODEL:PLACEMENT to run (repeatable; default: all)")
    ap.add_argument("--compile-flag", action="append", default=[],
                    help="an extra flag for every fuyou-compile, e.g. --compile-flag=--ssd-read-ahead=8")
    ap.add_argument("--run-flag", action="append", default=[],
                    help="an extra flag for every training run, e.g. --run-flag=--ssd-queue-depth=4")
    a = ap.parse_args()
    fc = os.path.join(a.build, "bin", "fuyou-compile")
    w = lambda *p: os.path.join(a.work, *p)  # noqa: E731
    os.makedirs(w("ssd"), exist_ok=True)
    run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", w("tokens.bin"), "--max-bytes", "200000"])
    rows = []
    for model, shape in MODELS.items():
        if a.only and not any(o.split(":")[0] == model for o in a.only):
            continue
        onnx = w(f"{model}.onnx")
        run([PY, os.path.join(ROOT, "examples", "export.py"), "--out", onnx] + shape.split())
        cflags, rflags = EXTRA[model]
        # The planner's budget: halfway between all-recompute-and-stream's and keep-all's device bytes.
        keep = device_bytes(fc, onnx, cflags)
        least = device_bytes(fc, onnx, cflags + ["--activations", "recompute", "--params", "stream"])
        budget = str((keep + least) // 2)
        for name, comp, rn in PLACEMENTS:
            if a.only and f"{model}:{name}" not in a.only:
                continue
            comp = [budget if x == "BUDGET" else x for x in comp]
            rn = [budget if x == "BUDGET" else x for x in rn]
            exe, trace = w(f"{model}-{name}"), w(f"{model}-{name}.trace.json")
            run([fc, onnx, "-o", exe] + cflags + comp + [f for x in a.compile_flag for f in x.split("=", 1)])
            run([exe, "--data", w("tokens.bin"), "--steps", str(a.steps), "--log-every", "1000", "--ssd", w("ssd"),
                 "--trace", trace] + rflags + rn + a.run_flag)
            s = trace_busy.summary(trace_busy.per_step(trace, a.warmup))
            s.update(model=model, placement=name, gpu_mem=int(budget) if name == "planned" else None)
            rows.append(s)
            busy = ", ".join(f"{n} {v:.1f}" for n, v in s["busy_ms"].items())
            print(f"{model:14s} {name:11s} step {s['step_ms']:7.1f} ms  busy: {busy}  -> "
                  f"step / {s['largest']} = {s['ratio']:.3f}", flush=True)
    if a.out:
        json.dump(rows, open(a.out, "w"), indent=1)
    met = sum(r["ratio"] <= 1.15 for r in rows)
    print(f"overlap goal (step <= 1.15 x the busiest stream): met in {met} of {len(rows)} runs")


if __name__ == "__main__":
    main()
