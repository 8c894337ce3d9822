#!/usr/bin/env python3
"""Export a Hugging Face causal LM's training graph, (input ids, target ids) -> loss, to
ONNX for fuyou-compile, with the PyTorch people use today (torch 2.x's exporter).

    python examples/export_hf.py --config DIR_OR_NAME --out model.onnx [--batch 4 --seq 32]

--config is a local checkpoint directory (config.json, and its weights when it has them:
model.safetensors, sharded or not) or the name of a tiny random config for tests:
gpt2, llama_gqa, llama_mha, mistral, qwen2, qwen3, phi3, gemma, gpt_neox. Nothing is
downloaded.

--loss cross_entropy (default): mean cross-entropy of the logits against the target ids,
position by position. --loss labels: the model's own loss, forward(input_ids, labels=...),
which shifts the labels by one inside the model.

The export is torch.onnx.export(dynamo=True, optimize=False). optimize=False matters:
the exporter's default graph optimizer merges initializers whose bytes are equal (every
norm weight initialised to ones becomes one tensor), and training that graph would tie
weights the model keeps apart. Buffers (RoPE frequencies, masks) are recorded as buffers by
the exporter and listed in the "fuyou.frozen" metadata, so they are not trained.
Writes FILE.onnx (FILE.onnx.data beside it over 2 GiB) and FILE.onnx.json (what
load_exported needs to rebuild the same module).
"""
import argparse
import contextlib
import json
import os
import sys

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

