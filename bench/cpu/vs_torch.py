#!/usr/bin/python3
"""The CPU target against PyTorch eager on the same CPU: training step time.

For each config, the model of examples/models.py is exported
(examples/export.py), compiled by fuyou-compile for the CPU target with its
defaults (every activation kept, the layer-group AdamW in the background) and
trained --steps steps; PyTorch trains the same module, from the same weights
(test/e2e/oracle.py's loader) on the same batches, with torch.optim.AdamW as
a user would (its default for a CPU run), once with one intra-op thread and
once with every CPU, and the faster counts (both use the same OpenBLAS,
whose own threads take every CPU either way: with 2 threads of its own too,
torch 1.13 oversubscribes this 2-core VM and runs ~2x slower). The two
run one after the other, --rounds times (the VM's speed drifts over minutes,
so the rounds show how much). Each run's figure: the median ms/step over the
steps after --warmup (ours: the program's --log-json "ms"; torch: wall time
of zero_grad, forward, backward and step). The first losses must agree to
1e-4 relative (DESIGN.md's oracle contract), or the config is not comparable
and the bench fails.

  flock /tmp/fy-cpu.lock bench/cpu/vs_torch.py [--build build] [--work /tmp/fy_vs_torch]
      [--steps 10] [--warmup 3] [--rounds 2] [--only NAME] [--out rows.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
sys.path.insert(0, os.path.join(ROOT, "examples"))
import oracle  # noqa: E402
from models import ModelConfig, build_model  # noqa: E402

PY = "/usr/bin/python3"

# name, export.py arguments (shape and model), batch, seq
CONFIGS = [
    ("gpt2-L4-d256", ["--model", "gpt2", "--n-layer", "4", "--n-head", "4", "--d-model", "256",
                      "--vocab", "8192", "--block-size", "128"], 4, 128),
    ("llama-L4-d256", ["--model", "llama", "--n-layer", "4", "--n-head", "4", "--d-model", "256",
                       "--vocab", "8192", "--block-size", "128"], 4, 128),
    ("gpt2-124M", ["--model", "gpt2", "--n-layer", "12", "--n-head", "12", "--d-model", "768",
                   "--vocab", "50304", "--block-size", "1024"], 1, 256),
]


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        sys.exit(f"vs_torch.py: {' '.join(cmd)} failed ({r.returncode}):\n{r.stderr[-2000:]}")
    return r


def ours(train, data, steps, warmup, log):
    t0 = time.perf_counter()
    sh([train, "--data", data, "--steps", str(steps), "--log-json", log])
    wall = time.perf_counter() - t0
    with open(log) as f:
        rows = [json.loads(line) for line in f]
    return statistics.median(r["ms"] for r in rows[warmup:]), rows[0]["loss"], wall


def pytorch(cfg, onnx_path, data, B, T, steps, warmup):
    torch.manual_seed(0)
    model = build_model(cfg)
    params, frozen = oracle.load_initializers(model, onnx_path)
    model.train()
    trainable = [p for name, p in params if name not in frozen]
    opt = torch.optim.AdamW(trainable, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    batches = oracle.Batches(oracle.load_tokens(data), B, T)
    ms, opt_ms, first = [], [], None
    for s in range(steps):
        idx, tgt = batches.get(s)
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = model(idx, tgt)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        ms.append((t2 - t0) * 1e3)
        opt_ms.append((t2 - t1) * 1e3)
        if first is None:
            first = float(loss.item())
    return statistics.median(ms[warmup:]), statistics.median(opt_ms[warmup:]), first, opt.defaults.get("foreach")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/fy_vs_torch")
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", action="append", default=[])
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.steps <= a.warmup:
        sys.exit("vs_torch.py: --steps must exceed --warmup")
    os.makedirs(a.work, exist_ok=True)
    compiler = os.path.join(a.build, "bin", "fuyou-compile")
    rows = []
    for name, shape, B, T in CONFIGS:
        if a.only and name not in a.only:
            continue
        w = lambda f: os.path.join(a.work, f"{name}.{f}")  # noqa: E731
        if not os.path.exists(w("onnx")):
            sh([PY, os.path.join(ROOT, "examples", "export.py"), "--out", w("onnx"), "--batch", str(B),
                "--seq", str(T)] + shape)
        sh([compiler, w("onnx"), "-o", w("train")])  # always: the runtime is linked in
        with open(w("onnx") + ".json") as f:
            cfg = ModelConfig.from_dict(json.load(f))
        rng = np.random.default_rng(7)
        rng.integers(0, cfg.vocab_size, size=B * T * (a.steps + 1) + 1, dtype=np.uint16).tofile(w("bin"))
        n_params = sum(p.numel() for p in build_model(cfg).parameters())
        ours_ms, torch_ms, torch_opt_ms, torch_threads = [], [], [], []
        for r in range(a.rounds):
            m, loss0, _ = ours(w("train"), w("bin"), a.steps, a.warmup, w(f"log{r}.jsonl"))
            best = None
            for threads in sorted({1, os.cpu_count()}):
                torch.set_num_threads(threads)
                got = pytorch(cfg, w("onnx"), w("bin"), B, T, a.steps, a.warmup) + (threads,)
                if best is None or got[0] < best[0]:
                    best = got
            tm, topt, tloss0, foreach, tthreads = best
            if abs(loss0 - tloss0) > 1e-4 * abs(tloss0):
                sys.exit(f"vs_torch.py: {name}: first loss {loss0} against torch {tloss0}: not the same model")
            ours_ms.append(m)
            torch_ms.append(tm)
            torch_opt_ms.append(topt)
            torch_threads.append(tthreads)
            print(f"{name} round {r + 1}: ours {m:.1f} ms/step, torch {tm:.1f} ms/step (AdamW {topt:.1f}; {tthreads} thread(s)), "
                  f"torch/ours {tm / m:.2f}", flush=True)
        rows.append({"config": name, "params": n_params, "batch": B, "seq": T, "ours_ms": ours_ms,
                     "torch_ms": torch_ms, "torch_adamw_ms": torch_opt_ms, "torch_threads": torch_threads, "torch_foreach": foreach, "speedup": [t / o for t, o in zip(torch_ms, ours_ms)],
                     "first_loss": loss0, "torch_first_loss": tloss0, "cpus": os.cpu_count(),
                     "torch": torch.__version__})
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
