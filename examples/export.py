#!/usr/bin/python3
"""Export one of examples/models.py's models (forward + loss) to ONNX for fuyou-compile.

    /usr/bin/python3 examples/export.py --model gpt2 --out gpt2.onnx [--batch 4 --seq 32]
    PY2/bin/python examples/export.py --exporter dynamo --model gpt2 --out gpt2.onnx

Writes FILE.onnx (weights as initializers named as in the module's state_dict, metadata_props
"fuyou.frozen" = the buffer initializers) and FILE.onnx.json (the model config, so
test/e2e/oracle.py can rebuild the same module).

--exporter torchscript (the default on torch 1.x): opset 17, training-mode export; over 2 GiB
the tensors are ONNX external data, one file per tensor beside FILE.onnx, as torch writes them.
--exporter dynamo (the default on torch 2.x): torch.onnx.export(dynamo=True, optimize=False) at
its default opset. optimize=False because the exporter's graph optimizer merges initializers
whose bytes are equal (every all-ones norm weight becomes one tensor), which would train a
different model; over 2 GiB the tensors go to FILE.onnx.data.
"""
import argparse
import json
import os
import sys

import torch
import onnx

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from models import ModelConfig, build_model, frozen_buffer_names  # noqa: E402


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", choices=["gpt2", "llama"], default="gpt2")
    p.add_argument("--out", required=True, help="output .onnx path")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=None, help="sequence length (default: block size)")
    p.add_argument("--seed", type=int, default=1337)
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--n-layer", type=int, default=2)
    p.add_argument("--n-head", type=int, default=2)
    p.add_argument("--d-model", type=int, default=64)
    p.add_argument("--block-size", type=int, default=32)
    p.add_argument("--ffn-hidden", type=int, default=0, help="llama MLP hidden size (0: 8/3*d rounded to 32)")
    p.add_argument("--tie", dest="tie", action="store_true", default=None, help="tie lm_head to wte (gpt2 default)")
    p.add_argument("--no-tie", dest="tie", action="store_false")
    p.add_argument("--gelu", choices=["tanh", "erf"], default="tanh")
    p.add_argument("--dynamic", action="store_true", help="mark batch and seq dims of idx/targets dynamic")
    p.add_argument("--dropout", type=float, default=0.0, help="dropout rate in training (default 0)")
    p.add_argument("--exporter", choices=["torchscript", "dynamo"], default=None,
                   help="torch.onnx's exporter (default: dynamo on torch 2.x, torchscript before)")
    return p.parse_args(argv)


def export_dynamo(model, args, tmp, out, dynamic_axes):
    """torch 2.x's exporter, faithful for training: no graph optimizer (it merges equal
    initializers), the model's parameters and buffers as initializers by name."""
    nbytes = sum(t.numel() * t.element_size() for t in model.state_dict().values())
    big = nbytes >= (2 << 30) - (64 << 20)
    torch.onnx.export(model, args, tmp, dynamo=True, optimize=False, external_data=big,
                      input_names=["idx", "targets"], output_names=["loss"],
                      dynamic_shapes=({0: "batch", 1: "seq"}, {0: "batch", 1: "seq"}) if dynamic_axes else None)
    if big:
        # The weights went to TMP.data: name them after the final file.
        m = onnx.load(tmp, load_external_data=False)
        data = os.path.basename(out) + ".data"
        for t in m.graph.initializer:
            for e in t.external_data:
                if e.key == "location":
                    e.value = data
        os.replace(tmp + ".data", os.path.join(os.path.dirname(os.path.abspath(out)), data))
        onnx.save(m, tmp)


def main(argv=None):
    a = parse_args(argv)
    tie = a.tie if a.tie is not None else (a.model == "gpt2")
    if a.model == "llama" and tie:
        sys.exit("export.py: error: --tie is not supported for llama (untied head)")
    seq = a.seq if a.seq is not None else a.block_size
    if seq > a.block_size:
        sys.exit(f"export.py: error: --seq {seq} exceeds --block-size {a.block_size}")
    cfg = ModelConfig(model=a.model, vocab_size=a.vocab, n_layer=a.n_layer, n_head=a.n_head,
                      d_model=a.d_model, block_size=a.block_size, tie_embeddings=tie,
                      gelu=a.gelu, ffn_hidden=a.ffn_hidden, dropout=a.dropout)

    torch.manual_seed(a.seed)
    torch.set_num_threads(1)
    model = build_model(cfg)
    model.train()

    g = torch.Generator().manual_seed(a.seed)
    idx = torch.randint(0, cfg.vocab_size, (a.batch, seq), dtype=torch.int64, generator=g)
    targets = torch.randint(0, cfg.vocab_size, (a.batch, seq), dtype=torch.int64, generator=g)

    dynamic_axes = None
    if a.dynamic:
        dynamic_axes = {"idx": {0: "batch", 1: "seq"}, "targets": {0: "batch", 1: "seq"}}

    exporter = a.exporter or ("dynamo" if int(torch.__version__.split(".")[0]) >= 2 else "torchscript")
    tmp = a.out + ".tmp"
    if exporter == "dynamo":
        export_dynamo(model, (idx, targets), tmp, a.out, dynamic_axes)
    else:
        # torch 2.x exports with dynamo unless told not to.
        legacy = {"dynamo": False} if int(torch.__version__.split(".")[0]) >= 2 else {}
        torch.onnx.export(
            model, (idx, targets), tmp, **legacy,
            opset_version=17,
            training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False,
            input_names=["idx", "targets"],
            output_names=["loss"],
            export_params=True,
            keep_initializers_as_inputs=False,
            dynamic_axes=dynamic_axes,
        )
    # Over 2 GiB torch writes each tensor to a file of its own beside the
    # model (ONNX external data): they stay there, and only the graph is
    # loaded, edited and written again.
    m = onnx.load(tmp, load_external_data=False)
    os.remove(tmp)

    init_names = {t.name for t in m.graph.initializer}
    state_names = set(model.state_dict().keys())
    stray = sorted(init_names - state_names)
    if stray:
        sys.exit(f"export.py: error: initializers not named after state_dict entries: {stray}")
    frozen = [n for n in frozen_buffer_names(model) if n in init_names]
    del m.metadata_props[:]
    entry = m.metadata_props.add()
    entry.key = "fuyou.frozen"
    entry.value = ",".join(frozen)
    onnx.save(m, tmp)
    onnx.checker.check_model(tmp)  # by path: a model with external data too
    os.replace(tmp, a.out)

    sidecar = dict(cfg.to_dict(), batch=a.batch, seq=seq, seed=a.seed, dynamic=a.dynamic)
    with open(a.out + ".json", "w") as f:
        json.dump(sidecar, f, indent=2, sort_keys=True)
        f.write("\n")

    ops = sorted({n.op_type for n in m.graph.node})
    print(f"wrote {a.out} ({len(m.graph.node)} nodes, {len(m.graph.initializer)} initializers)")
    print("frozen:", ",".join(frozen))
    print("ops:", " ".join(ops))


if __name__ == "__main__":
    main()
