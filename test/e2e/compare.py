#!/usr/bin/python3
"""Compare a training run of a fuyou-compile program with the PyTorch oracle.

    /usr/bin/python3 test/e2e/compare.py --ours ours.jsonl --ref ref.jsonl \
        [--ours-grads ours.safetensors --ref-grads ref.safetensors] [--rtol 1e-4] [--grad-rtol R]

Losses: relative error |ours - ref| / |ref| per step. Gradients: per parameter,
||ours - ref|| / ||ref|| (2-norms over the whole tensor). Prints every figure and the worst;
exits 1 with a one-line "compare.py: FAIL: ..." if any exceeds its tolerance, if the step lists
differ, or if a parameter is missing, extra or of another shape; exit 2 on unreadable input.
"""
import argparse
import json
import math
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import safetensors_io  # noqa: E402


def bad_input(msg):
    print(f"compare.py: error: {msg}", file=sys.stderr)
    sys.exit(2)


def read_losses(path):
    losses = {}
    try:
        with open(path) as f:
            for lineno, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    obj = json.loads(line)
                    step, loss = int(obj["step"]), float(obj["loss"])
                except (ValueError, KeyError, TypeError) as e:
                    bad_input(f"{path}:{lineno}: not a {{\"step\", \"loss\"}} JSON object ({e})")
                if step in losses:
                    bad_input(f"{path}:{lineno}: step {step} appears twice")
                losses[step] = loss
    except OSError as e:
        bad_input(f"{path}: {e.strerror}")
    return losses


def rel(diff, ref):
    return diff / ref if ref > 0 else diff


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ours", required=True)
    ap.add_argument("--ref", required=True)
    ap.add_argument("--ours-grads")
    ap.add_argument("--ref-grads")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--grad-rtol", type=float, default=None, help="default: --rtol")
    ap.add_argument("--quiet", action="store_true", help="print only the summary lines")
    a = ap.parse_args(argv)
    grad_rtol = a.rtol if a.grad_rtol is None else a.grad_rtol
    if (a.ours_grads is None) != (a.ref_grads is None):
        bad_input("--ours-grads and --ref-grads go together")

    failures = []
    ours, ref = read_losses(a.ours), read_losses(a.ref)
    if not ref:
        failures.append(f"{a.ref}: no steps")
    if sorted(ours) != sorted(ref):
        only_o, only_r = sorted(set(ours) - set(ref)), sorted(set(ref) - set(ours))
        failures.append(f"step lists differ: {len(ours)} steps in ours, {len(ref)} in ref"
                        + (f"; only in ours: {only_o[:5]}" if only_o else "")
                        + (f"; only in ref: {only_r[:5]}" if only_r else ""))
    worst = (-1.0, None)
    for s in sorted(set(ours) & set(ref)):
        o, r = ours[s], ref[s]
        err = rel(abs(o - r), abs(r)) if math.isfinite(o) and math.isfinite(r) else math.inf
        if not a.quiet:
            print(f"step {s:5d}  ours {o:.8g}  ref {r:.8g}  rel {err:.3e}")
        if err > worst[0]:
            worst = (err, s)
        if not err <= a.rtol:
            failures.append(f"step {s}: loss {o:.8g} vs ref {r:.8g}, rel err {err:.3e} > {a.rtol:g}")
    if worst[1] is not None:
        print(f"loss: worst rel err {worst[0]:.3e} at step {worst[1]} (rtol {a.rtol:g})")

    if a.ref_grads:
        try:
            og, _ = safetensors_io.load(a.ours_grads)
            rg, _ = safetensors_io.load(a.ref_grads)
        except (OSError, ValueError) as e:
            bad_input(str(e))
        missing = sorted(set(rg) - set(og))
        extra = sorted(set(og) - set(rg))
        if missing:
            failures.append(f"{len(missing)} parameter(s) missing from {a.ours_grads}: {', '.join(missing[:5])}")
        if extra:
            failures.append(f"{len(extra)} unexpected parameter(s) in {a.ours_grads}: {', '.join(extra[:5])}")
        gworst = (-1.0, None)
        for name in sorted(set(og) & set(rg)):
            o = og[name].astype(np.float64)
            r = rg[name].astype(np.float64)
            if o.shape != r.shape:
                failures.append(f"grad {name}: shape {list(o.shape)} vs ref {list(r.shape)}")
                continue
            d = float(np.linalg.norm((o - r).ravel()))
            n = float(np.linalg.norm(r.ravel()))
            err = rel(d, n) if math.isfinite(d) else math.inf
            if not a.quiet:
                print(f"grad {name:48s} |ref| {n:.4e}  rel {err:.3e}")
            if err > gworst[0]:
                gworst = (err, name)
            if not err <= grad_rtol:
                failures.append(f"grad {name}: rel err {err:.3e} > {grad_rtol:g}")
        if gworst[1] is not None:
            print(f"grads: worst rel err {gworst[0]:.3e} in {gworst[1]} (rtol {grad_rtol:g}, {len(rg)} parameters)")

    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        print(f"compare.py: FAIL: {failures[0]}{more}")
        sys.exit(1)
    print("compare.py: PASS")


if __name__ == "__main__":
    main()
