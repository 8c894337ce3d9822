#!/usr/bin/python3
"""Hugging Face models as users export them: transformers' GPT2LMHeadModel and
LlamaForCausalLM (grouped-query attention, its causal mask built from
positions), wrapped so that forward(idx, targets) returns the cross-entropy,
exported by torch.onnx in training mode, compiled and trained; every step's
loss within 1e-4 of torch training the same wrapped model with AdamW on the
same batches.

    PYTHONPATH=build/pydeps /usr/bin/python3 test/e2e/hf_export.py \
        --compiler build/bin/fuyou-compile --work DIR

(make deps puts a pinned transformers in build/pydeps.)
"""
import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
B, T, STEPS, LR = 4, 32, 10, 1e-3


def fail(msg):
    sys.exit("hf_export: FAIL: " + msg)


def build(kind):
    import transformers as tf

    # No dropout: the program's masks are not torch's, and the losses are compared.
    if kind == "gpt2":
        cfg = tf.GPT2Config(vocab_size=256, n_positions=T, n_embd=64, n_layer=2, n_head=2,
                            resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return tf.GPT2LMHeadModel(cfg)
    cfg = tf.LlamaConfig(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=T)
    return tf.LlamaForCausalLM(cfg)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    try:
        import transformers  # noqa: F401
    except ImportError:
        fail("no transformers on PYTHONPATH (make deps installs it in BUILD/pydeps)")
    import torch
    import torch.nn.functional as F
    import oracle
    import runs

    os.makedirs(a.work, exist_ok=True)
    w = lambda name: os.path.join(a.work, name)
    data = w("tokens.bin")
    if not os.path.exists(data):
        subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples/prepare_data.py"), "--out", data,
                        "--max-bytes", "100000"], check=True, capture_output=True)
    batches = oracle.Batches(oracle.load_tokens(data), B, T)

    class WithLoss(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, idx, targets):
            logits = self.m(input_ids=idx, use_cache=False).logits
            return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))

    torch.set_num_threads(1)
    for kind in ("gpt2", "llama"):
        torch.manual_seed(0)
        model = WithLoss(build(kind)).train()
        onnx_path = w(kind + ".onnx")
        idx, tgt = batches.get(0)
        torch.onnx.export(model, (idx, tgt), onnx_path, opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                          do_constant_folding=False, input_names=["idx", "targets"], output_names=["loss"])
        r = subprocess.run([a.compiler, onnx_path, "-o", w("train_" + kind)], capture_output=True, text=True)
        if r.returncode != 0:
            fail(f"{kind}: fuyou-compile: {r.stderr.strip()}")
        try:
            ours, _ = runs.program_losses(w("train_" + kind), data, STEPS, LR, w(kind + ".jsonl"))
        except RuntimeError as e:
            fail(f"{kind}: the program: {e}")
        # torch from the weights it exported, on the same batches.
        ref = runs.torch_losses(model, batches, STEPS, LR)
        worst = runs.worst_rel(ours, ref)
        if len(ours) != STEPS or not worst <= 1e-4 or not ours[-1] < ours[0]:
            fail(f"{kind}: losses {ours} against torch's {ref} (worst rel {worst:.2e})")
        print(f"hf_export: transformers {kind}: {STEPS} losses within {worst:.1e} of torch's, "
              f"{ours[0]:.4f} -> {ours[-1]:.4f}")
    print("hf_export: PASS")


if __name__ == "__main__":
    main()
