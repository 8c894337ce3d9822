#!/usr/bin/python3
"""Validation loss (--val-data): fy_eval_step, the forward that fy-outline-eval
cut out of the planned train step, evaluated on a held-out file.

- Against torch: val_loss every 4 steps of a 12-step run equals torch's
  model.eval() loss on the same batches under its weights after those steps
  (rtol 1e-4), and an evaluation-only run (--steps 0) the untrained model's.
- Bit for bit: on a file of exactly one batch every step trains on the batch
  it then evaluates, so val_loss after step s is the loss step s+1 logs; and
  a program with activations on SSD and streamed weights logs the resident
  program's val_loss values.
- Dropout off: a model exported with dropout 0.5 evaluates to torch's
  eval-mode loss, far from its training-mode loss.
- The runtime: the embedding's rows still go first after each validation's
  wait for every update.
- Refusals: one line each, non-zero exit.

    /usr/bin/python3 test/e2e/validation.py --compiler build/bin/fuyou-compile --work DIR
"""
import json
import os
import re
import subprocess
import sys

import numpy as np

import runs

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
B, T = 4, 32


def fail(msg):
    sys.exit("validation: FAIL: " + msg)


def run(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()[-2000:]}")
    return r


def records(path):
    return [json.loads(line) for line in open(path)]


def close(ours, ref, rtol, what):
    if not abs(ours - ref) <= rtol * abs(ref):
        fail(f"{what}: ours {ours!r}, torch {ref!r} (rel {abs(ours - ref) / abs(ref):.2e} > {rtol})")


def eval_only(binary, data, val, extra=()):
    """The val_loss an evaluation-only run prints."""
    err = run([binary, "--data", data, "--steps", "0", "--val-data", val] + list(extra)).stderr
    m = re.search(r"val_loss (\S+) after step 0 \((\d+) batches", err)
    if not m:
        fail(f"no val_loss line from --steps 0: {err.strip()}")
    return float(m.group(1)), int(m.group(2))


