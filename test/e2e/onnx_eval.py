#!/usr/bin/python3
"""A small numpy interpreter for the ONNX ops that examples/export.py's models use.

    /usr/bin/python3 test/e2e/onnx_eval.py --onnx M.onnx --data tokens.bin --batch 4 --seq 32 [--step S]

Evaluates the exported graph's forward loss on the batch of step S (batch contract) in float32,
independently of torch, and prints it next to the oracle module's loss on the same batch: a check
that the ONNX file means what the oracle trains. Dropout is the identity (ratio must be 0).
"""
import argparse
import math
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

_erf = np.vectorize(math.erf, otypes=[np.float64])


def _attrs(node):
    return {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}


def _softmax(x, axis):
    m = np.max(x, axis=axis, keepdims=True)
    e = np.exp(x - m)
    return e / np.sum(e, axis=axis, keepdims=True)


def run_node(op, ins, at):
    if op == "Constant":
        return [numpy_helper.to_array(at["value"])]
    if op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal"):
        a, b = ins
        f = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide,
             "Pow": np.power, "Equal": np.equal}[op]
        r = f(a, b)
        return [r if op == "Equal" else r.astype(a.dtype)]
    if op in ("Neg", "Sqrt", "Tanh", "Sigmoid", "Erf", "Reciprocal", "Exp", "Log"):
        x = ins[0]
        f = {"Neg": np.negative, "Sqrt": np.sqrt, "Tanh": np.tanh, "Exp": np.exp, "Log": np.log,
             "Sigmoid": lambda v: 1.0 / (1.0 + np.exp(-v)), "Erf": _erf,
             "Reciprocal": lambda v: 1.0 / v}[op]
        return [f(x).astype(x.dtype)]
    if op == "Cast":
        return [ins[0].astype(onnx.mapping.TENSOR_TYPE_TO_NP_TYPE[at["to"]])]
    if op == "Where":
        return [np.where(*ins)]
    if op == "MatMul":
        return [np.matmul(*ins)]
    if op == "Transpose":
        return [np.transpose(ins[0], at.get("perm"))]
    if op == "Reshape":
        x, shape = ins[0], [int(v) for v in ins[1]]
        shape = [x.shape[i] if v == 0 and not at.get("allowzero", 0) else v for i, v in enumerate(shape)]
        return [x.reshape(shape)]
    if op == "Shape":
        return [np.array(ins[0].shape, dtype=np.int64)]
    if op == "Gather":
        return [np.take(ins[0], ins[1], axis=at.get("axis", 0))]
    if op == "Unsqueeze":
        x = ins[0]
        for ax in sorted(int(a) % (x.ndim + len(ins[1])) for a in ins[1]):
            x = np.expand_dims(x, ax)
        return [x]
    if op == "Squeeze":
        return [np.squeeze(ins[0], axis=tuple(int(a) for a in ins[1])) if len(ins) > 1 else np.squeeze(ins[0])]
    if op == "Concat":
        return [np.concatenate(ins, axis=at["axis"])]
    if op == "Split":
        x, axis = ins[0], at.get("axis", 0)
        cuts = np.cumsum([int(s) for s in ins[1]])[:-1]
        return list(np.split(x, cuts, axis=axis))
    if op == "Slice":
        x = ins[0]
        starts, ends = ins[1], ins[2]
        axes = ins[3] if len(ins) > 3 else range(len(starts))
        steps = ins[4] if len(ins) > 4 else [1] * len(starts)
        sl = [slice(None)] * x.ndim
        for s, e, a, st in zip(starts, ends, axes, steps):
            n = x.shape[int(a)]
            s, e = int(s), int(e)
            s = max(0, min(n, s + n if s < 0 else s))
            e = max(0, min(n, e + n if e < 0 else e))
            sl[int(a)] = slice(s, e, int(st))
        return [x[tuple(sl)]]
    if op == "ReduceMean":
        return [np.mean(ins[0], axis=tuple(at["axes"]), keepdims=bool(at.get("keepdims", 1))).astype(ins[0].dtype)]
    if op == "Softmax":
        return [_softmax(ins[0], at.get("axis", -1)).astype(ins[0].dtype)]
    if op == "Dropout":
        ratio = float(ins[1]) if len(ins) > 1 and ins[1] is not None else 0.5
        training = bool(ins[2]) if len(ins) > 2 and ins[2] is not None else False
        if training and ratio != 0.0:
            raise NotImplementedError("Dropout with a non-zero ratio in training mode")
        return [ins[0], np.ones(ins[0].shape, dtype=bool)]
    if op == "LayerNormalization":
        x, w = ins[0], ins[1]
        b = ins[2] if len(ins) > 2 else None
        axis = at.get("axis", -1) % x.ndim
        axes = tuple(range(axis, x.ndim))
        mean = x.mean(axis=axes, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
        inv = 1.0 / np.sqrt(var + np.float32(at.get("epsilon", 1e-5)))
        y = (x - mean) * inv * w + (b if b is not None else 0)
        return [y.astype(x.dtype), mean, inv]
    if op == "SoftmaxCrossEntropyLoss":
        logits, labels = ins[0], ins[1]
        if logits.ndim != 2 or at.get("reduction", b"mean") not in (b"mean", "mean"):
            raise NotImplementedError("SoftmaxCrossEntropyLoss: only [N, C] logits, mean reduction")
        m = logits.max(axis=1, keepdims=True)
        logp = logits - m - np.log(np.exp(logits - m).sum(axis=1, keepdims=True))
        keep = labels != at.get("ignore_index", -100)
        picked = -logp[np.arange(len(labels))[keep], labels[keep]]
        return [np.array(picked.sum() / max(1, keep.sum()), dtype=logits.dtype), logp]
    raise NotImplementedError(f"op {op}")


def evaluate(model, feeds):
    env = dict(feeds)
    for t in model.graph.initializer:
        env[t.name] = numpy_helper.to_array(t)
    for node in model.graph.node:
        ins = [env[i] if i else None for i in node.input]
        outs = run_node(node.op_type, ins, _attrs(node))
        for name, v in zip(node.output, outs):
            if name:
                env[name] = v
    return [env[o.name] for o in model.graph.output]


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--batch", type=int, required=True)
    ap.add_argument("--seq", type=int, required=True)
    ap.add_argument("--step", type=int, default=0, help="batch of this step (from 0)")
    ap.add_argument("--rtol", type=float, default=1e-5)
    a = ap.parse_args(argv)

    import torch
    import oracle
    torch.set_num_threads(1)
    batches = oracle.Batches(oracle.load_tokens(a.data), a.batch, a.seq)
    idx, tgt = batches.get(a.step)
    m = onnx.load(a.onnx)
    (loss,) = evaluate(m, {"idx": idx.numpy(), "targets": tgt.numpy()})
    loss = float(loss)

    import json
    from models import ModelConfig, build_model
    with open(a.onnx + ".json") as f:
        cfg = ModelConfig.from_dict(json.load(f))
    module = build_model(cfg)
    oracle.load_initializers(module, a.onnx)
    module.train()
    with torch.no_grad():
        ref = float(module(idx, tgt))
    err = abs(loss - ref) / abs(ref)
    print(f"onnx_eval: numpy loss {loss:.8g}  torch loss {ref:.8g}  rel {err:.2e}")
    if not err <= a.rtol:
        print(f"onnx_eval.py: FAIL: rel err {err:.2e} > {a.rtol:g}")
        sys.exit(1)


if __name__ == "__main__":
    main()
