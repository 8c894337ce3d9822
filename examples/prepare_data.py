#!/usr/bin/python3
"""Write a byte-level token file from a corpus every Debian machine has: the Python standard
library's .py sources.

    /usr/bin/python3 examples/prepare_data.py --out tokens.bin [--max-bytes N] [--llmc]
        [--val-out val.bin [--val-fraction 0.1]]

The .py files under --src (default /usr/lib/python3.11, skipping dist-/site-packages) are read in sorted path order and concatenated;
each byte becomes one little-endian uint16 token (vocab 256). The default format is nanoGPT's raw
.bin; --llmc writes llm.c's format: a 256 x int32 header (magic 20240520, version 1, ntokens,
rest 0) followed by the uint16 tokens. With --val-out, the last --val-fraction of the tokens go
to that file instead (held out for the training program's --val-data), in the same format.
"""
import argparse
import os
import sys

import numpy as np

LLMC_MAGIC = 20240520
LLMC_VERSION = 1
LLMC_HEADER_INTS = 256


def collect_bytes(src, max_bytes):
    paths = []
    for root, dirs, files in os.walk(src):
        # Third-party packages differ between machines; keep the corpus to the standard library.
        dirs[:] = sorted(d for d in dirs if d not in ("dist-packages", "site-packages"))
        for f in files:
            if f.endswith(".py"):
                paths.append(os.path.join(root, f))
    paths.sort()
    chunks, total, used = [], 0, 0
    for p in paths:
        if max_bytes is not None and total >= max_bytes:
            break
        try:
            with open(p, "rb") as fh:
                data = fh.read()
        except OSError:
            continue
        if max_bytes is not None:
            data = data[: max_bytes - total]
        chunks.append(data)
        total += len(data)
        used += 1
    return b"".join(chunks), used


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True)
    p.add_argument("--src", default="/usr/lib/python3.11")
    p.add_argument("--max-bytes", type=int, default=None, help="stop after N bytes (= N tokens)")
    p.add_argument("--llmc", action="store_true", help="write llm.c format (with header)")
    p.add_argument("--val-out", default=None, help="held-out tokens: the corpus's last --val-fraction")
    p.add_argument("--val-fraction", type=float, default=0.1)
    a = p.parse_args(argv)
    if not 0 < a.val_fraction < 1:
        sys.exit(f"prepare_data.py: error: --val-fraction must be in (0, 1), got {a.val_fraction}")
    if not os.path.isdir(a.src):
        sys.exit(f"prepare_data.py: error: {a.src}: not a directory")
    data, nfiles = collect_bytes(a.src, a.max_bytes)
    if len(data) < 2:
        sys.exit(f"prepare_data.py: error: {a.src}: fewer than 2 bytes of .py sources")
    tokens = np.frombuffer(data, dtype=np.uint8).astype("<u2")
    parts = [(a.out, tokens)]
    if a.val_out:
        cut = len(tokens) - int(len(tokens) * a.val_fraction)
        if cut < 2 or len(tokens) - cut < 2:
            sys.exit(f"prepare_data.py: error: {len(tokens)} tokens are too few to hold out {a.val_fraction}")
        parts = [(a.out, tokens[:cut]), (a.val_out, tokens[cut:])]
    for path, part in parts:
        tmp = path + ".tmp"
        with open(tmp, "wb") as f:
            if a.llmc:
                header = np.zeros(LLMC_HEADER_INTS, dtype="<i4")
                header[0], header[1], header[2] = LLMC_MAGIC, LLMC_VERSION, len(part)
                f.write(header.tobytes())
            f.write(part.tobytes())
        os.replace(tmp, path)
        print(f"wrote {path}: {len(part)} tokens from {nfiles} files under {a.src}"
              f" ({'llm.c' if a.llmc else 'nanoGPT .bin'} format)")


if __name__ == "__main__":
    main()
