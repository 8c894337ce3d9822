#!/usr/bin/env python3
"""Our training step against PyTorch eager and torch.compile on one GPU, same batch, one run.

Models (B 8, T 1024, bf16):
  gpt124    GPT-2 124M (examples/models.py: 12 layers, d 768, tied, vocabulary 50,304), in core
  llama162  Llama-shaped 162M (RMSNorm, RoPE, SwiGLU, untied; 12 layers, d 768), in core
  xl        GPT-2 XL's shape (48 layers, d 1600): ours under --gpu-mem 24G with AdamW on the CPU,
            PyTorch in core with the whole GPU
Ours, AdamW's state in memory: `default` (fuyou-compile --target cuda) and `fast` (--fuse all
--half-activations yes --device-optimizer auto: the fused attention, loss and bias kernels,
activations in 16 bits, and the last layer groups' AdamW on the GPU where the compiler predicts it
pays).
PyTorch: bf16 autocast; eager with torch.optim.AdamW (foreach), torch.compile (default mode) of the
model with the fused AdamW.

  prepare OUTDIR   (development machine, torch 2.x's Python, whose exporter's graphs fuse
                   attention): per model OUTDIR/NAME/{default,fast}.cpp, their plans, model.json
                   (the config), shape; for xl also params.json (the trained tensors' names and
                   shapes). xl's ONNX is bench/gpu/planner_xl.py's export.
  run DIR          (GPU machine, the programs built beside their C++ as DIR/NAME/default and
                   DIR/NAME/fast): weights drawn, each program and each PyTorch run timed (median
                   step after the first few); prints one "headline NAME: ..." line per model and
                   writes $OUT/headline.json.

Goals (issue 44): fast >= 1.0x torch.compile on gpt124 and llama162; xl at >= 300 model TFLOPS and
>= 0.85x torch.compile in core.
"""
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, HERE)

B, T = 8, 1024
SMALL = {
    "gpt124": dict(model="gpt2", vocab_size=50304, n_layer=12, n_head=12, d_model=768, block_size=1024),
    "llama162": dict(model="llama", vocab_size=50304, n_layer=12, n_head=12, d_model=768, block_size=1024),
}
# examples/models.py's GPT-2 at Hugging Face GPT-2 XL's shape, for PyTorch's runs.
XL = dict(model="gpt2", vocab_size=50257, n_layer=48, n_head=25, d_model=1600, block_size=1024)
FAST = ["--fuse", "all", "--half-activations", "yes", "--device-optimizer", "auto"]
FLAGS = {"default": ["--state", "memory"], "fast": ["--state", "memory"] + FAST}
XL_FLAGS = ["--gpu-mem", "24G", "--state", "memory"]
STEPS, TORCH_STEPS = 20, 25


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"headline: {' '.join(cmd[:3])} ...: {r.stderr.strip()[-600:]}")
    return r.stdout


