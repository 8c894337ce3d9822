#!/usr/bin/python3
"""Out of core (issue 3): a model whose AdamW state is at least 8x --cpu-mem
trains with AdamW's moments on SSD, checkpointing as it goes, with peak RSS
<= --cpu-mem + 150 MiB (/usr/bin/time -v), and its losses and weights are
bit-identical to the all-resident run of the same binary.

On the CPU target the fp32 working weights are the master weights and live
in the arena that stands for device memory; the state out of core is AdamW's
m and v (8 bytes per parameter).
"""
import argparse
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
MiB = 1 << 20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--cpu-mem-mib", type=float, default=11.5)
    ap.add_argument("--steps", type=int, default=3)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)

    subprocess.run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("tokens.bin"),
                    "--max-bytes", "100000"], check=True, stdout=subprocess.DEVNULL)
    # 12.5M parameters: 100 MB of AdamW moments.
    subprocess.run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", w("m.onnx"),
                    "--batch", "1", "--seq", "16", "--n-layer", "7", "--d-model", "384", "--n-head", "6",
                    "--block-size", "16"], check=True, stdout=subprocess.DEVNULL)
    r = subprocess.run([a.compiler, w("m.onnx"), "-o", w("train"), "--max-group-bytes", "2500000"],
                       check=True, stderr=subprocess.PIPE, text=True)
    params = int(re.search(r"(\d+) trainable parameters", r.stderr).group(1))
    state = 8 * params
    cpu_mem = int(a.cpu_mem_mib * MiB)
    if state < 8 * cpu_mem:
        sys.exit(f"out_of_core: FAIL: state {state / MiB:.1f} MiB is not 8x --cpu-mem {a.cpu_mem_mib} MiB")

    os.makedirs(w("ssd"), exist_ok=True)
    common = [w("train"), "--data", w("tokens.bin"), "--steps", str(a.steps), "--log-every", "1000"]
    t = subprocess.run(["/usr/bin/time", "-v"] + common +
                       ["--ssd", w("ssd"), "--cpu-mem", f"{a.cpu_mem_mib}M", "--log-json", w("ooc.jsonl"),
                        "--save", w("ckpt_ooc"), "--save-every", "2"],
                       stderr=subprocess.PIPE, text=True)
    if t.returncode != 0:
        sys.exit(f"out_of_core: FAIL: the out-of-core run exited {t.returncode}: {t.stderr[-2000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", t.stderr).group(1)) * 1024
    print("\n".join(l for l in t.stderr.splitlines() if l.startswith("train:")))
    subprocess.run(common + ["--log-json", w("resident.jsonl"), "--save", w("ckpt_res")], check=True,
                   stderr=subprocess.DEVNULL)
    weights = lambda d: open(os.path.join(d, "model.safetensors"), "rb").read()
    if weights(w("ckpt_ooc")) != weights(w("ckpt_res")):
        sys.exit("out_of_core: FAIL: trained weights differ from the all-resident run")
    ooc = [l.split('"tokens_per_s"')[0] for l in open(w("ooc.jsonl"))]
    res = [l.split('"tokens_per_s"')[0] for l in open(w("resident.jsonl"))]
    if ooc != res:
        sys.exit(f"out_of_core: FAIL: losses differ from the all-resident run: {ooc} vs {res}")
    limit = cpu_mem + 150 * MiB
    print(f"out_of_core: {params} parameters, AdamW state {state / MiB:.1f} MiB = "
          f"{state / cpu_mem:.1f}x --cpu-mem {a.cpu_mem_mib} MiB; peak RSS {rss / MiB:.1f} MiB "
          f"(limit {limit / MiB:.1f} MiB), checkpoints included; losses and weights bit-identical "
          f"to the all-resident run")
    if rss > limit:
        sys.exit("out_of_core: FAIL: peak RSS over --cpu-mem + 150 MiB")
    print("out_of_core: PASS")


if __name__ == "__main__":
    main()
