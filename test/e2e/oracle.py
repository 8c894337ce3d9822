#!/usr/bin/python3
"""PyTorch oracle for fuyou-compile's end-to-end tests.

    /usr/bin/python3 test/e2e/oracle.py --onnx M.onnx --data tokens.bin --batch 4 --seq 32 \
        --steps 20 --out-losses ref.jsonl [--out-grads ref_grads.safetensors]

Rebuilds the module that examples/export.py exported (config from M.onnx.json), loads its
initial weights from M.onnx's initializers by name, and trains it with torch.optim.AdamW in fp32
on the CPU (or --device cuda, optionally under bf16 --autocast: the CUDA target's oracle), on
the batches of the DESIGN.md batch contract. Writes one JSON line per step
({"step": s from 1, "loss": forward loss of that step}) and, optionally, the gradient of every
trainable parameter at step 1 (before the first update), keyed by ONNX initializer name.
With --val-data, the records of every --val-every-th step and of the last add "val_loss": the
mean loss of the held-out file's first --val-batches batches in evaluation mode (model.eval(),
no dropout) under the weights after that step; --steps 0 writes one record for step 0.
"""
import argparse
import json
import math
import os
import re
import sys

import numpy as np
import onnx
from onnx import numpy_helper
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(HERE, "..", "..", "examples"))
import safetensors_io  # noqa: E402
from models import ModelConfig, build_model  # noqa: E402

LLMC_MAGIC = 20240520    # uint16 tokens
LLMC_MAGIC32 = 20240801  # uint32 tokens (Llama 3)
LLMC_HEADER_BYTES = 1024


def die(msg):
    print(f"oracle.py: error: {msg}", file=sys.stderr)
    sys.exit(1)


def load_tokens(path):
    """Tokens of a nanoGPT .bin (uint16) or llm.c token file (uint16 or uint32), as int64."""
    try:
        raw = np.fromfile(path, dtype=np.uint8)
    except OSError as e:
        die(f"{path}: {e.strerror}")
    magic = int(raw[:4].view("<i4")[0]) if raw.size >= LLMC_HEADER_BYTES else 0
    if magic in (LLMC_MAGIC, LLMC_MAGIC32):
        header = raw[:LLMC_HEADER_BYTES].view("<i4")
        ntok, width = int(header[2]), 2 if magic == LLMC_MAGIC else 4
        body = raw[LLMC_HEADER_BYTES:]
        if body.size < width * ntok:
            die(f"{path}: llm.c header says {ntok} tokens, file holds {body.size // width}")
        return body[: width * ntok].view("<u2" if width == 2 else "<u4").astype(np.int64)
    if raw.size % 2:
        die(f"{path}: odd size {raw.size}, not a uint16 token file")
    return raw.view("<u2").astype(np.int64)


