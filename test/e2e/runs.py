"""What the torch 2.x end-to-end tests share: a program's losses and torch's for the same steps."""
import argparse
import json
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def compiler_and_work():
    """The arguments of a test that compiles in a folder of its own: --compiler and --work (made)."""
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    return a


def checked(test, cmd, what):
    """cmd's completed process (output captured); if it fails, the test fails in one line: its name,
    WHAT and the end of cmd's stderr."""
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{test}: FAIL: {what}: {r.stderr.strip()[-2000:]}")
    return r


def tokens(work, max_bytes=100000):
    """WORK/tokens.bin (examples/prepare_data.py's tokens), made once; WORK made too."""
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, "tokens.bin")
    if not os.path.exists(data):
        subprocess.run([sys.executable, os.path.join(ROOT, "examples/prepare_data.py"), "--out", data,
                        "--max-bytes", str(max_bytes)], check=True, capture_output=True)
    return data


def program_losses(program, data, steps, lr, log, extra=()):
    """Runs a compiled program; returns (its logged losses, its stderr), or raises with its stderr."""
    if os.path.exists(log):
        os.remove(log)
    r = subprocess.run([program, "--data", data, "--steps", str(steps), "--lr", str(lr), "--log-json", log, *extra],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(r.stderr.strip()[-2000:])
    return [json.loads(line)["loss"] for line in open(log)], r.stderr


def torch_losses(model, batches, steps, lr, weight_decay=0.01):
    """torch.optim.AdamW (the program's semantics, one tensor at a time) on the same batches."""
    import torch
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay, foreach=False)
    losses = []
    for s in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = model(*batches.get(s))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def worst_rel(ours, ref):
    """The largest relative difference, infinite when the runs differ in length."""
    if len(ours) != len(ref) or not ours:
        return float("inf")
    return max(abs(o - r) / abs(r) for o, r in zip(ours, ref))
