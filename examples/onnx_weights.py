#!/usr/bin/python3
"""Writes a trained model back into its ONNX file.

    /usr/bin/python3 examples/onnx_weights.py --onnx MODEL.onnx --weights CKPT/model.safetensors --out TRAINED.onnx

The training program's --save DIR writes DIR/model.safetensors: every parameter under its ONNX
initializer name (for a torch export, its state_dict name). This copies MODEL.onnx with those
initializers replaced, for ONNX Runtime or any other consumer of the original graph; a model over
2 GiB, or one whose tensors were external data, is written with its tensors in TRAINED.onnx.data.
Every tensor of the file must match an initializer of the same shape and type, or nothing is
written. (In torch: load the same file's tensors into the module with load_state_dict.)
"""
import argparse
import os
import shutil
import sys

import onnx
from onnx import numpy_helper

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import safetensors_io  # noqa: E402


def die(msg):
    sys.exit(f"onnx_weights.py: error: {msg}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--onnx", required=True, help="the model the program was compiled from")
    ap.add_argument("--weights", required=True, help="a checkpoint's model.safetensors")
    ap.add_argument("--out", required=True, help="the trained model to write")
    a = ap.parse_args()
    out_data = a.out + ".data"  # where its tensors go when they are external data
    for path, what in ((a.out, "--out"), (out_data, "--out's data file")):
        for other, flag in ((a.onnx, "--onnx"), (a.weights, "--weights")):
            if os.path.abspath(path) == os.path.abspath(other) or (
                    os.path.exists(path) and os.path.exists(other) and os.path.samefile(path, other)):
                die(f"{what} {path} would overwrite {flag}")

    try:
        weights, _ = safetensors_io.load(a.weights)
    except (OSError, ValueError, KeyError) as e:
        die(f"{a.weights}: {e}")
    try:
        # Whether its tensors are external data is seen before they are loaded.
        model = onnx.load(a.onnx, load_external_data=False)
        external = any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer)
        if external:
            from onnx.external_data_helper import load_external_data_for_model
            load_external_data_for_model(model, os.path.dirname(os.path.abspath(a.onnx)))
    except Exception as e:  # onnx raises several kinds
        die(f"{a.onnx}: {e}")
    by_name = {t.name: t for t in model.graph.initializer}
    for name, arr in weights.items():
        t = by_name.get(name)
        if t is None:
            die(f"{a.weights}: tensor '{name}' is no initializer of {a.onnx} (another model?)")
        old = numpy_helper.to_array(t)
        if old.shape != arr.shape or old.dtype != arr.dtype:
            die(f"{a.weights}: tensor '{name}' is {arr.dtype} {list(arr.shape)}, the model's initializer "
                f"{old.dtype} {list(old.shape)}")
        t.CopyFrom(numpy_helper.from_array(arr, name))

    # Written into a temporary directory beside --out, then renamed into
    # place (its data file first): a failure leaves the earlier --out and its
    # data as they were, and no file that looks like a trained model.
    big = sum(t.ByteSize() for t in model.graph.initializer) > (1 << 31) - (1 << 26)
    base = os.path.basename(a.out)
    tmpdir = os.path.join(os.path.dirname(os.path.abspath(a.out)), f".{base}.tmp{os.getpid()}")
    try:
        os.mkdir(tmpdir)
        tmp = os.path.join(tmpdir, base)
        if external or big:
            onnx.save_model(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True,
                            location=base + ".data", size_threshold=1024)
        else:
            onnx.save_model(model, tmp)
        onnx.checker.check_model(tmp)
        if external or big:
            os.replace(tmp + ".data", out_data)
        os.replace(tmp, a.out)
    except Exception as e:
        die(f"writing {a.out}: {e}")
    finally:
        shutil.rmtree(tmpdir, ignore_errors=True)
    print(f"onnx_weights.py: wrote {a.out}: {len(weights)} of {len(by_name)} initializers replaced"
          + (f", tensors in {os.path.basename(a.out)}.data" if external or big else ""))


if __name__ == "__main__":
    main()
