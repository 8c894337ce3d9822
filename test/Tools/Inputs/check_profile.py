"""Checks a fuyou-calibrate profile (runtime/tools/profile.h): the keys in
order, one per line, every figure a positive number printed as %.6g.

usage: check_profile.py FILE|- [--ssd] [--target cpu|cuda]
"""
import argparse
import json
import math
import re
import sys

KEYS = ["format", "target", "device", "matmul_precision", "matmul_flops_per_s", "matmul_n", "matmul_n64_flops_per_s",
        "matmul_n256_flops_per_s", "matmul_n1024_flops_per_s", "matmul_n2048_flops_per_s", "device_mem_bytes_per_s",
        "transcendental_elems_per_s", "softmax_elems_per_s", "norm_elems_per_s", "norm_grad_elems_per_s",
        "attention_flops_per_s", "launch_s",
        "h2d_bytes_per_s", "d2h_bytes_per_s", "ssd_read_bytes_per_s", "ssd_write_bytes_per_s",
        "adamw_params_per_s", "adamw_alone_params_per_s"]
SSD_KEYS = {"ssd_read_bytes_per_s", "ssd_write_bytes_per_s"}
DEVICE_KEYS = {"adamw_alone_params_per_s"}  # on a GPU, AdamW is measured beside copies and alone
CPU_KEYS = {"attention_flops_per_s"}  # the kernels the CPU target alone has


def check(text, ssd, target):
    lines = text.splitlines()
    if lines[0] != "{" or lines[-1] != "}":
        return "not one object with its braces on their own lines"
    pairs = json.loads(text, object_pairs_hook=list)
    n = dict(pairs).get("matmul_n", 0)
    # The 1024 and 2048 cubes are measured only below the large one.
    want = [k for k in KEYS if (ssd or k not in SSD_KEYS) and (target == "cuda" or k not in DEVICE_KEYS)
            and (target == "cpu" or k not in CPU_KEYS)
            and (k != "matmul_n1024_flops_per_s" or n > 1024) and (k != "matmul_n2048_flops_per_s" or n > 2048)]
    if [k for k, _ in pairs] != want:
        return "keys %s, expected %s" % ([k for k, _ in pairs], want)
    if len(lines) != len(want) + 2:
        return "not one key per line"
    values = dict(pairs)
    if values["format"] != "fuyou-profile-1":
        return "format %r" % values["format"]
    if values["target"] != target:
        return "target %r, expected %r" % (values["target"], target)
    if not values["device"]:
        return "empty device"
    if values["matmul_precision"] != ("bf16" if target == "cuda" else "fp32"):
        return "matmul_precision %r on %s" % (values["matmul_precision"], target)
    for line, (key, value) in zip(lines[5:-1], pairs[4:]):
        text = re.sub(r",$", "", line.split(": ", 1)[1])
        if not isinstance(value, float) and not isinstance(value, int) or not math.isfinite(value) or value <= 0:
            return "%s is %r, not a positive number" % (key, value)
        if text != "%.6g" % value:
            return "%s printed as %r, not %%.6g" % (key, text)
    return None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("file")
    ap.add_argument("--ssd", action="store_true")
    ap.add_argument("--target", default="cpu")
    a = ap.parse_args()
    text = sys.stdin.read() if a.file == "-" else open(a.file).read()
    error = check(text, a.ssd, a.target)
    if error:
        sys.exit("check_profile: %s: %s" % (a.file, error))
    print("profile ok: %d figures" % (len(json.loads(text)) - 3))


main()
