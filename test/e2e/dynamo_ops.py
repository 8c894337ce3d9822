#!/usr/bin/env python3
"""The ops torch 2.x's exporter writes for tensor manipulations in a model's own code, on
activations (not only on constants), forward and gradient: each small module exported with
torch.onnx.export(dynamo=True, optimize=False), compiled, trained 10 AdamW steps on the CPU
target within 1e-4 of torch on the same batches.

    FUYOU_TORCH2/bin/python test/e2e/dynamo_ops.py --compiler build/bin/fuyou-compile --work DIR
"""
import argparse
import os
import subprocess
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
B, T, V, D, STEPS, LR = 2, 8, 64, 16, 10, 1e-2


class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.head = nn.Linear(D, V)

    def forward(self, idx, targets):
        h = self.body(self.emb(idx))
        return F.cross_entropy(self.head(h).reshape(-1, V), targets.reshape(-1))


class GatherAxes(Base):
    """Gather on axis 2 (a permutation with a repeat) and axis 1 (positions) of activations."""
    def body(self, h):
        cols = h[:, :, [3, 0, 1, 2, 5, 4, 7, 6, 9, 8, 11, 10, 13, 12, 15, 15]]
        rows = h[:, [0, 0, 1, 2, 3, 4, 5, 6]]
        return cols + rows


class PadSplitGelu(Base):
    """F.pad of an activation, an uneven torch.split (Split), unbind (SplitToSequence),
    Gelu of opset 20 both ways."""
    def body(self, h):
        a, b, c = torch.split(h, [7, 7, 2], dim=-1)
        p = F.pad(torch.cat([F.gelu(a, approximate="tanh"), F.gelu(b)], -1), (1, 1), value=0.5)
        parts = torch.unbind(p.reshape(B, T, 2, 8), dim=2)
        q = parts[0] * parts[1]
        return torch.cat([q, q + c.sum(-1, keepdim=True)], -1)


def fail(msg):
    sys.exit("dynamo_ops: FAIL: " + msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    import oracle
    import runs
    data = runs.tokens(a.work, 20000)
    w = lambda name: os.path.join(a.work, name)
    tokens = oracle.load_tokens(data) % V
    batches = oracle.Batches(tokens, B, T)
    tokfile = w("tokens_v.bin")
    tokens.astype("<u2").tofile(tokfile)
    torch.set_num_threads(1)
    for cls in (GatherAxes, PadSplitGelu):
        name = cls.__name__
        torch.manual_seed(0)
        model = cls().train()
        path = w(name + ".onnx")
        torch.onnx.export(model, batches.get(0), path, dynamo=True, optimize=False, external_data=False,
                          input_names=["idx", "targets"], output_names=["loss"])
        r = subprocess.run([a.compiler, path, "-o", w("train_" + name)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{name}: fuyou-compile: {r.stderr.strip()}")
        try:
            ours, _ = runs.program_losses(w("train_" + name), tokfile, STEPS, LR, w(name + ".jsonl"))
        except RuntimeError as e:
            fail(f"{name}: the program: {e}")
        ref = runs.torch_losses(model, batches, STEPS, LR)
        worst = runs.worst_rel(ours, ref)
        if not worst <= 1e-4 or not ours[-1] < ours[0]:
            fail(f"{name}: losses {ours} against torch's {ref} (worst rel {worst:.2e})")
        print(f"dynamo_ops: {name}: {STEPS} losses within {worst:.1e} of torch's, {ours[0]:.4f} -> {ours[-1]:.4f}")
    print("dynamo_ops: PASS")


if __name__ == "__main__":
    main()
