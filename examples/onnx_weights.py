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
    if os.path.abspath(a.out) == os.path.abspath(a.onnx):
        die("--out would overwrite --onnx")

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

    # Written beside --out under a temporary name, then renamed: a failure
    # leaves no file that looks like a trained model.
    tmp = a.out + ".tmp"
    big = sum(t.ByteSize() for t in model.graph.initializer) > (1 << 31) - (1 << 26)
    try:
        if external or big:
            data = os.path.basename(a.out) + ".data"
            if os.path.exists(os.path.join(os.path.dirname(os.path.abspath(a.out)), data)):
                os.remove(os.path.join(os.path.dirname(os.path.abspath(a.out)), data))
            onnx.save_model(model, tmp, save_as_external_data=True, all_tensors_to_one_file=True, location=data,
                            size_threshold=1024)
        else:
            onnx.save_model(model, tmp)
        onnx.checker.check_model(tmp)
        os.replace(tmp, a.out)
    except Exception as e:
        if os.path.exists(tmp):
            os.remove(tmp)
        die(f"writing {a.out}: {e}")
    print(f"onnx_weights.py: wrote {a.out}: {len(weights)} of {len(by_name)} initializers replaced"
          + (f", tensors in {os.path.basename(a.out)}.data" if external or big else ""))


if __name__ == "__main__":
    main()
