#!/usr/bin/python3
"""Checkpoint and resume: runs killed with SIGKILL at random moments and
resumed from their last checkpoint must reproduce the uninterrupted run's
losses exactly (issue 3: "10 runs killed at random moments"). Every run
logs to the same --log-json file: once the last one finishes it holds each
step once, in order, as the uninterrupted run's log does.

    /usr/bin/python3 test/e2e/resume.py --compiler build/bin/fuyou-compile --work DIR
"""
import argparse
import json
import os
import random
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def losses(path):
    out = {}
    if os.path.exists(path):
        for line in open(path):
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # a line cut by the kill
            out[rec["step"]] = rec["loss"]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--ssd", action="store_true", help="keep AdamW's state on SSD in the killed runs")
    ap.add_argument("--grad-accum", type=int, default=1, help="micro-batches a step (kills land between them too)")
    ap.add_argument("--fp16", action="store_true",
                    help="compile at fp16 and start the loss scale high, growing every 4 steps: the runs "
                         "skip steps and change scale, which a resumed run must carry on from")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)
    rng = random.Random(1234)

    subprocess.run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("tokens.bin"),
                    "--max-bytes", "100000"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out",
                    w("model.onnx"), "--batch", "4", "--seq", "32"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([a.compiler, w("model.onnx"), "-o", w("train")] + (["--precision", "fp16"] if a.fp16 else []),
                   check=True)
    # A warmup and a cosine decay: a resumed run must pick up the rate where it was.
    base = [w("train"), "--data", w("tokens.bin"), "--steps", str(a.steps), "--log-every", "1000",
            "--lr-schedule", "cosine", "--warmup-steps", "5", "--min-lr", "1e-4",
            "--grad-accum", str(a.grad_accum)]
    if a.fp16:
        base += ["--loss-scale-init", str(2 ** 26), "--loss-scale-growth-interval", "4"]

    t0 = time.time()
    subprocess.run(base + ["--log-json", w("full.jsonl")], check=True)
    full = losses(w("full.jsonl"))
    if a.fp16:
        skips = [json.loads(l)["skipped"] for l in open(w("full.jsonl"))]
        if skips.count(True) < 2 or skips[-10:].count(True) == 0:
            sys.exit(f"resume: FAIL: the fp16 run should skip steps early and again late: {skips}")
    run_seconds = time.time() - t0

    ck = w("ckpt")
    subprocess.run(["rm", "-rf", ck])
    seen = {}
    killed = 0
    attempt = 0
    while True:
        attempt += 1
        if attempt > 100:
            sys.exit(f"resume: FAIL: no progress after 100 attempts ({killed} killed)")
        log = w("run.jsonl")
        cmd = base + ["--save", ck, "--save-every", "3", "--log-json", log]
        if a.ssd:
            os.makedirs(w("ssd"), exist_ok=True)
            cmd += ["--ssd", w("ssd")]
        start = 0
        manifest = os.path.join(ck, "manifest.json")
        if os.path.exists(manifest):
            cmd += ["--resume", ck]
            start = json.load(open(manifest))["step"]
        t_start = time.time()
        p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
        if killed < a.kills:
            # Somewhere in what is left of the run (start-up and checkpoints included).
            left = (a.steps - start) / a.steps
            time.sleep(rng.uniform(0.02, max(0.05, left * run_seconds)))
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
                killed += 1
        _, err = p.communicate()
        seen.update(losses(log))
        if p.returncode == 0 and killed < a.kills:
            # Finished before the kill: go round again, aiming within the time a
            # whole run takes now (the first one may have run on a busier machine).
            if start == 0:
                run_seconds = min(run_seconds, time.time() - t_start)
            subprocess.run(["rm", "-rf", ck, log])
            continue
        if p.returncode == 0:
            break
        if p.returncode != -signal.SIGKILL:
            sys.exit(f"resume: FAIL: attempt {attempt} exited {p.returncode}: {err.strip()}")

    if killed < a.kills:
        sys.exit(f"resume: FAIL: only {killed} runs were killed before finishing (runs too short?)")
    steps = [json.loads(l)["step"] for l in open(log)]
    if steps != sorted(full):
        sys.exit(f"resume: FAIL: the log the resumed runs continued has steps {steps}, not 1..{len(full)} once each")
    if losses(log) != full:
        sys.exit(f"resume: FAIL: the continued log's losses differ from the uninterrupted run's")
    missing = [s for s in full if s not in seen]
    diff = [(s, full[s], seen[s]) for s in full if s in seen and seen[s] != full[s]]
    if missing or diff:
        sys.exit(f"resume: FAIL: missing steps {missing}, differing losses {diff[:5]}")
    print(f"resume: PASS: {killed} runs killed at random moments, {attempt} attempts; "
          f"all {len(full)} losses bit-identical to the uninterrupted run")


if __name__ == "__main__":
    main()
