#!/usr/bin/python3
"""Activation placement (issue 4): a model whose activations saved for
backward are at least 4x --gpu-mem trains within --gpu-mem when they wait in
host memory (fuyou-compile --activations host), with losses and weights
bit-identical to the run that keeps them on the device; the device-resident
program is refused under the same budget.

On the CPU target "device memory" is the arena of the memory plan; --gpu-mem
is checked against parameters plus that arena at start-up, and the arena
refuses any placement outside the plan as the program runs.
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


def plan(compiler, onnx, policy):
    out = subprocess.run([compiler, onnx, "--emit=fysched", "--activations", policy], check=True,
                         capture_output=True, text=True).stdout
    return {k: int(v) for k, v in re.findall(r"fysched\.(\w+_bytes) = (\d+)", out)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)
    fail = lambda msg: sys.exit(f"activations: FAIL: {msg}")

    subprocess.run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("tokens.bin"),
                    "--max-bytes", "100000"], check=True, stdout=subprocess.DEVNULL)
    # Deep and narrow, long rows: activations grow with layers x batch x
    # sequence, the working set of one layer does not.
    subprocess.run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", w("m.onnx"),
                    "--batch", "8", "--seq", "64", "--n-layer", "12", "--d-model", "64", "--n-head", "4",
                    "--block-size", "64"], check=True, stdout=subprocess.DEVNULL)
    keep, host = plan(a.compiler, w("m.onnx"), "keep"), plan(a.compiler, w("m.onnx"), "host")
    gpu_mem = host["param_bytes"] + host["arena_bytes"]
    acts = host["host_arena_bytes"]
    print(f"activations: parameters {host['param_bytes']} B; device arena {keep['arena_bytes']} B kept, "
          f"{host['arena_bytes']} B with activations in host memory ({acts} B there); --gpu-mem {gpu_mem} B")
    if acts < 4 * gpu_mem:
        fail(f"activations {acts} B are not 4x --gpu-mem {gpu_mem} B")

    for policy in ("keep", "host"):
        subprocess.run([a.compiler, w("m.onnx"), "-o", w(f"train_{policy}"), "--activations", policy],
                       check=True, stderr=subprocess.DEVNULL)
    common = lambda p: [w(f"train_{p}"), "--data", w("tokens.bin"), "--steps", str(a.steps), "--log-every", "1000"]
    r = subprocess.run(common("host") + ["--gpu-mem", str(gpu_mem), "--log-json", w("host.jsonl"),
                                         "--save", w("ckpt_host")], capture_output=True, text=True)
    if r.returncode != 0:
        fail(f"the host-placed run under --gpu-mem {gpu_mem} exited {r.returncode}: {r.stderr[-2000:]}")
    r = subprocess.run(common("keep") + ["--gpu-mem", str(gpu_mem)], capture_output=True, text=True)
    if r.returncode == 0 or "--gpu-mem" not in r.stderr or "too small" not in r.stderr:
        fail(f"the device-resident program was not refused under --gpu-mem {gpu_mem}: {r.stderr[-500:]}")
    subprocess.run(common("keep") + ["--log-json", w("keep.jsonl"), "--save", w("ckpt_keep")], check=True,
                   stderr=subprocess.DEVNULL)

    losses = lambda f: [json.loads(l)["loss"] for l in open(f)]
    lk, lh = losses(w("keep.jsonl")), losses(w("host.jsonl"))
    if len(lk) != a.steps or lk != lh:
        fail(f"losses differ: keep {lk}, host {lh}")
    weights = lambda d: open(os.path.join(d, "model.safetensors"), "rb").read()
    if weights(w("ckpt_keep")) != weights(w("ckpt_host")):
        fail("the trained weights differ")
    print(f"activations: PASS: {a.steps} losses and the weights bit-identical; activations {acts / gpu_mem:.1f}x "
          f"--gpu-mem; device arena {keep['arena_bytes'] / host['arena_bytes']:.1f}x smaller")


if __name__ == "__main__":
    main()
