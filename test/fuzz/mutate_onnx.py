#!/usr/bin/python3
"""Feeds fuyou-compile damaged and oddly wired models and checks each answer.

Every run must end in success (exit 0) or in one printable line
"fuyou-compile: error: ..." with exit status 1 that does not call itself a
compiler bug (after the import's summary line, if the import succeeded):
never a signal, an abort, a hang, or a multi-line message.

Two kinds of mutation of a seed model:
  bytes  flips, inserts and deletes bytes of the serialized ModelProto (the
         reader and the ONNX checker);
  graph  changes attributes, initializer shapes and dtypes, graph input dims,
         op types and the wiring between nodes (the importer, the constant
         folder and every pass after them).

Models that fail are kept under --work/failures. A fixed --seed gives the same
mutations every time, so a ctest run is a regression test; longer runs with
other seeds look for new failures:

  test/fuzz/mutate_onnx.py --compiler build/bin/fuyou-compile \\
      --model test/Target/Inputs/tiny.onnxtext --runs 5000 --seed 7 --work /tmp/fz
"""
import argparse
import hashlib
import os
import random
import subprocess
import sys

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

# Ops the mutator may swap a node's type to: ours and some we do not support.
OPS = ["Add", "Sub", "Mul", "Div", "MatMul", "Gemm", "Relu", "Gelu", "Tanh", "Sigmoid", "Softmax",
       "LayerNormalization", "Reshape", "Transpose", "Gather", "Concat", "Slice", "Split", "Where", "Cast",
       "Identity", "Dropout", "Sqrt", "Pow", "ReduceMean", "ReduceSum", "Unsqueeze", "Squeeze", "Expand",
       "Equal", "Neg", "Exp", "Erf", "Constant", "Shape", "Range", "Flatten", "ConstantOfShape", "Conv",
       # what torch 2.x's exporter writes for decoder LMs
       "CastLike", "Trilu", "Cos", "Sin", "And", "Or", "Not", "CumSum", "GatherND", "Max", "Min", "Pad",
       "SplitToSequence", "SequenceAt", "ConcatFromSequence", "IsNaN", "LessOrEqual", "Greater"]


def mutate_bytes(rng, data):
    b = bytearray(data)
    for _ in range(rng.choice([1, 1, 2, 4, 8])):
        at = rng.randrange(max(len(b), 1))
        k = rng.random()
        if k < 0.6 and b:
            b[at] = rng.randrange(256)
        elif k < 0.75 and b:
            b[at] ^= 1 << rng.randrange(8)
        elif k < 0.85:
            del b[at:at + rng.randrange(1, 16)]
        elif k < 0.95:
            b[at:at] = bytes(rng.randrange(256) for _ in range(rng.randrange(1, 8)))
        else:
            del b[at:]
    return bytes(b)


