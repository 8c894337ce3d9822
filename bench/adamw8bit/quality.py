#!/usr/bin/python3
"""8-bit AdamW against fp32 AdamW on the example GPT (issue 6), in one run:

    /usr/bin/python3 bench/adamw8bit/quality.py [--build build] [--steps 2000] [--work DIR] [--lr 3e-3]
        [--png bench/adamw8bit/loss.png] [--no-b64]

Exports the example GPT of `make demo`, compiles it once, trains it with
--optimizer adamw and --optimizer adamw8bit (same seed, data and
hyper-parameters; 8-bit with blocks of 256 and of 64) with the state on SSD
(--ssd), and prints the final losses,
the store's bytes per parameter per step (its own counters) and the optimizer
time per step; plots both loss curves to bench/adamw8bit/loss.png.
"""
import argparse
import json
import os
import re
import struct
import subprocess
import sys
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


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--work", default="/tmp/fy_adamw8bit_quality")
    ap.add_argument("--lr", default="3e-3")
    ap.add_argument("--png", default=os.path.join(HERE, "loss.png"))
    ap.add_argument("--no-b64", action="store_true", help="skip the block-64 run")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)
    if not os.path.exists(w("stdlib.bin")):
        sh([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("stdlib.bin")])
    sh([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", w("gpt2.onnx"), "--batch", "8",
        "--seq", "64", "--n-layer", "4", "--d-model", "128", "--n-head", "4", "--block-size", "64"])
    sh([os.path.join(a.build, "bin/fuyou-compile"), w("gpt2.onnx"), "-o", w("train")])
    res = {}
    runs = {"adamw": ["--optimizer", "adamw"], "adamw8bit": ["--optimizer", "adamw8bit"],
            "adamw8bit-b64": ["--optimizer", "adamw8bit", "--adamw8bit-block", "64"]}
    if a.no_b64:
        del runs["adamw8bit-b64"]
    for opt, flags in runs.items():
        ssd = w("ssd_" + opt)
        os.makedirs(ssd, exist_ok=True)
        r = sh([w("train"), "--data", w("stdlib.bin"), "--steps", str(a.steps), "--lr", a.lr, "--seed", "1",
                "--log-json", w(opt + ".jsonl"), "--log-every", "500", "--ssd", ssd] + flags)
        losses = [json.loads(l)["loss"] for l in open(w(opt + ".jsonl"))]
        store = re.search(r"\(([0-9.]+) B/param/step\)", r.stderr)
        per = re.search(r"optimizer ([0-9.]+) ms", r.stderr)
        q8 = re.search(r"adamw8bit: .*", r.stderr)
        res[opt] = dict(losses=losses, bpp=float(store.group(1)), opt_ms=float(per.group(1)),
                        q8=q8.group(0) if q8 else "")
    f32 = res["adamw"]
    tail = lambda r: sum(r["losses"][-100:]) / 100
    png = a.png
    colours = {"adamw": (200, 30, 30), "adamw8bit": (30, 60, 200), "adamw8bit-b64": (30, 160, 60)}
    plot_png(png, [(k, smooth(r["losses"]), colours[k]) for k, r in res.items()])
    print(f"steps {a.steps}, lr {a.lr}; {res['adamw8bit']['q8']}")
    for k in [k for k in res if k != "adamw"]:
        f8 = res[k]
        print(f"{k}: final loss (mean of the last 100 steps) {tail(f8):.4f} vs adamw {tail(f32):.4f}: "
              f"{100 * (tail(f8) - tail(f32)) / tail(f32):+.2f}% (goal within 1%); last step {f8['losses'][-1]:.4f} "
              f"vs {f32['losses'][-1]:.4f}; store {f8['bpp']:.2f} vs {f32['bpp']:.2f} B/param/step "
              f"({f8['bpp'] / f32['bpp']:.3f}x, goal <= 0.55x); optimizer {f8['opt_ms']:.2f} vs {f32['opt_ms']:.2f} ms/step")
    print(f"plot: {png} (50-step moving average; red adamw, blue adamw8bit, green adamw8bit block 64)")


if __name__ == "__main__":
    main()
