#!/usr/bin/env python3
"""Hugging Face model families as people export them today: current transformers
models (tiny random configs) exported by torch 2.x's default exporter through
examples/export_hf.py, compiled, and trained 20 AdamW steps on the CPU target;
every step's loss within 1e-4 relative of torch training the same model from the
same weights on the same batches.

    FUYOU_TORCH2/bin/python test/e2e/hf_families.py --compiler build/bin/fuyou-compile \
        --work DIR [--family llama_gqa ...]

Run by the interpreter of the torch 2.x environment that make deps creates.
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
B, T, STEPS, LR, WD = 4, 32, 20, 1e-3, 0.01
# family -> export_hf.py arguments beyond --config and --out
FAMILIES = {
    "gpt2": [],
    "gpt2_labels": ["--loss", "labels"],
    "llama_gqa": [],
    "llama_mha": [],
    "llama_gqa_labels": ["--loss", "labels"],
    "mistral": [],
    "qwen2": [],
    "qwen3": [],
    "phi3": [],
    "gemma": [],
    "gpt_neox": [],
    # a checkpoint directory as save_pretrained writes it (config.json, model.safetensors)
    "qwen2_checkpoint": [],
}


def fail(msg):
    sys.exit("hf_families: FAIL: " + msg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--family", action="append", default=None, choices=sorted(FAMILIES))
    a = ap.parse_args()
    import torch
    import oracle
    import export_hf
    import runs

    data = runs.tokens(a.work, 100000)
    w = lambda name: os.path.join(a.work, name)
    batches = oracle.Batches(oracle.load_tokens(data), B, T)
    torch.set_num_threads(1)
    for fam in a.family or FAMILIES:
        config = fam.replace("_labels", "")
        if fam.endswith("_checkpoint"):
            import export_hf as ex
            config = w(fam + "_dir")
            ex.build(fam.replace("_checkpoint", ""), T, 3, "cross_entropy").m.save_pretrained(config)
        onnx_path = w(fam + ".onnx")
        r = subprocess.run([sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", config,
                            "--out", onnx_path, "--batch", str(B), "--seq", str(T)] + FAMILIES[fam],
                           capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{fam}: export_hf.py: {r.stderr.strip()[-2000:]}")
        r = subprocess.run([a.compiler, onnx_path, "-o", w("train_" + fam)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{fam}: fuyou-compile: {r.stderr.strip()}")
        try:
            ours, _ = runs.program_losses(w("train_" + fam), data, STEPS, LR, w(fam + ".jsonl"),
                                          ["--weight-decay", str(WD)])
        except RuntimeError as e:
            fail(f"{fam}: the program: {e}")

        # torch: the same module export_hf.py exported (rebuilt from its sidecar, same seed),
        # its weights checked equal to the ONNX file's, trained on the same batches.
        ref = runs.torch_losses(export_hf.load_exported(onnx_path), batches, STEPS, LR, WD)
        worst = runs.worst_rel(ours, ref)
        if not worst <= 1e-4 or not ours[-1] < ours[0]:
            fail(f"{fam}: losses {ours} against torch's {ref} (worst rel {worst:.2e})")
        print(f"hf_families: {fam}: {STEPS} losses within {worst:.1e} of torch's, {ours[0]:.4f} -> {ours[-1]:.4f}")
    print("hf_families: PASS")


if __name__ == "__main__":
    main()
