#!/usr/bin/python3
"""What each activation policy costs on the CPU target: step time against the
all-resident run (keep) of the same model, run side by side in this script,
with the device arena each needs. Every run keeps the AdamW state on SSD
(--ssd), so only where the activations wait differs.

  bench/placement/run.py [--build build] [--work /tmp/fy_bench_placement] [--steps 30]
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
POLICIES = ["keep", "host", "ssd", "recompute", "selective"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/fy_bench_placement")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--shape", default="--batch 8 --seq 128 --n-layer 12 --d-model 128 --n-head 4 --block-size 128")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    compiler = os.path.join(a.build, "bin", "fuyou-compile")
    w = lambda n: os.path.join(a.work, n)
    subprocess.run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("tokens.bin"),
                    "--max-bytes", "400000"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", w("m.onnx")]
                   + a.shape.split(), check=True, stdout=subprocess.DEVNULL)
    rows = []
    for p in POLICIES:
        plan = subprocess.run([compiler, w("m.onnx"), "--emit=fysched", "--activations", p], check=True,
                              capture_output=True, text=True).stdout
        arena = int(re.search(r"fysched\.arena_bytes = (\d+)", plan).group(1))
        subprocess.run([compiler, w("m.onnx"), "-o", w(f"train_{p}"), "--activations", p], check=True,
                       stderr=subprocess.DEVNULL)
        ssd = w(f"ssd_{p}")
        os.makedirs(ssd, exist_ok=True)
        r = subprocess.run([w(f"train_{p}"), "--data", w("tokens.bin"), "--steps", str(a.steps), "--log-every",
                            "1000", "--ssd", ssd, "--log-json", w(f"{p}.jsonl")], capture_output=True, text=True)
        if r.returncode != 0:
            sys.exit(f"placement bench: {p} failed: {r.stderr[-500:]}")
        ms = float(re.search(r"per step: ([0-9.]+) ms", r.stderr).group(1))
        spill = re.search(r"activations on SSD: ([0-9.]+) MiB written, ([0-9.]+) MiB read", r.stderr)
        losses = [json.loads(l)["loss"] for l in open(w(f"{p}.jsonl"))]
        rows.append((p, arena, ms, spill.group(1) if spill else "-", losses))
    base = rows[0]
    print(f"placement bench: {a.shape}, {a.steps} steps, state on SSD in every run")
    print(f"{'policy':<10} {'arena MiB':>10} {'ms/step':>8} {'x keep':>7} {'SSD MiB/step':>12} losses")
    for p, arena, ms, spill, losses in rows:
        same = "identical" if losses == base[4] else "DIFFER"
        print(f"{p:<10} {arena / 2**20:>10.2f} {ms:>8.1f} {ms / base[2]:>7.2f} {spill:>12} {same}")


if __name__ == "__main__":
    main()