# name -> (transformers class names, config arguments): small enough to export and
# train in seconds, with each family's distinctive parts (grouped-query heads, a
# sliding window, q/k norms, partial rotary, tied heads).
def _tiny(T):
    common = dict(vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                  max_position_embeddings=T)
    return {
        "gpt2": ("GPT2Config", "GPT2LMHeadModel",
                 dict(vocab_size=256, n_positions=T, n_embd=64, n_layer=2, n_head=2,
                      resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=0)),
        "llama_gqa": ("LlamaConfig", "LlamaForCausalLM", dict(common, num_attention_heads=4, num_key_value_heads=2)),
        "llama_mha": ("LlamaConfig", "LlamaForCausalLM", dict(common, num_attention_heads=4, num_key_value_heads=4)),
        "mistral": ("MistralConfig", "MistralForCausalLM",
                    dict(common, num_attention_heads=4, num_key_value_heads=2, sliding_window=T // 2)),
        "qwen2": ("Qwen2Config", "Qwen2ForCausalLM", dict(common, num_attention_heads=4, num_key_value_heads=2)),
        "qwen3": ("Qwen3Config", "Qwen3ForCausalLM",
                  dict(common, num_attention_heads=4, num_key_value_heads=2, head_dim=16)),
        "phi3": ("Phi3Config", "Phi3ForCausalLM",
                 dict(common, num_attention_heads=4, num_key_value_heads=2, pad_token_id=0)),
        "gemma": ("GemmaConfig", "GemmaForCausalLM",
                  dict(common, num_attention_heads=4, num_key_value_heads=1, head_dim=16)),
        "gpt_neox": ("GPTNeoXConfig", "GPTNeoXForCausalLM",
                     dict(common, num_attention_heads=4, rotary_pct=0.25)),
    }


class WithLoss(torch.nn.Module):
    """forward(idx, targets) -> the scalar loss fuyou-compile trains."""

    def __init__(self, model, loss):
        super().__init__()
        self.m = model
        self.loss = loss

    def forward(self, idx, targets):
        if self.loss == "labels":
            return self.m(input_ids=idx, labels=targets, use_cache=False).loss
        logits = self.m(input_ids=idx, use_cache=False).logits
        return F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class ParametersOnMeta(TorchFunctionMode):
    """torch.empty, with which torch's layers allocate their parameters, on the meta device
    (no memory, no initialisation); every other factory as usual, so that buffers (RoPE
    frequencies, masks) are computed for real."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if func is torch.empty:
            kwargs["device"] = "meta"
        return func(*args, **kwargs)


def build(config, seq, seed, loss, meta=False):
    """The wrapped module: a checkpoint directory's weights, or a tiny config's from `seed`;
    with `meta`, its parameters on the meta device (shapes only: a directory's config.json
    alone is read, never its weights)."""
    import transformers as tf

    torch.manual_seed(seed)
    if os.path.isdir(config):
        if not os.path.exists(os.path.join(config, "config.json")):
            sys.exit(f"export_hf.py: error: {config}: no config.json")
        weights = not meta and any(f.endswith((".safetensors", ".bin")) for f in os.listdir(config))
        if weights:
            model = tf.AutoModelForCausalLM.from_pretrained(config, torch_dtype=torch.float32)
        else:
            with ParametersOnMeta() if meta else contextlib.nullcontext():
                model = tf.AutoModelForCausalLM.from_config(tf.AutoConfig.from_pretrained(config))
    else:
        tiny = _tiny(seq)
        if config not in tiny:
            sys.exit(f"export_hf.py: error: --config {config!r} is neither a directory nor one of "
                     f"{', '.join(sorted(tiny))}")
        cfg_cls, model_cls, kw = tiny[config]
        with ParametersOnMeta() if meta else contextlib.nullcontext():
            model = getattr(tf, model_cls)(getattr(tf, cfg_cls)(**kw))
    return WithLoss(model.float(), loss).train()


def export_meta(module, idx, targets, tmp, out):
    """The graph of a module whose parameters are on the meta device: each parameter an
    external-data reference into OUT.data, laid out in order, a sparse file of that size (the
    program reads the weights from a checkpoint, --weights); buffers with their values."""
    import onnx_ir as ir

    buffers = {n: b.detach().clone() for n, b in module.named_buffers()}
    module = module.to("meta")
    prog = torch.onnx.export(module, (idx.to("meta"), targets.to("meta")), dynamo=True, optimize=False,
                             input_names=["idx", "targets"], output_names=["loss"])
    data = os.path.basename(out) + ".data"
    offset = 0
    for name, v in prog.model.graph.initializers.items():
        t = v.const_value
        if name in buffers:
            v.const_value = ir.tensor(buffers[name].numpy(), name=name)
            continue
        length = int(t.size * t.dtype.itemsize)
        v.const_value = ir.ExternalTensor(data, offset, length, t.dtype, shape=t.shape, name=name,
                                          base_dir=os.path.dirname(os.path.abspath(out)))
        offset += (length + 4095) // 4096 * 4096
    ir.save(prog.model, tmp)
    with open(os.path.join(os.path.dirname(os.path.abspath(out)), data), "wb") as f:
        f.truncate(offset)


def export(module, idx, targets, out, external=False, meta=False):
    nbytes = sum(t.numel() * t.element_size() for t in module.state_dict().values())
    big = external or nbytes >= (2 << 30) - (64 << 20)
    tmp = out + ".tmp"
    if meta:
        export_meta(module, idx, targets, tmp, out)
        big = False  # (the references already name the final file)
    else:
        torch.onnx.export(module, (idx, targets), tmp, dynamo=True, optimize=False, external_data=big,
                          input_names=["idx", "targets"], output_names=["loss"])
    import onnx
    m = onnx.load(tmp, load_external_data=False)
    names = {t.name for t in m.graph.initializer}
    frozen = [n for n, _ in module.named_buffers() if n in names]
    # Every other name of a tied tensor (a head stored as the embedding): a
    # checkpoint may hold it under either.
    by_id = {}
    for n, t in module.named_parameters(remove_duplicate=False):
        by_id.setdefault(id(t), []).append(n)
    aliases = [f"{kept}={other}" for group in by_id.values() for kept in group if kept in names
               for other in group if other != kept]
    del m.metadata_props[:]
    for key, value in (("fuyou.frozen", ",".join(frozen)), ("fuyou.aliases", ";".join(aliases))):
        entry = m.metadata_props.add()
        entry.key, entry.value = key, value
    if big:  # the weights went to TMP.data: name them after the final file
        data = os.path.basename(out) + ".data"
        for t in m.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = data
        os.replace(tmp + ".data", os.path.join(os.path.dirname(os.path.abspath(out)), data))
    onnx.save(m, tmp)
    os.replace(tmp, out)
    return m


def load_exported(onnx_path):
    """The module export_hf.py exported to onnx_path, with the ONNX file's initial weights
    (checked equal to the rebuilt module's, tied ones through their one initializer)."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    with open(onnx_path + ".json") as f:
        side = json.load(f)
    module = build(side["config"], side["seq"], side["seed"], side["loss"])
    m = onnx.load(onnx_path)
    inits = {t.name: numpy_helper.to_array(t) for t in m.graph.initializer}
    tensors = dict(module.named_parameters(remove_duplicate=False))
    tensors.update(dict(module.named_buffers(remove_duplicate=False)))
    for name, t in tensors.items():
        if name in inits and not np.array_equal(inits[name], t.detach().numpy()):
            sys.exit(f"export_hf.py: error: {onnx_path}: initializer {name} differs from the rebuilt module")
    covered = {id(t) for n, t in tensors.items() if n in inits}  # a tied weight through any of its names
    missing = sorted(n for n, t in module.named_parameters() if id(t) not in covered)
    if missing:
        sys.exit(f"export_hf.py: error: {onnx_path}: parameters with no initializer: {missing}")
    return module


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True, help="checkpoint directory or tiny config name")
    p.add_argument("--out", required=True)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--loss", choices=["cross_entropy", "labels"], default="cross_entropy")
    p.add_argument("--external-data", action="store_true",
                   help="weights in FILE.onnx.data whatever their size (the default past 2 GiB)")
    p.add_argument("--meta", action="store_true",
                   help="the graph alone, from the meta device: no weight is made or written (FILE.onnx.data is a "
                        "sparse file), so any size exports in seconds; train it with --weights CHECKPOINT")
    a = p.parse_args(argv)
    if int(torch.__version__.split(".")[0]) < 2:
        sys.exit(f"export_hf.py: error: needs torch 2.x (this is {torch.__version__})")
    module = build(a.config, a.seq, a.seed, a.loss, a.meta)
    vocab = module.m.config.vocab_size
    g = torch.Generator().manual_seed(a.seed)
    idx = torch.randint(0, vocab, (a.batch, a.seq), generator=g)
    targets = torch.randint(0, vocab, (a.batch, a.seq), generator=g)
    m = export(module, idx, targets, a.out, a.external_data, a.meta)
    with open(a.out + ".json", "w") as f:
        json.dump(dict(config=a.config, seq=a.seq, batch=a.batch, seed=a.seed, loss=a.loss, meta=a.meta), f, indent=2)
        f.write("\n")
    print(f"wrote {a.out} ({len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers, "
          f"opset {m.opset_import[0].version})")


if __name__ == "__main__":
    main()
