#!/usr/bin/env python3
"""The device memory a real model's keep-all plan needs, fused and not: GPT-2 124M (12 layers,
d 768, 12 heads, GPT-2's vocabulary, tied), exported by torch 2.x from the meta device at
B 8 x T 1024 and at B 2 x T 4096 (the same tokens a step). `fuyou-compile --emit=plan` is
arithmetic, so this needs no GPU:

- fused (the CPU target, and the CUDA target with --fuse all): at most 6 GiB at 8 x 1024, and
  at 2 x 4096 at most 1.2 times that (attention and the loss keep nothing T x T or T x
  vocabulary);
- the CUDA target's default, unfused: printed beside them, and more than twice the fused plan
  at 8 x 1024 (else the fusion would not be what keeps the plan small);
- activations in 16 bits at --precision bf16 against fp32 ones, at 8 x 1024: at most 0.7 times
  the bytes, on the CPU target (unfused at bf16) and on the CUDA target fused.

    FUYOU_TORCH2/bin/python test/e2e/plan_memory.py --compiler build/bin/fuyou-compile --work DIR
"""
import json
import os
import re
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import runs  # noqa: E402

GPT2_124M = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_embd": 768, "n_head": 12,
             "n_layer": 12, "n_positions": 4096, "vocab_size": 50257}
GIB = 1 << 30


def fail(msg):
    sys.exit("plan_memory: FAIL: " + msg)


def run(cmd, what):
    return runs.checked("plan_memory", cmd, what).stdout


def device_bytes(compiler, model, flags):
    plan = run([compiler, model, "--emit=plan"] + flags, f"fuyou-compile {' '.join(flags)}")
    m = re.search(r"^device: (\d+) B", plan, re.M)
    if not m:
        fail(f"no 'device: N B' line in the plan of {' '.join(flags)}:\n{plan[:1000]}")
    return int(m.group(1))


def main():
    a = runs.compiler_and_work()
    ckpt = os.path.join(a.work, "gpt2-124m")
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(GPT2_124M, f)
    configs = {"cpu": ["--target", "cpu"], "cuda --fuse all": ["--target", "cuda", "--fuse", "all"],
               "cuda": ["--target", "cuda"]}
    half = {"cpu bf16": ["--target", "cpu", "--precision", "bf16"],
            "cpu bf16 --half-activations no": ["--target", "cpu", "--precision", "bf16", "--half-activations", "no"],
            "cuda --fuse all --half-activations yes": ["--target", "cuda", "--fuse", "all", "--half-activations", "yes"]}
    got = {}
    for B, T in ((8, 1024), (2, 4096)):
        model = os.path.join(a.work, f"g124_{B}x{T}.onnx")
        run([sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", ckpt, "--meta", "--out", model,
             "--batch", str(B), "--seq", str(T)], f"export at {B} x {T}")
        for name, flags in configs.items():
            got[name, T] = device_bytes(a.compiler, model, flags)
        print(f"plan_memory: {B} x {T}: " +
              ", ".join(f"{name} {got[name, T] / GIB:.3f} GiB" for name in configs))
        if T == 1024:
            for name, flags in half.items():
                got[name, T] = device_bytes(a.compiler, model, flags)
                print(f"plan_memory: {B} x {T}: {name}: {got[name, T]} B ({got[name, T] / GIB:.3f} GiB)")
    for name in ("cpu", "cuda --fuse all"):
        short, long = got[name, 1024], got[name, 4096]
        if short > 6 * GIB:
            fail(f"{name}: {short} B at 8 x 1024, over 6 GiB")
        if long > 1.2 * short:
            fail(f"{name}: {long} B at 2 x 4096, {long / short:.3f} times 8 x 1024's")
    if got["cuda", 1024] < 2 * got["cuda --fuse all", 1024]:
        fail(f"the unfused CUDA plan ({got['cuda', 1024]} B) is not twice the fused one's")
    for half16, full in (("cpu bf16", "cpu bf16 --half-activations no"),
                         ("cuda --fuse all --half-activations yes", "cuda --fuse all")):
        h, f = got[half16, 1024], got[full, 1024]
        print(f"plan_memory: 16-bit activations: {half16}: {h / f:.3f} times {full}")
        if h > 0.7 * f:
            fail(f"16-bit activations ({half16}): {h} B, {h / f:.3f} times fp32 activations' {f} B")
    print("plan_memory: PASS")


if __name__ == "__main__":
    main()
