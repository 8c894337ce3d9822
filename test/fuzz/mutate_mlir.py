#!/usr/bin/python3
"""Runs fuyou-opt's passes on mutated copies of the lit tests' IR.

Each case is a lit file under test/Passes or test/Dialect and the flags of
one of its `fuyou-opt %s ...` RUN lines. A mutation changes numbers (shapes,
offsets, attributes) or symbol names (@param, @group) in the file's IR; every
run must exit 0 or 1 (a diagnostic), never with a signal or a hang. This is
what compiler engineers feed the passes by hand.

  test/fuzz/mutate_mlir.py --opt build/bin/fuyou-opt --runs 2000 --seed 5 --work /tmp/fm
"""
import argparse
import glob
import hashlib
import os
import random
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
NUMBER = re.compile(r"(?<![A-Za-z_%@#])\d+")
SYMBOL = re.compile(r"@[A-Za-z0-9_.]+")


def cases():
    out = []
    for f in sorted(glob.glob(os.path.join(HERE, "..", "Passes", "*.mlir")) +
                    glob.glob(os.path.join(HERE, "..", "Dialect", "**", "*.mlir"), recursive=True)):
        text = open(f).read()
        # The IR without comments (CHECK lines), keeping the split markers.
        ir = "\n".join(l for l in text.splitlines() if not l.startswith("//") or l.startswith("// -----"))
        for line in text.splitlines():
            m = re.match(r"// RUN: fuyou-opt %s ([^|]*)", line)
            if m:
                # As lit's shell would: quoted options stay one word, %S is the file's directory.
                words = shlex.split(m.group(1).replace("%S", os.path.dirname(os.path.abspath(f))))
                flags = [w for w in words if w != "-verify-diagnostics"]
                out.append((os.path.basename(f), ir, flags))
    return out


def mutate(rng, ir):
    kind = rng.choice(["number", "symbol"])
    pattern = NUMBER if kind == "number" else SYMBOL
    for _ in range(rng.choice([1, 1, 2])):
        hits = list(pattern.finditer(ir))
        if not hits:
            break
        h = rng.choice(hits)
        if kind == "number":
            new = str(rng.choice([0, 1, 2, 3, 7, 64, 1000]))
        else:
            new = rng.choice([x.group(0) for x in hits] + ["@nowhere"])
        ir = ir[:h.start()] + new + ir[h.end():]
    return ir


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--opt", required=True, help="fuyou-opt")
    p.add_argument("--runs", type=int, default=500)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=int, default=60)
    p.add_argument("--work", required=True)
    a = p.parse_args()

    os.makedirs(os.path.join(a.work, "failures"), exist_ok=True)
    rng = random.Random(a.seed)
    all_cases = cases()
    cur = os.path.join(a.work, "cur.mlir")
    bad = 0
    for i in range(a.runs):
        name, ir, flags = rng.choice(all_cases)
        m = mutate(rng, ir)
        with open(cur, "w") as f:
            f.write(m)
        try:
            r = subprocess.run([a.opt, cur] + flags, capture_output=True, timeout=a.timeout)
            why = None if r.returncode in (0, 1) else f"exit {r.returncode}"
        except subprocess.TimeoutExpired:
            why = f"no answer in {a.timeout} s"
        if why:
            bad += 1
            keep = os.path.join(a.work, "failures", hashlib.md5(m.encode()).hexdigest()[:10] + ".mlir")
            with open(keep, "w") as f:
                f.write(f"// from {name}: fuyou-opt {' '.join(flags)}\n" + m)
            print(f"run {i} ({name} {' '.join(flags)}): {why}\n  IR kept as {keep}", flush=True)
    print(f"{a.runs} mutated files, {bad} bad answers")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
