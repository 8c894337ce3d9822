#!/usr/bin/env python3
"""The compile at the sizes the project is for: Hugging Face-shaped GPT-2 XL, Llama-2-7B,
Llama-2-70B and GPT-3 175B graphs exported from the meta device (examples/export_hf.py
--meta: no weight made or written), compiled for the CUDA target under a 24 GB GPU and
256 GB of host memory with the planner, as a user would before a run. Prints, per shape,
the export's and the compile's wall time and peak RSS, and the parameter bytes the
compile would have had to read before it stopped reading weights.

    FUYOU_TORCH2/bin/python bench/compile/scale.py --compiler build/bin/fuyou-compile --work DIR \
        [--shape gpt2xl ...] [--compile-timeout 900]

Goal (issue of 2026-11): the 175B graph in under 60 s and 4 GiB. Figures go to bench/RESULTS.md.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {  # name -> (config.json, batch, seq)
    "gpt2xl": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 48, "n_embd": 1600,
                "n_head": 25, "n_positions": 1024, "vocab_size": 50257, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attn_pdrop": 0.0}, 1, 1024),
    "llama7b": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                 "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
                 "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
                 "rms_norm_eps": 1e-5, "tie_word_embeddings": False}, 1, 4096),
    "llama70b": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8192,
                  "intermediate_size": 28672, "num_attention_heads": 64, "num_key_value_heads": 8,
                  "num_hidden_layers": 80, "vocab_size": 32000, "max_position_embeddings": 4096,
                  "rms_norm_eps": 1e-5, "tie_word_embeddings": False}, 1, 4096),
    "gpt3_175b": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 96, "n_embd": 12288,
                   "n_head": 96, "n_positions": 2048, "vocab_size": 50257, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                   "attn_pdrop": 0.0}, 1, 2048),
}


def timed(cmd, timeout):
    """Runs cmd under /usr/bin/time -v: (exit code, wall seconds, peak RSS GiB, stderr)."""
    t0 = time.time()
    try:
        r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, time.time() - t0, None, "timed out"
    rss = re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr)
    return r.returncode, time.time() - t0, int(rss.group(1)) / 2**20 if rss else None, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--compile-timeout", type=int, default=900)
    a = ap.parse_args()
    for name in a.shape or SHAPES:
        cfg, B, T = SHAPES[name]
        d = os.path.join(a.work, name)
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        model = os.path.join(d, "model.onnx")
        rc, secs, rss, err = timed([sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", d,
                                    "--meta", "--out", model, "--batch", str(B), "--seq", str(T)], 3600)
        if rc != 0:
            print(f"{name}: export failed: {err.strip()[-500:]}")
            continue
        weights = os.path.getsize(model + ".data")
        print(f"{name}: export from the meta device {secs:.1f} s, peak RSS {rss:.2f} GiB; ONNX file "
              f"{os.path.getsize(model) / 2**20:.1f} MiB, weights {weights / 2**30:.1f} GiB referenced "
              f"(sparse: {os.stat(model + '.data').st_blocks * 512 / 2**20:.0f} MiB on disk)", flush=True)
        # The importer and the passes to the scheduled program, without the planner's search.
        rc, secs, rss, err = timed([a.compiler, model, "--target", "cuda", "--emit=fysched", "-o",
                                    os.path.join(d, "sched.mlir")], a.compile_timeout)
        print(f"{name}: import and lowering (--emit=fysched) {secs:.1f} s, peak RSS {rss:.2f} GiB"
              if rc == 0 else f"{name}: --emit=fysched failed: {err.strip()[-300:]}", flush=True)
        rc, secs, rss, err = timed([a.compiler, model, "--target", "cuda", "--gpu-mem", "24G", "--cpu-mem", "256G",
                                    "--emit=plan", "-o", os.path.join(d, "plan.txt")], a.compile_timeout)
        if rc != 0:
            print(f"{name}: compile {'timed out' if rc is None else 'failed'} after {secs:.0f} s: "
                  f"{err.strip()[-300:]}", flush=True)
            continue
        params = re.search(r"(\d+) trainable parameters", err)
        print(f"{name}: compile with the planner (--target cuda --gpu-mem 24G --cpu-mem 256G) {secs:.1f} s, "
              f"peak RSS {rss:.2f} GiB, {int(params.group(1)) / 1e9:.2f}B parameters never read", flush=True)


if __name__ == "__main__":
    main()