class Batches:
    """window k = tokens[k*T : k*T+T+1]; W = (n-1)//T; step s row b uses window (s*B+b) % W."""

    def __init__(self, tokens, B, T):
        self.tokens, self.B, self.T = tokens, B, T
        self.W = (tokens.size - 1) // T
        if self.W < 1:
            die(f"data holds {tokens.size} tokens, fewer than seq+1 = {T + 1}")

    def get(self, step):
        rows = []
        for b in range(self.B):
            k = (step * self.B + b) % self.W
            rows.append(self.tokens[k * self.T: k * self.T + self.T + 1])
        w = torch.from_numpy(np.stack(rows))
        return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def load_initializers(model, onnx_path):
    """Copy every ONNX initializer into the module's state by name; returns param -> onnx name."""
    m = onnx.load(onnx_path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    frozen_meta = []
    for p in m.metadata_props:
        if p.key == "fuyou.frozen" and p.value:
            frozen_meta = [s for s in p.value.split(",") if s]

    # Group state_dict names that share one tensor (tied weights) and find the ONNX name of each.
    sd = model.state_dict(keep_vars=True)
    groups = {}
    for name, t in sd.items():
        groups.setdefault(id(t), []).append(name)
    onnx_name = {}
    used = set()
    for key, names in groups.items():
        present = [n for n in names if n in inits]
        if not present:
            die(f"{onnx_path}: no initializer for {' / '.join(names)}")
        if len(present) > 1:
            die(f"{onnx_path}: tied tensor {names} appears as several initializers {present}")
        src = present[0]
        t = sd[names[0]]
        arr = inits[src]
        if tuple(arr.shape) != tuple(t.shape):
            die(f"{onnx_path}: initializer {src}: shape {list(arr.shape)}, module expects {list(t.shape)}")
        with torch.no_grad():
            t.copy_(torch.from_numpy(np.array(arr)).to(t.dtype))
        onnx_name[key] = src
        used.add(src)
    extra = sorted(set(inits) - used)
    if extra:
        die(f"{onnx_path}: initializers unknown to the module: {extra}")
    params = []  # (onnx name, parameter), unique, in module order
    seen = set()
    for name, p in model.named_parameters():
        if id(p) not in seen:
            seen.add(id(p))
            params.append((onnx_name[id(p)], p))
    return params, frozen_meta


def round_matmul_operands(dtype):
    """Every matrix product from here on rounds both operands to `dtype`
    (to nearest even; fp16 overflows to inf) and sums in fp32, in forward and
    in the products of its backward, as the compiled program's matmuls do."""
    r = lambda x: x.to(dtype).to(torch.float32)

    class RoundedMatmul(torch.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(a, b)
            return torch.matmul(r(a), r(b))

        @staticmethod
        def backward(ctx, g):
            a, b = ctx.saved_tensors
            ga = torch.matmul(r(g), r(b).transpose(-1, -2)).sum_to_size(a.shape)
            gb = torch.matmul(r(a).transpose(-1, -2), r(g)).sum_to_size(b.shape)
            return ga, gb

    def linear(x, w, bias=None):
        y = RoundedMatmul.apply(x, w.t())
        return y + bias if bias is not None else y

    torch.nn.functional.linear = linear
    torch.Tensor.__matmul__ = lambda a, b: RoundedMatmul.apply(a, b)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--config", default=None, help="model config JSON (default: ONNX path + .json)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--beta1", type=float, default=0.9)
    ap.add_argument("--beta2", type=float, default=0.999)
    ap.add_argument("--eps", type=float, default=1e-8)
    ap.add_argument("--weight-decay", type=float, default=0.01)
    ap.add_argument("--freeze", action="append", default=[],
                    help="ECMAScript-style regex, full match on initializer name; repeatable")
    ap.add_argument("--clip-norm", type=float, default=0.0,
                    help="torch.nn.utils.clip_grad_norm_ before each step (0: off)")
    ap.add_argument("--out-losses", required=True)
    ap.add_argument("--out-grads", default=None, help="step-1 gradients (safetensors)")
    ap.add_argument("--out-params", default=None, help="parameters after the last step (safetensors)")
    ap.add_argument("--device", default="cpu", help="torch device (cuda: the CUDA target's oracle)")
    ap.add_argument("--autocast", default=None, choices=["bf16"],
                    help="train under torch.autocast with this dtype (the CUDA target's bf16 oracle)")
    ap.add_argument("--operands", default=None, choices=["fp16", "bf16"],
                    help="round every matrix product's operands to this format first, forward and backward "
                         "(fuyou-compile --precision fp16|bf16 on the CPU target)")
    ap.add_argument("--loss-scale-init", type=float, default=0.0,
                    help="dynamic loss scaling from this scale (torch.cuda.amp.GradScaler's rule, by hand)")
    ap.add_argument("--loss-scale-growth-interval", type=int, default=2000)
    ap.add_argument("--grad-accum", type=int, default=1,
                    help="micro-batches a step: backward of loss / K for each, one optimizer step")
    ap.add_argument("--lr-schedule", default="constant", choices=["constant", "cosine", "linear"],
                    help="torch.optim.lr_scheduler.LambdaLR stepped every iteration, skipped ones too")
    ap.add_argument("--warmup-steps", type=int, default=0)
    ap.add_argument("--lr-decay-steps", type=int, default=0, help="default: --steps")
    ap.add_argument("--min-lr", type=float, default=0.0)
    ap.add_argument("--no-decay", action="append", default=[],
                    help="parameters whose names fully match go in a weight_decay=0 param group")
    ap.add_argument("--decay-1d", default="yes", choices=["yes", "no"],
                    help="no: parameters of fewer than 2 dims go in that group too")
    ap.add_argument("--val-data", default=None, help="held-out tokens for val_loss")
    ap.add_argument("--val-every", type=int, default=0, help="val_loss every K steps too (0: the last only)")
    ap.add_argument("--val-batches", type=int, default=0, help="default: 20, or the file's whole batches")
    a = ap.parse_args(argv)

    if a.batch < 1 or a.seq < 1 or a.steps < 0:
        die("--batch and --seq must be positive, --steps non-negative")
    cfg_path = a.config or a.onnx + ".json"
    try:
        with open(cfg_path) as f:
            cfg = ModelConfig.from_dict(json.load(f))
    except OSError as e:
        die(f"{cfg_path}: {e.strerror} (written by examples/export.py next to the .onnx)")
    if a.seq > cfg.block_size:
        die(f"--seq {a.seq} exceeds the model's block size {cfg.block_size}")

    torch.set_num_threads(1)
    if a.device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
        torch.backends.cuda.matmul.allow_tf32 = False
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(0)
    model = build_model(cfg)
    params, frozen_meta = load_initializers(model, a.onnx)
    model.to(a.device)
    model.train()

    try:
        freeze = [re.compile(r) for r in a.freeze]
    except re.error as e:
        die(f"--freeze: {e}")
    trainable = []
    for name, p in params:
        if name in frozen_meta or any(r.fullmatch(name) for r in freeze):
            p.requires_grad_(False)
        else:
            trainable.append((name, p))
    if not trainable:
        die("no trainable parameters left")

    if a.operands:
        round_matmul_operands(torch.float16 if a.operands == "fp16" else torch.bfloat16)

    data = Batches(load_tokens(a.data), a.batch, a.seq)
    # Two param groups, as fine-tuning recipes make them: the exempt ones
    # without weight decay.
    exempt = lambda name, p: (a.decay_1d == "no" and p.dim() < 2) or any(re.fullmatch(r, name) for r in a.no_decay)
    groups = [{"params": [p for n, p in trainable if not exempt(n, p)]},
              {"params": [p for n, p in trainable if exempt(n, p)], "weight_decay": 0.0}]
    opt = torch.optim.AdamW([g for g in groups if g["params"]], lr=a.lr, betas=(a.beta1, a.beta2),
                            eps=a.eps, weight_decay=a.weight_decay, foreach=False)

    decay_end = a.lr_decay_steps or a.steps

    def rate(step):
        """The train program's --lr-schedule at training step `step` (from 1)."""
        if step <= a.warmup_steps:
            return a.lr * step / a.warmup_steps
        if a.lr_schedule == "constant":
            return a.lr
        t = min(1.0, (step - a.warmup_steps) / (decay_end - a.warmup_steps))
        shape = 0.5 * (1 + math.cos(math.pi * t)) if a.lr_schedule == "cosine" else 1 - t
        return a.min_lr + (a.lr - a.min_lr) * shape

    # LambdaLR's epoch counts from 0 at construction: epoch e is step e + 1.
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: rate(e + 1) / a.lr if a.lr else 0.0)

    val = Batches(load_tokens(a.val_data), a.batch, a.seq) if a.val_data else None
    if val and not a.val_batches:
        a.val_batches = min(20, max(1, val.W // a.batch))

    def val_loss():
        model.eval()
        with torch.no_grad(), torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16,
                                             enabled=bool(a.autocast)):
            losses = [float(model(*(t.to(a.device) for t in val.get(k))).item()) for k in range(a.val_batches)]
        model.train()
        return sum(losses) / len(losses)

    def validating(step):
        return val is not None and ((a.val_every > 0 and step % a.val_every == 0) or step == a.steps)

    scale, good = a.loss_scale_init, 0
    tmp = a.out_losses + ".tmp"
    with open(tmp, "w") as log:
        if a.steps == 0 and val is not None:
            log.write(json.dumps({"step": 0, "val_loss": val_loss()}) + "\n")
        K = a.grad_accum
        for s in range(a.steps):
            opt.zero_grad(set_to_none=True)
            losses = []
            for m in range(K):
                idx, tgt = (t.to(a.device) for t in data.get(s * K + m))
                if a.autocast:
                    with torch.autocast(device_type=a.device.split(":")[0], dtype=torch.bfloat16):
                        loss = model(idx, tgt)
                else:
                    loss = model(idx, tgt)
                losses.append(float(loss.item()))
                if K > 1:
                    loss = loss / K  # the usual accumulation: .grad sums the micro-batches' (loss / K)'s
                if scale:
                    # Backward from the scale (a power of two: exact), then the step's verdict.
                    (loss * torch.tensor(scale, dtype=torch.float32)).backward()
                else:
                    loss.backward()
            mean = losses[0] if K == 1 else sum(losses) / K
            record = {"step": s + 1, "loss": mean, "lr": opt.param_groups[0]["lr"]}
            if scale:
                finite = all(bool(torch.isfinite(p.grad).all()) for _, p in trainable if p.grad is not None)
                record.update(loss_scale=scale, skipped=not finite)
                if not finite:
                    scale, good = float(np.float32(scale * 0.5)), 0
                    if validating(s + 1):
                        record["val_loss"] = val_loss()
                    log.write(json.dumps(record) + "\n")
                    sched.step()
                    continue
                inv = float(np.float32(1.0 / scale))
                for _, p in trainable:
                    if p.grad is not None:
                        p.grad.mul_(inv)
                good += 1
                if good == a.loss_scale_growth_interval:
                    grown = np.float32(scale * 2.0)
                    scale, good = (float(grown) if np.isfinite(grown) else scale), 0
            if s == 0 and a.out_grads:
                grads = {n: p.grad.detach().cpu().numpy().astype(np.float32) for n, p in trainable}
                safetensors_io.save(a.out_grads, grads, {"producer": "fuyou oracle.py", "step": 1})
            if a.clip_norm > 0:
                torch.nn.utils.clip_grad_norm_([p for _, p in trainable], a.clip_norm)
            opt.step()
            sched.step()
            if validating(s + 1):
                record["val_loss"] = val_loss()
            log.write(json.dumps(record) + "\n")
    os.replace(tmp, a.out_losses)
    if a.out_params:
        safetensors_io.save(a.out_params, {n: p.detach().cpu().numpy() for n, p in params},
                            {"producer": "fuyou oracle.py", "step": a.steps})


if __name__ == "__main__":
    main()