def mutate_graph(rng, base):
    m = onnx.ModelProto()
    m.CopyFrom(base)
    g = m.graph
    for _ in range(rng.choice([1, 1, 2, 3])):
        nodes = list(g.node)
        k = rng.randrange(7)
        if k == 0 and nodes:
            attrs = [a for a in rng.choice(nodes).attribute
                     if a.type in (onnx.AttributeProto.INT, onnx.AttributeProto.INTS, onnx.AttributeProto.FLOAT)]
            if attrs:
                a = rng.choice(attrs)
                if a.type == onnx.AttributeProto.INT:
                    a.i = rng.choice([-3, -2, -1, 0, 1, 2, 3, 7, 2**40])
                elif a.type == onnx.AttributeProto.FLOAT:
                    a.f = rng.choice([0.0, -1.0, 1e30, float("nan"), 2.0])
                elif a.ints:
                    a.ints[rng.randrange(len(a.ints))] = rng.choice([-2, -1, 0, 1, 2, 3, 5])
        elif k == 1 and g.initializer:
            t = rng.choice(list(g.initializer))
            arr = numpy_helper.to_array(t)
            if arr.size:
                shape = rng.choice([(arr.size,), (1, arr.size), arr.shape[::-1],
                                    (arr.size // 2,) if arr.size > 1 else (0,)])
                flat = arr.reshape(-1)[:int(np.prod(shape))]
                t.CopyFrom(numpy_helper.from_array(flat.reshape(shape), t.name))
        elif k == 2 and nodes:
            nd = rng.choice(nodes)
            if nd.input:
                names = [o for n in nodes for o in n.output] + [i.name for i in g.input] + \
                        [t.name for t in g.initializer]
                nd.input[rng.randrange(len(nd.input))] = rng.choice(names)
        elif k == 3 and nodes:
            rng.choice(nodes).op_type = rng.choice(OPS)
        elif k == 4 and g.input:
            dims = rng.choice(list(g.input)).type.tensor_type.shape.dim
            if dims:
                dims[rng.randrange(len(dims))].dim_value = rng.choice([0, 1, 2, 3, 5, 4096])
        elif k == 5 and nodes:
            nd = rng.choice(nodes)
            if nd.input and rng.random() < 0.5:
                del nd.input[rng.randrange(len(nd.input))]
            else:
                g.node.remove(nd)
        elif k == 6 and g.initializer:
            t = rng.choice(list(g.initializer))
            arr = numpy_helper.to_array(t)
            dt = rng.choice([np.int64, np.float64, np.int32, np.float16, np.bool_])
            t.CopyFrom(numpy_helper.from_array(arr.astype(dt), t.name))
    return m.SerializeToString()


def verdict(compiler, path, emit, timeout):
    """None when the answer is acceptable, else what was wrong with it."""
    try:
        r = subprocess.run([compiler, path, "--emit=" + emit], capture_output=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return f"no answer in {timeout} s"
    if r.returncode == 0:
        return None
    # The import's summary line may come first; then the error, alone on its line.
    lines = r.stderr.split(b"\n")
    err = lines[-2] if len(lines) >= 2 and lines[-1] == b"" else b""
    info = [l for l in lines[:-2] if not (l.startswith(b"fuyou-compile: ") and b"trainable parameters in" in l)]
    if (r.returncode == 1 and not info and err.startswith(b"fuyou-compile: error: ") and
            all(c >= 32 for c in err) and b"compiler bug" not in err):
        return None
    return f"exit {r.returncode}: " + err.decode(errors="replace").strip().replace("\n", " | ")[:300]


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--compiler", required=True)
    p.add_argument("--model", required=True, help="seed model (.onnx, or ONNX text .onnxtext)")
    p.add_argument("--runs", type=int, default=200, help="mutations of each kind")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--emit", default="plan", help="how far to compile (default plan: every pass, no C++ build)")
    p.add_argument("--timeout", type=int, default=120)
    p.add_argument("--work", required=True)
    a = p.parse_args()

    os.makedirs(os.path.join(a.work, "failures"), exist_ok=True)
    if a.model.endswith(".onnxtext"):
        with open(a.model) as f:
            base = onnx.parser.parse_model(f.read())
    else:
        base = onnx.load(a.model)
    data = base.SerializeToString()
    rng = random.Random(a.seed)
    cur = os.path.join(a.work, "cur.onnx")
    bad = 0
    for i in range(2 * a.runs):
        kind = "bytes" if i % 2 == 0 else "graph"
        m = mutate_bytes(rng, data) if kind == "bytes" else mutate_graph(rng, base)
        with open(cur, "wb") as f:
            f.write(m)
        why = verdict(a.compiler, cur, a.emit, a.timeout)
        if why:
            bad += 1
            keep = os.path.join(a.work, "failures", hashlib.md5(m).hexdigest()[:10] + ".onnx")
            with open(keep, "wb") as f:
                f.write(m)
            print(f"run {i} ({kind}): {why}\n  model kept as {keep}", flush=True)
    print(f"{2 * a.runs} mutated models, {bad} bad answers")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
