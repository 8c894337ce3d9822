#!/usr/bin/python3
"""8-bit AdamW state (--optimizer adamw8bit) end to end: the same program with
its state in memory, on SSD, synchronous, and resumed from a checkpoint gives
the same bits; a checkpoint of the other format is refused with one line; the
store moves fewer bytes than with fp32 state.

    /usr/bin/python3 test/e2e/adamw8bit.py --compiler build/bin/fuyou-compile --work DIR
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


def run(cmd, ok=True):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        sys.exit(f"adamw8bit: FAIL: exited {r.returncode}: {' '.join(cmd)}\n{r.stderr[-2000:]}")
    return r


def losses(path):
    return [json.loads(l)["loss"] for l in open(path)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=30)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)
    data = w("tokens.bin")
    if not os.path.exists(data):
        run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", data, "--max-bytes", "200000"])
    run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", w("model.onnx"),
         "--batch", "4", "--seq", "32", "--d-model", "96", "--n-head", "2"])
    run([a.compiler, w("model.onnx"), "-o", w("train"), "--optimizer", "adamw8bit"])
    run([a.compiler, w("model.onnx"), "-o", w("train_sync"), "--optimizer", "adamw8bit", "--sync-optimizer"])
    # Small enough a threshold that most tensors go 8-bit in this small model
    # (a flag the fp32 runs, --optimizer adamw, may not take).
    common = ["--data", data, "--log-every", "1000"]
    q8 = ["--adamw8bit-min-size", "1024"]
    n = a.steps

    def train(binary, tag, extra=(), steps=n):
        for f in (w(tag + ".jsonl"),):
            if os.path.exists(f):
                os.remove(f)
        r = run([binary, "--steps", str(steps), "--log-json", w(tag + ".jsonl"), "--save", w("ckpt_" + tag)]
                + common + ([] if "adamw" in extra else q8) + list(extra))
        return losses(w(tag + ".jsonl")), r.stderr

    ref, err = train(w("train"), "mem")
    m = re.search(r"adamw8bit: (\d+) of (\d+) tensors", err)
    if not m or int(m.group(1)) == 0:
        sys.exit(f"adamw8bit: FAIL: no tensor kept 8-bit state: {err[-500:]}")
    print(f"adamw8bit: {m.group(0)}")
    weights = lambda tag: open(os.path.join(w("ckpt_" + tag), "model.safetensors"), "rb").read()

    def same(tag, what, got):
        if got != ref:
            sys.exit(f"adamw8bit: FAIL: losses with {what} differ: {got} vs {ref}")
        if weights(tag) != weights("mem"):
            sys.exit(f"adamw8bit: FAIL: weights with {what} differ")
        print(f"adamw8bit: {what}: bit-identical over {n} steps")

    ssd = [w("ssd0"), w("ssd1")]
    for d in ssd:
        os.makedirs(d, exist_ok=True)
    got, err_ssd = train(w("train"), "ssd", ["--ssd", ",".join(ssd)])
    same("ssd", "the state on SSD", got)
    got, _ = train(w("train_sync"), "sync")
    same("sync", "the synchronous optimizer", got)

    # Resume halfway, in memory and on SSD: the second half as in one run.
    half = n // 2
    for tag, extra in (("resume", []), ("resume_ssd", ["--ssd", ",".join(ssd)])):
        train(w("train"), tag + "_a", extra, steps=half)
        got, _ = train(w("train"), tag, extra + ["--resume", w("ckpt_" + tag + "_a")])
        if got != ref[half:]:
            sys.exit(f"adamw8bit: FAIL: resumed losses ({tag}) differ: {got} vs {ref[half:]}")
        if weights(tag) != weights("mem"):
            sys.exit(f"adamw8bit: FAIL: weights after resuming ({tag}) differ")
        print(f"adamw8bit: resumed at step {half} ({tag}): bit-identical")

    # A checkpoint of fp32 state is not silently reinterpreted.
    r = run([w("train"), "--steps", str(n), "--resume", w("ckpt_mem"), "--optimizer", "adamw"] + common, ok=False)
    lines = r.stderr.strip().splitlines()
    if r.returncode != 1 or len(lines) != 1 or "AdamW state is 8-bit" not in lines[0]:
        sys.exit(f"adamw8bit: FAIL: resuming 8-bit state as fp32 should fail with one line: {r.stderr}")
    print(f"adamw8bit: refused: {lines[0]}")

    # The store's own counters: fewer bytes per parameter per step than fp32 state.
    _, err32 = train(w("train"), "ssd32", ["--ssd", ",".join(ssd), "--optimizer", "adamw"])
    b8 = float(re.search(r"\(([0-9.]+) B/param/step\)", err_ssd).group(1))
    b32 = float(re.search(r"\(([0-9.]+) B/param/step\)", err32).group(1))
    if not b8 < 0.6 * b32:
        sys.exit(f"adamw8bit: FAIL: store traffic {b8} B/param/step with 8-bit state, {b32} with fp32")
    l32 = losses(w("ssd32.jsonl"))
    print(f"adamw8bit: store traffic {b8:.2f} vs {b32:.2f} B/param/step ({b8 / b32:.2f}x); "
          f"final loss {ref[-1]:.4f} (8-bit) vs {l32[-1]:.4f} (fp32)")
    print("adamw8bit: PASS")


if __name__ == "__main__":
    main()
