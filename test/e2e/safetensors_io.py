"""Minimal safetensors reader/writer (numpy only), shared by oracle.py and compare.py.

Format: 8-byte little-endian header length N, N bytes of JSON
{name: {"dtype": "F32", "shape": [...], "data_offsets": [begin, end]}, "__metadata__": {...}},
then the raw little-endian tensor bytes. The header is space-padded to a multiple of 8.
"""
import json
import os
import struct

import numpy as np

_DTYPES = {
    "F64": np.dtype("<f8"), "F32": np.dtype("<f4"), "F16": np.dtype("<f2"),
    "I64": np.dtype("<i8"), "I32": np.dtype("<i4"), "I16": np.dtype("<i2"), "I8": np.dtype("i1"),
    "U8": np.dtype("u1"), "U16": np.dtype("<u2"), "BOOL": np.dtype("?"),
}
_NAMES = {v: k for k, v in _DTYPES.items()}


def save(path, tensors, metadata=None):
    """tensors: dict name -> numpy array. Written in sorted name order."""
    header, blobs, offset = {}, [], 0
    for name in sorted(tensors):
        a = np.ascontiguousarray(tensors[name])
        dt = a.dtype.newbyteorder("<") if a.dtype.itemsize > 1 else a.dtype
        a = a.astype(dt, copy=False)
        key = _NAMES.get(dt)
        if key is None:
            raise ValueError(f"{name}: unsupported dtype {a.dtype}")
        data = a.tobytes()
        header[name] = {"dtype": key, "shape": list(a.shape), "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    hj = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hj += b" " * ((8 - len(hj) % 8) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hj)))
        f.write(hj)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)


def load(path):
    """Returns (dict name -> numpy array, metadata dict). BF16 is widened to float32."""
    with open(path, "rb") as f:
        raw = f.read()
    if len(raw) < 8:
        raise ValueError(f"{path}: too short for a safetensors file")
    (n,) = struct.unpack("<Q", raw[:8])
    if 8 + n > len(raw):
        raise ValueError(f"{path}: header length {n} runs past the end of the file")
    header = json.loads(raw[8:8 + n].decode("utf-8"))
    base = 8 + n
    meta = header.pop("__metadata__", {}) or {}
    out = {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        if base + e > len(raw) or b > e:
            raise ValueError(f"{path}: tensor {name}: data offsets {b}..{e} out of range")
        buf = raw[base + b: base + e]
        shape = tuple(info["shape"])
        if info["dtype"] == "BF16":
            u = np.frombuffer(buf, dtype="<u2").astype(np.uint32) << 16
            a = u.view(np.float32)
        elif info["dtype"] in _DTYPES:
            a = np.frombuffer(buf, dtype=_DTYPES[info["dtype"]])
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {info['dtype']}")
        out[name] = a.reshape(shape)
    return out, meta
