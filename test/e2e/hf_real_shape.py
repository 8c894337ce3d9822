#!/usr/bin/env python3
"""A Hugging Face model at the width users train: Llama-2-7B's layer shapes (hidden 4096,
MLP 11008, 32 heads, vocabulary 32000), two layers, from a checkpoint directory holding only
config.json, exported by examples/export_hf.py with torch 2.x.

1. At T = 4096 the graph compiles, its causal mask folded and its attention, norms, SwiGLU and
   loss formed into attention (in the Linears' layout: no transpose), rms_norm, swiglu and
   linear_cross_entropy (what keeps a long sequence cheap): no buffer of the program is T x T,
   nor T x vocabulary (the logits).
2. At T = 64 the program trains 3 AdamW steps within 1e-4 of torch on the same batches.

    FUYOU_TORCH2/bin/python test/e2e/hf_real_shape.py --compiler build/bin/fuyou-compile --work DIR
"""
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
import runs  # noqa: E402
LLAMA2_7B_LAYERS = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                    "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
                    "num_hidden_layers": 2, "vocab_size": 32000, "max_position_embeddings": 4096,
                    "rms_norm_eps": 1e-5, "rope_theta": 10000.0, "tie_word_embeddings": False,
                    "bos_token_id": 1, "eos_token_id": 2}
STEPS, LR = 3, 1e-4


def fail(msg):
    sys.exit("hf_real_shape: FAIL: " + msg)


def run(cmd, what):
    return runs.checked("hf_real_shape", cmd, what)


def main():
    a = runs.compiler_and_work()
    w = lambda name: os.path.join(a.work, name)
    ckpt = w("llama2-7b-layers")
    os.makedirs(ckpt, exist_ok=True)
    with open(os.path.join(ckpt, "config.json"), "w") as f:
        json.dump(LLAMA2_7B_LAYERS, f)

    # 1. The long sequence: compiles, with the fused forms.
    long = w("t4096.onnx")
    run([sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", ckpt, "--out", long,
         "--batch", "1", "--seq", "4096"], "export at T 4096")
    t0 = time.time()
    run([a.compiler, long, "--emit=fysched", "-o", w("t4096.fysched")], "fuyou-compile at T 4096")
    secs = time.time() - t0
    kernels = {}
    text = open(w("t4096.fysched")).read()
    for k in re.findall(r'fysched\.launch "(\w+)"', text):
        kernels[k] = kernels.get(k, 0) + 1
    # forward, and recompute or backward uses
    want = {"attention": 2, "attention_grad": 2, "rms_norm": 10, "swiglu": 2, "swiglu_grad": 2,
            "linear_cross_entropy": 1}
    short = {k: (kernels.get(k, 0), n) for k, n in want.items() if kernels.get(k, 0) < n}
    if short or {"softmax", "masked_softmax", "where", "softmax_cross_entropy", "silu", "transpose"} & set(kernels):
        fail(f"T 4096: kernels {kernels}: expected at least {want} and no softmax, masked softmax, where, "
             "unfused loss, silu or transpose")
    # ([B, H, T, T]: the weights are 4096 x 4096 too at this width)
    square = re.findall(r"tensor<\d+x\d+x4096x4096x[a-z0-9]+>", text)
    if square:
        fail(f"T 4096: {len(square)} T x T tensors in the program, e.g. {square[0]}")
    logits = re.findall(r"tensor<(?:\d+x)*4096x32000x[a-z0-9]+>", text)
    if logits:
        fail(f"T 4096: {len(logits)} T x vocabulary tensors in the program, e.g. {logits[0]}")
    print(f"hf_real_shape: T 4096 compiles in {secs:.1f} s: attention x{kernels['attention']}, "
          f"attention_grad x{kernels['attention_grad']}, rms_norm x{kernels['rms_norm']}, swiglu x{kernels['swiglu']}, "
          f"linear_cross_entropy x{kernels['linear_cross_entropy']}, no T x T or T x vocabulary tensor")
    for f in (long, long + ".data"):
        if os.path.exists(f):
            os.remove(f)

    # 2. A short sequence trains like torch.
    import torch
    import export_hf
    import oracle
    data = runs.tokens(a.work)
    B, T = 1, 64
    model_path = w("t64.onnx")
    run([sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", ckpt, "--out", model_path,
         "--batch", str(B), "--seq", str(T)], "export at T 64")
    run([a.compiler, model_path, "-o", w("train")], "fuyou-compile at T 64")
    try:
        ours, _ = runs.program_losses(w("train"), data, STEPS, LR, w("ours.jsonl"))
    except RuntimeError as e:
        fail(f"the program: {e}")
    torch.set_num_threads(2)
    batches = oracle.Batches(oracle.load_tokens(data), B, T)
    ref = runs.torch_losses(export_hf.load_exported(model_path), batches, STEPS, LR)
    worst = runs.worst_rel(ours, ref)
    if not worst <= 1e-4:
        fail(f"T 64: losses {ours} against torch's {ref} (worst rel {worst:.2e})")
    print(f"hf_real_shape: T 64: {STEPS} losses within {worst:.1e} of torch's: {ours}")
    if os.path.exists(model_path + ".data"):  # 2.7 GB of weights
        os.remove(model_path + ".data")
    print("hf_real_shape: PASS")


if __name__ == "__main__":
    main()
