#!/usr/bin/python3
"""SIGTERM and SIGINT (a scheduler's preemption, Ctrl-C): the run finishes the
step under way, checkpoints to --save, says so in one line and ends by the
signal itself (a shell sees 128 + the signal); resumed, it goes on to the
uninterrupted run's losses bit for bit, in the same --log-json file. Without
--save nothing is written. (A second signal stops the run at once; the
example's steps take a millisecond, too short to test that.)

    /usr/bin/python3 test/e2e/interrupt.py --compiler build/bin/fuyou-compile --work DIR
"""
import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def fail(msg):
    sys.exit("interrupt: FAIL: " + msg)


def records(path):
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def start_and_signal(cmd, log, sig, after):
    """Starts cmd, sends sig once `after` steps are logged; returns
    (returncode, stderr)."""
    if os.path.exists(log):
        os.remove(log)  # a last run's would count as this one's steps
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(records(log)) < after:
        if p.poll() is not None:
            fail(f"the run ended (exit {p.returncode}) before step {after}: {p.stderr.read().strip()}")
        if time.time() > deadline:
            p.kill()
            fail(f"no step {after} in 120 s")
        time.sleep(0.01)
    p.send_signal(sig)
    _, err = p.communicate(timeout=120)
    return p.returncode, err


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=400)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    w = lambda n: os.path.join(a.work, n)

    subprocess.run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", w("tokens.bin"),
                    "--max-bytes", "100000"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out",
                    w("model.onnx"), "--batch", "4", "--seq", "32"], check=True, stdout=subprocess.DEVNULL)
    subprocess.run([a.compiler, w("model.onnx"), "-o", w("train")], check=True, stderr=subprocess.DEVNULL)
    base = [w("train"), "--data", w("tokens.bin"), "--steps", str(a.steps), "--log-every", "100000",
            "--lr-schedule", "cosine", "--warmup-steps", "5"]
    subprocess.run(base + ["--log-json", w("full.jsonl")], check=True, stderr=subprocess.DEVNULL)
    full = [r["loss"] for r in records(w("full.jsonl"))]

    # SIGTERM with --save: a checkpoint at the step it stopped after, then a resume to the end.
    ck, log = w("ckpt"), w("run.jsonl")
    subprocess.run(["rm", "-rf", ck, log])
    rc, err = start_and_signal(base + ["--save", ck, "--log-json", log], log, signal.SIGTERM, after=3)
    if rc != -signal.SIGTERM:
        fail(f"SIGTERM: exit {rc}, not the signal's: {err.strip()}")
    m = re.search(r"train: terminated \(SIGTERM\) after step (\d+) of %d: checkpoint in '.*'; --resume .* goes on"
                  % a.steps, err)
    if not m:
        fail(f"SIGTERM: no line saying where it stopped and what it saved: {err.strip()}")
    stopped = int(m.group(1))
    manifest = json.load(open(os.path.join(ck, "manifest.json")))
    logged = [r["step"] for r in records(log)]
    if manifest["step"] != stopped or logged != list(range(1, stopped + 1)) or stopped >= a.steps:
        fail(f"SIGTERM: stopped after step {stopped}, checkpoint at {manifest['step']}, log has {logged[-3:]}")
    subprocess.run(base + ["--resume", ck, "--log-json", log], check=True, stderr=subprocess.DEVNULL)
    got = [r["loss"] for r in records(log)]
    if got != full:
        fail(f"SIGTERM then --resume: losses differ from the uninterrupted run's "
             f"({len(got)} steps logged against {len(full)})")
    print(f"interrupt: SIGTERM after step {stopped} of {a.steps}: checkpoint there, resumed to the same "
          f"{len(full)} losses")

    # SIGINT without --save: one line, nothing written.
    rc, err = start_and_signal(base + ["--log-json", w("int.jsonl")], w("int.jsonl"), signal.SIGINT, after=3)
    if rc != -signal.SIGINT or not re.search(r"train: interrupted \(SIGINT\) after step \d+ of \d+: "
                                                 r"nothing saved \(no --save\)", err):
        fail(f"SIGINT: exit {rc}: {err.strip()}")
    print("interrupt: SIGINT without --save: one line, nothing saved, ended by the signal")
    print("interrupt: PASS")


if __name__ == "__main__":
    main()
