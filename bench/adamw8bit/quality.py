#!/usr/bin/python3
"""8-bit AdamW against fp32 AdamW on the example GPT (issue 6), in one run:

    /usr/bin/python3 bench/adamw8bit/quality.py [--build build] [--steps 2000] [--work DIR] [--lr 3e-3]
        [--png bench/adamw8bit/loss.png] [--no-b64] [--seeds 1337,1,2]

Exports the example GPT of `make demo`, compiles it once, trains it with
--optimizer adamw and --optimizer adamw8bit (same seed, data and
hyper-parameters; 8-bit with blocks of 256 and of 64) with the state on SSD
(--ssd), and prints the final losses,
the store's bytes per parameter per step (its own counters) and the optimizer
time per step; plots both loss curves to bench/adamw8bit/loss.png.
With --seeds, repeats all of it per initialisation seed (one export and
compile each) and adds the mean and sample std of the per-seed differences,
since one run's spread exceeds the 1% criterion.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
import time
import zlib

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"quality.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr[-1500:]}")
    return r


# ---- a small PNG line plot (no plotting library on the development machines)
FONT = {  # 3x5 digits and a few letters, rows top to bottom
    "0": "111101101101111", "1": "010110010010111", "2": "111001111100111", "3": "111001111001111",
    "4": "101101111001001", "5": "111100111001111", "6": "111100111101111", "7": "111001001001001",
    "8": "111101111101111", "9": "111101111001111", ".": "000000000000010", " ": "000000000000000",
}


def plot_png(path, series, w=900, h=540):
    """series: [(label, [y...], (r, g, b))]; x is the step from 1. Axes with ticks and numbers."""
    img = [[(255, 255, 255)] * w for _ in range(h)]
    L, R, T, B = 70, w - 20, 20, h - 50
    ys = [y for _, s, _ in series for y in s]
    lo, hi = min(ys), max(ys)
    n = max(len(s) for _, s, _ in series)

    def px(x, y, c):
        if 0 <= x < w and 0 <= y < h:
            img[y][x] = c

    def text(x, y, s, c=(0, 0, 0)):
        for ch in s:
            g = FONT.get(ch, FONT[" "])
            for r in range(5):
                for col in range(3):
                    if g[r * 3 + col] == "1":
                        for dy in range(2):
                            for dx in range(2):
                                px(x + col * 2 + dx, y + r * 2 + dy, c)
            x += 8

    def line(x0, y0, x1, y1, c):
        steps = max(abs(x1 - x0), abs(y1 - y0), 1)
        for i in range(steps + 1):
            px(round(x0 + (x1 - x0) * i / steps), round(y0 + (y1 - y0) * i / steps), c)

    X = lambda i: L + (R - L) * i / max(n - 1, 1)
    Y = lambda y: B - (B - T) * (y - lo) / (hi - lo if hi > lo else 1)
    line(L, B, R, B, (0, 0, 0))
    line(L, T, L, B, (0, 0, 0))
    for k in range(6):
        yv = lo + (hi - lo) * k / 5
        line(L - 5, round(Y(yv)), L, round(Y(yv)), (0, 0, 0))
        text(8, round(Y(yv)) - 5, f"{yv:.2f}")
        xv = round((n - 1) * k / 5)
        line(round(X(xv)), B, round(X(xv)), B + 5, (0, 0, 0))
        text(round(X(xv)) - 12, B + 12, str(xv + 1))
    for label, s, c in series:
        for i in range(1, len(s)):
            line(round(X(i - 1)), round(Y(s[i - 1])), round(X(i)), round(Y(s[i])), c)
    for k, (label, _, c) in enumerate(series):  # legend: a swatch per series (its colour), top right
        for dy in range(6):
            line(R - 60, T + 10 + 16 * k + dy, R - 20, T + 10 + 16 * k + dy, c)
    raw = b"".join(b"\x00" + bytes(v for p in row for v in p) for row in img)
    chunk = lambda t, d: struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)
    with open(path, "wb") as f:
        f.write(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
                + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))


def smooth(xs, k=50):
    out, acc = [], 0.0
    for i, x in enumerate(xs):
        acc += x
        if i >= k:
            acc -= xs[i - k]
        out.append(acc / min(i + 1, k))
    return out


def tail(r):
    return sum(r["losses"][-100:]) / 100


def train_seed(a, w, export_seed, train_seed, runs):
    """Exports and compiles the model initialised with export_seed, then trains it once per optimizer."""
    tag = f"s{export_seed}"
    onnx_path = w(f"gpt2_{tag}.onnx")
    sh([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", onnx_path, "--batch", "8",
        "--seq", "64", "--n-layer", "4", "--d-model", "128", "--n-head", "4", "--block-size", "64",
        "--seed", str(export_seed)])
    prog = w(f"train_{tag}")
    sh([os.path.join(a.build, "bin/fuyou-compile"), onnx_path, "-o", prog])
    res = {}
    for opt, flags in runs.items():
        ssd = w(f"ssd_{opt}_{tag}")
        os.makedirs(ssd, exist_ok=True)
        log = w(f"{opt}_{tag}.jsonl")
        t0 = time.time()
        r = sh([prog, "--data", w("stdlib.bin"), "--steps", str(a.steps), "--lr", a.lr, "--seed", str(train_seed),
                "--log-json", log, "--log-every", "500", "--ssd", ssd] + flags + a.train_flag)
        losses = [json.loads(l)["loss"] for l in open(log)]
        store = re.search(r"\(([0-9.]+) B/param/step\)", r.stderr)
        per = re.search(r"optimizer ([0-9.]+) ms", r.stderr)
        q8 = re.search(r"adamw8bit: .*", r.stderr)
        res[opt] = dict(losses=losses, bpp=float(store.group(1)), opt_ms=float(per.group(1)),
                        q8=q8.group(0) if q8 else "")
        print(f"seed {export_seed} {opt}: {time.time() - t0:.0f} s, final loss {tail(res[opt]):.4f}",
              file=sys.stderr, flush=True)
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--work", default="/tmp/fy_adamw8bit_quality")
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--png", default=os.path.join(HERE, "loss.png"))
    ap.add_argument("--no-b64", action="store_true", help="skip the block-64 run")
    ap.add_argument("--train-flag", action="append", default=[],
                    help="an extra flag for every training run, e.g. --train-flag=--clip-norm=1")
    ap.add_argument("--seeds", default=None,
                    help="comma-separated initialisation seeds (export.py --seed, also the training --seed); "
                         "default: one run with export seed 1337 and training seed 1, as before")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)
    if not os.path.exists(w("stdlib.bin")):
        sh([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("stdlib.bin")])
    # (export seed, training seed) pairs; the default reproduces the earlier single run.
    seeds = [(int(x), int(x)) for x in a.seeds.split(",")] if a.seeds else [(1337, 1)]
    runs = {"adamw": ["--optimizer", "adamw"], "adamw8bit": ["--optimizer", "adamw8bit"],
            "adamw8bit-b64": ["--optimizer", "adamw8bit", "--adamw8bit-block", "64"]}
    if a.no_b64:
        del runs["adamw8bit-b64"]
    t0 = time.time()
    all_res = [(es, train_seed(a, w, es, ts, runs)) for es, ts in seeds]
    wall = time.time() - t0

    # Curves: first seed in full colour, further seeds in lighter shades of the same colour.
    colours = {"adamw": (200, 30, 30), "adamw8bit": (30, 60, 200), "adamw8bit-b64": (30, 160, 60)}
    lighten = lambda c, k: tuple(round(v + (255 - v) * min(0.3 * k, 0.7)) for v in c)
    plot_png(a.png, [(f"{k} {es}", smooth(r["losses"]), lighten(colours[k], i))
                     for i, (es, res) in enumerate(all_res) for k, r in res.items()])

    print(f"steps {a.steps}, lr {a.lr}, seeds {','.join(str(es) for es, _ in seeds)}; "
          f"{all_res[0][1]['adamw8bit']['q8']}; wall {wall / 60:.1f} min")
    for k in [k for k in runs if k != "adamw"]:
        diffs = []
        for es, res in all_res:
            f32, f8 = res["adamw"], res[k]
            d = 100 * (tail(f8) - tail(f32)) / tail(f32)
            diffs.append(d)
            print(f"seed {es} {k}: final loss (mean of the last 100 steps) {tail(f8):.4f} vs adamw {tail(f32):.4f}: "
                  f"{d:+.2f}% (goal within 1%); last step {f8['losses'][-1]:.4f} vs {f32['losses'][-1]:.4f}; "
                  f"store {f8['bpp']:.2f} vs {f32['bpp']:.2f} B/param/step ({f8['bpp'] / f32['bpp']:.3f}x, "
                  f"goal <= 0.55x); optimizer {f8['opt_ms']:.2f} vs {f32['opt_ms']:.2f} ms/step")
        if len(diffs) > 1:
            n = len(diffs)
            mean = sum(diffs) / n
            sd = (sum((d - mean) ** 2 for d in diffs) / (n - 1)) ** 0.5
            m32 = sum(tail(res["adamw"]) for _, res in all_res) / n
            m8 = sum(tail(res[k]) for _, res in all_res) / n
            print(f"{k} over {n} seeds: per-seed difference mean {mean:+.2f}%, sample std {sd:.2f}%, "
                  f"standard error {sd / n ** 0.5:.2f}%; mean final loss {m8:.4f} vs adamw {m32:.4f}: "
                  f"{100 * (m8 - m32) / m32:+.2f}%")
    print(f"plot: {a.png} (50-step moving average; red adamw, blue adamw8bit, green adamw8bit block 64; "
          f"lighter shades for later seeds)")


if __name__ == "__main__":
    main()