def matmul_params(cfg):
    """Weights that multiply activations (the blocks' and the head's), for model FLOPs."""
    L, d, V = cfg["n_layer"], cfg["d_model"], cfg["vocab_size"]
    if cfg["model"] == "llama":
        f = cfg.get("ffn_hidden") or (8 * d // 3 + 31) // 32 * 32
        return L * (4 * d * d + 3 * d * f) + V * d
    return L * 12 * d * d + V * d


def flops_per_step(cfg):
    """6 per weight and token, and attention's scores and values counted whole (T x T), as
    nanoGPT's MFU and bench/gpu/run.py count them."""
    L, d = cfg["n_layer"], cfg["d_model"]
    return B * T * (6 * matmul_params(cfg) + 12 * L * d * T)


def prepare(out):
    fc = os.path.join(ROOT, "build", "bin", "fuyou-compile")
    for name, c in SMALL.items():
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        onnx = os.path.join(d, "model.onnx")
        args = [sys.executable, os.path.join(ROOT, "examples", "export.py"), "--model", c["model"], "--out", onnx,
                "--batch", str(B), "--seq", str(T), "--vocab", str(c["vocab_size"]), "--n-layer", str(c["n_layer"]),
                "--n-head", str(c["n_head"]), "--d-model", str(c["d_model"]), "--block-size", str(c["block_size"])]
        sh(args)
        os.replace(onnx + ".json", os.path.join(d, "model.json"))
        for prog, flags in FLAGS.items():
            base = [fc, onnx, "--target", "cuda"] + flags
            with open(os.path.join(d, prog + ".cpp"), "w") as f:
                f.write(sh(base + ["--emit=cpp"]))
            with open(os.path.join(d, prog + ".plan.txt"), "w") as f:
                f.write(sh(base + ["--emit=plan"]))
        for f in (onnx, onnx + ".data"):
            if os.path.exists(f):
                os.remove(f)
        print(f"headline: {name} prepared")
    import planner_xl
    d = os.path.join(out, "xl")
    os.makedirs(d, exist_ok=True)
    onnx = planner_xl.export(os.path.join("/tmp", "fy_planner_xl"), sys.executable)
    for prog, flags in (("default", []), ("fast", FAST)):
        base = [fc, onnx, "--target", "cuda"] + XL_FLAGS + flags
        with open(os.path.join(d, prog + ".cpp"), "w") as f:
            f.write(sh(base + ["--emit=cpp"]))
        with open(os.path.join(d, prog + ".plan.txt"), "w") as f:
            f.write(sh(base + ["--emit=plan"]))
    with open(os.path.join(d, "params.json"), "w") as f:
        json.dump(planner_xl.params_of(onnx), f)
    with open(os.path.join(d, "model.json"), "w") as f:
        json.dump(XL, f)
    print("headline: xl prepared")


def ours(exe, weights, tokens):
    """Median ms of our program's steps after the first three, and its peak device bytes."""
    log = os.path.join(os.environ.get("OUT", "/tmp"), "headline_" + os.path.basename(os.path.dirname(exe)) + "_" +
                       os.path.basename(exe) + ".jsonl")
    r = subprocess.run([exe, "--data", tokens, "--steps", str(STEPS), "--weights", weights, "--log-every", "1000",
                        "--log-json", log], capture_output=True, text=True)
    if r.returncode != 0:
        return None, r.stderr.strip()[-400:]
    rows = [json.loads(line) for line in open(log) if line.strip()]
    return statistics.median(x["ms"] for x in rows[3:]), None


def run(top):
    import run as gpurun
    import planner_xl
    tokens = os.path.join(ROOT, ".gpu", "tokens_zipf.bin")
    if not os.path.exists(tokens):
        tokens = os.path.join(ROOT, ".gpu", "tokens.bin")
    res, ok = {}, True
    for name in ("gpt124", "llama162", "xl"):
        d = os.path.join(top, name)
        if not os.path.isdir(d):
            print(f"headline {name}: FAIL: no {d} (bench/gpu/headline.py prepare)")
            ok = False
            continue
        cfg = json.load(open(os.path.join(d, "model.json")))
        weights = os.path.join(d, "weights.safetensors")
        if not os.path.exists(weights):
            if name == "xl":
                planner_xl.draw_weights(os.path.join(d, "params.json"), weights)
            else:
                gpurun.weights(os.path.join(d, "model.json"), weights)
        flops = flops_per_step(cfg)
        row = {"flops_per_step": flops}
        for prog in ("default", "fast"):
            ms, err = ours(os.path.join(d, prog), weights, tokens)
            row[prog] = {"ms": ms} if ms else {"error": err}
        for label, compiled in (("eager", False), ("compile", True)):
            try:
                ms, peak = gpurun.torch_eager(cfg, B, T, TORCH_STEPS, compiled)
                row[label] = {"ms": ms, "peak_bytes": peak}
            except Exception as e:  # an out-of-memory eager run is a figure too
                row[label] = {"error": f"{type(e).__name__}: {str(e)[:200]}"}
        res[name] = row

        def fig(k):
            r = row[k]
            return f"{r['ms']:.1f} ms ({flops / r['ms'] / 1e9:.0f} TFLOPS)" if "ms" in r else f"FAIL ({r['error']})"
        ratio = (row["compile"]["ms"] / row["fast"]["ms"]) if "ms" in row["fast"] and "ms" in row["compile"] else None
        print(f"headline {name}: ours {fig('default')}, fast {fig('fast')}; torch eager {fig('eager')}, "
              f"torch.compile {fig('compile')}; fast / torch.compile speed "
              f"{'-' if ratio is None else f'{ratio:.3f}x'}")
        ok &= all("ms" in row[k] for k in ("default", "fast"))
    with open(os.path.join(os.environ.get("OUT", "/tmp"), "headline.json"), "w") as f:
        json.dump(res, f, indent=1)
    return ok


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    done = {"prepare": lambda: prepare(*args) or True, "run": lambda: run(*args)}[cmd]()
    sys.exit(0 if done else 1)