def main():
    a = runs.compiler_and_work()
    w = lambda name: os.path.join(a.work, name)

    # Held-out tokens: the corpus's last fifth; training reads the rest.
    corpus = w("corpus.bin")
    if not os.path.exists(corpus):
        run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", corpus, "--max-bytes", "200000"])
    tokens = np.fromfile(corpus, dtype="<u2")
    cut = len(tokens) * 4 // 5
    data, val, one = w("train.bin"), w("val.bin"), w("one.bin")
    tokens[:cut].tofile(data)
    tokens[cut:].tofile(val)
    tokens[: B * T + 1].tofile(one)  # exactly one batch: every step reads it

    for name, extra in (("model", []), ("dropout", ["--dropout", "0.5"])):
        run([PY, os.path.join(ROOT, "examples/export.py"), "--out", w(name + ".onnx"), "--batch", str(B),
             "--seq", str(T)] + extra)
    run([a.compiler, w("model.onnx"), "-o", w("train")])
    run([a.compiler, w("model.onnx"), "-o", w("train_placed"), "--activations", "ssd", "--params", "stream"])
    run([a.compiler, w("dropout.onnx"), "-o", w("train_dropout")])
    more = {"activations in host memory and weights streamed, both prefetched":
                ["--activations", "host", "--activation-prefetch", "2", "--params", "stream", "--param-prefetch", "1"],
            "activations recomputed": ["--activations", "recompute"],
            # The synchronous optimizer updates each parameter during
            # backward: what is remade must still read the step's weights.
            "all but the weight products' outputs recomputed, synchronous optimizer":
                ["--activations", "selective", "--sync-optimizer"],
            "synchronous optimizer": ["--sync-optimizer"],
            "fp16, loss scaled": ["--precision", "fp16", "--loss-scale", "dynamic"]}
    for k, (what, extra) in enumerate(more.items()):
        run([a.compiler, w("model.onnx"), "-o", w(f"train_more{k}")] + extra)
    ssd = w("ssd")
    os.makedirs(ssd, exist_ok=True)

    # 1. Against torch, during training and before it.
    steps, every, nval = 12, 4, 3
    flags = ["--val-data", val, "--val-every", str(every), "--val-batches", str(nval)]
    run([w("train"), "--data", data, "--steps", str(steps), "--log-json", w("ours.jsonl"),
         "--trace", w("ours.trace.json")] + flags)
    oracle = [PY, os.path.join(HERE, "oracle.py"), "--onnx", w("model.onnx"), "--data", data, "--batch", str(B),
              "--seq", str(T)] + flags
    run(oracle + ["--steps", str(steps), "--out-losses", w("ref.jsonl")])
    ours, ref = records(w("ours.jsonl")), records(w("ref.jsonl"))
    at = [r["step"] for r in ours if "val_loss" in r]
    if at != [4, 8, 12] or [r["step"] for r in ref if "val_loss" in r] != at:
        fail(f"val_loss logged at steps {at}, torch's at {[r['step'] for r in ref if 'val_loss' in r]}")
    for o, r in zip(ours, ref):
        close(o["loss"], r["loss"], 1e-4, f"step {o['step']} loss")
        if "val_loss" in o:
            close(o["val_loss"], r["val_loss"], 1e-4, f"val_loss after step {o['step']}")
    if not ours[-1]["val_loss"] < ours[3]["val_loss"]:
        fail(f"val_loss did not fall: {[o.get('val_loss') for o in ours]}")
    shown = ", ".join("%.6f" % o["val_loss"] for o in ours if "val_loss" in o)
    print(f"validation: val_loss after steps {at} = torch's within 1e-4: {shown}")
    got, n = eval_only(w("train"), data, val, ["--val-batches", str(nval)])
    run(oracle + ["--steps", "0", "--out-losses", w("ref0.jsonl")])
    close(got, records(w("ref0.jsonl"))[0]["val_loss"], 1e-4, "--steps 0 val_loss")
    got20, n20 = eval_only(w("train"), data, val)
    if n != nval or n20 != 20:
        fail(f"evaluated {n} and {n20} batches, not {nval} and the default 20")
    print(f"validation: --steps 0 evaluates the untrained weights: {got:.6f}, torch's within 1e-4")

    # 2. Bit for bit: the eval step's forward is the train step's.
    for binary, extra in [(w("train"), []), (w("train"), ["--grad-accum", "2"]), (w("train_placed"), ["--ssd", ssd])] + \
            [(w(f"train_more{k}"), []) for k in range(len(more))]:
        log = binary + ".one.jsonl"
        run([binary, "--data", one, "--steps", "6", "--val-data", one, "--val-every", "1", "--log-json", log] + extra)
        recs = records(log)
        pairs = [(r["val_loss"], nxt["loss"]) for r, nxt in zip(recs, recs[1:])]
        if len(pairs) != 5 or any(v != l for v, l in pairs):
            fail(f"{os.path.basename(binary)} {extra}: val_loss after step s is not step s+1's loss on the same batch: {pairs}")
    placed = w("placed.jsonl")
    run([w("train_placed"), "--data", data, "--steps", str(steps), "--log-json", placed, "--ssd", ssd] + flags)
    if [r.get("val_loss") for r in records(placed)] != [r.get("val_loss") for r in ours] or \
            [r["loss"] for r in records(placed)] != [r["loss"] for r in ours]:
        fail("activations on SSD and streamed weights change the losses or val_loss")
    print("validation: val_loss after step s is step s+1's loss on its batch, bit for bit: resident, with "
          f"--grad-accum 2, on SSD with weights streamed, {', '.join(more)}; "
          "the placed program's val_loss values are the resident one's")

    # 3. Dropout is off in evaluation.
    dropped, _ = eval_only(w("train_dropout"), data, val, ["--val-batches", str(nval)])
    d_oracle = [PY, os.path.join(HERE, "oracle.py"), "--onnx", w("dropout.onnx"), "--data", data, "--batch", str(B),
                "--seq", str(T), "--val-data", val, "--val-batches", str(nval), "--steps", "0",
                "--out-losses", w("ref_dropout.jsonl")]
    run(d_oracle)
    eval_mode = records(w("ref_dropout.jsonl"))[0]["val_loss"]
    close(dropped, eval_mode, 1e-4, "the dropout model's val_loss")
    check = ("import sys, torch; sys.path.insert(0, sys.argv[1]); sys.path.insert(0, sys.argv[2]); import oracle, models, json;"
             "cfg = models.ModelConfig.from_dict(json.load(open(sys.argv[3] + '.json'))); torch.manual_seed(0);"
             "m = models.build_model(cfg); oracle.load_initializers(m, sys.argv[3]); m.train();"
             "v = oracle.Batches(oracle.load_tokens(sys.argv[4]), 4, 32);"
             "print(sum(float(m(*v.get(k))) for k in range(3)) / 3)")
    train_mode = float(run([PY, "-c", check, HERE, os.path.join(ROOT, "examples"), w("dropout.onnx"), val]).stdout)
    if abs(train_mode - eval_mode) < 1e-3 * abs(eval_mode):
        fail(f"dropout 0.5 does not change torch's loss ({train_mode} vs {eval_mode}): the check cannot tell")
    print(f"validation: the dropout model evaluates to {dropped:.6f}, torch's eval mode within 1e-4 "
          f"(its training mode: {train_mode:.6f})")

    # 4. Each validation waits for every update; the next forward still
    # finds its rows updated first. (An update whose table rows went early
    # has a rows part too, the step's own rows, the last step's included.)
    events = json.load(open(w("ours.trace.json")))["traceEvents"]
    first = sum(1 for e in events if e.get("name", "").startswith("adamw rows first"))
    early = sum(1 for e in events if e.get("name", "").startswith("adamw early rows"))
    missed = sum(1 for e in events if "rows first missed" in e.get("name", ""))
    vals = sum(1 for e in events if e.get("name", "").startswith("validation after step"))
    want = steps - 1 + (1 if early else 0)
    if first != want or missed or vals != 3:
        fail(f"rows first in {first} of {want} updates ({early} with early rows), {missed} missed, "
             f"{vals} validations traced")
    print(f"validation: rows first in {first} of {want} updates ({early} with early rows) around 3 validations, "
          "none missed")

    # 5. Refusals.
    short = w("short.bin")
    tokens[:T].tofile(short)
    for extra, expect in (
            (["--steps", "3", "--val-every", "2"], "--val-every needs --val-data"),
            (["--steps", "3", "--val-data", val, "--val-batches", "100000"], "--val-batches 100000: "),
            (["--steps", "0", "--val-data", val, "--log-json", w("x.jsonl")], "--log-json: a run of --steps 0"),
            (["--steps", "0", "--val-data", val, "--save", w("x")], "--save: a run of --steps 0"),
            (["--steps", "0"], "0 needs --val-data"),
            (["--steps", "3", "--val-data", short], "short.bin"),
            (["--steps", "3", "--val-data", w("missing.bin")], "missing.bin")):
        r = subprocess.run([w("train"), "--data", data] + extra, capture_output=True, text=True)
        lines = r.stderr.strip().splitlines()
        if r.returncode == 0 or len(lines) != 1 or expect not in lines[0] or not lines[0].startswith("train: error: "):
            fail(f"{extra}: exit {r.returncode}, stderr {r.stderr.strip()!r}, wanted one error line with {expect!r}")
    if os.path.exists(w("x.jsonl")):
        fail("a refused run wrote its log")
    print("validation: 7 bad uses refused with one line each")
    print("validation: PASS")


if __name__ == "__main__":
    main()
