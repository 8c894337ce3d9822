#!/usr/bin/python3
"""Placement (issue 4): what the device holds is the compiler's choice, and
no choice changes a bit of the results.

  activations: a model whose activations saved for backward are at least 4x
    --gpu-mem trains within --gpu-mem when they wait in host memory
    (fuyou-compile --activations host);
  both: a model whose weights alone and whose activations alone are each at
    least 4x --gpu-mem trains within it when the weights are streamed in per
    phase (--params stream) and the activations wait in host memory; its
    tied embedding's gather reads the batch's rows from the host master;
  ssd: the first model, its activations waiting on SSD (--activations ssd,
    through host memory, in the activation store under --ssd);
  recompute: the first model, its activations computed again in backward
    from each layer's input (--activations recompute);
  selective: the first model, and a Llama, with the activations that can be
    made again without a weight product computed again (--activations
    selective);
  streamed-llama: a Llama's weights streamed; its untied embedding is not
    copied up at all, the gather reading the batch's rows from the host
    master once they are updated;
  mixed: the same with a policy per forward segment (layer group): keep,
    host, ssd, recompute and selective in turn;
  planned: the same under fuyou-compile --gpu-mem 10M, the planner choosing
    (fy-choose-placement): it must mix policies.

Each run's losses and trained weights are bit-identical to the run that keeps
everything on the device (itself identical with every update waited for whole,
compiled with --rows-first no --param-waits no, and the default: the token embedding's rows
first, its rows the batch does not read during backward, then each
parameter's update), also when each copy between host and device is done
at its wait (FY_DEFER_COPIES=1), and that program is refused under the same
budget.
On the CPU target "device memory" is the arena of the memory plan (plus the
resident parameters); --gpu-mem is checked at start-up, and the arena
refuses any placement outside the plan as the program runs.
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def fail(msg):
    sys.exit(f"placement: FAIL: {msg}")


def plan(compiler, onnx, flags):
    out = subprocess.run([compiler, onnx, "--emit=fysched"] + flags, check=True, capture_output=True,
                         text=True).stdout
    return {k: int(v) for k, v in re.findall(r"fysched\.(\w+_bytes) = (\d+)", out)}


RESIDENT = {}  # shape -> (model, resident program, its losses, its checkpoint)


def resident_run(a, tokens, name, shape):
    """Exports `shape` and trains it all on the device, once per shape."""
    key = tuple(shape)
    if key not in RESIDENT:
        w = lambda n: os.path.join(a.work, f"{name}_{n}")
        subprocess.run([PY, os.path.join(ROOT, "examples/export.py"), "--model", "gpt2", "--out", w("m.onnx")] + shape,
                       check=True, stdout=subprocess.DEVNULL)
        subprocess.run([a.compiler, w("m.onnx"), "-o", w("train_resident")], check=True, stderr=subprocess.DEVNULL)
        subprocess.run(common(a, tokens, w("train_resident")) + ["--log-json", w("resident.jsonl"),
                                                                 "--save", w("ckpt_resident")],
                       check=True, stderr=subprocess.DEVNULL)
        # The token embedding's rows for the next batch updated first and each
        # parameter waited for alone (the default) give the bits of waiting
        # for each group's whole update (a program compiled without either).
        subprocess.run([a.compiler, w("m.onnx"), "-o", w("train_whole"), "--rows-first", "no", "--param-waits", "no"],
                       check=True, stderr=subprocess.DEVNULL)
        subprocess.run(common(a, tokens, w("train_whole")) + ["--log-json", w("whole.jsonl"), "--save", w("ckpt_whole")],
                       check=True, stderr=subprocess.DEVNULL)
        if losses(w("whole.jsonl")) != losses(w("resident.jsonl")) or weights(w("ckpt_whole")) != weights(
                w("ckpt_resident")):
            fail(f"{name}: compiled with --rows-first no --param-waits no, other losses or weights than the default: "
                 f"{losses(w('whole.jsonl'))} against {losses(w('resident.jsonl'))}")
        RESIDENT[key] = (w("m.onnx"), w("train_resident"), losses(w("resident.jsonl")), w("ckpt_resident"))
    return RESIDENT[key]


def common(a, tokens, program):
    return [program, "--data", tokens, "--steps", str(a.steps), "--log-every", "1000"]


def losses(f):
    return [json.loads(l)["loss"] for l in open(f)]


def weights(d):
    return open(os.path.join(d, "model.safetensors"), "rb").read()


def case(a, tokens, name, shape, flags, held, emits=None):
    """Trains `shape` resident and placed by `flags`; `held` names what the
    device no longer holds, {label: bytes from the plan}, each of which must
    be 4x --gpu-mem (none for recomputation: nothing is held anywhere);
    `emits`, a runtime call the placed program must make.
    Returns a line for the summary."""
    w = lambda n: os.path.join(a.work, f"{name}_{n}")
    model, resident_program, lr, resident_ckpt = resident_run(a, tokens, name, shape)
    placed = plan(a.compiler, model, flags)
    resident = plan(a.compiler, model, [])
    streamed = "stream" in flags
    gpu_mem = placed["arena_bytes"] + (0 if streamed else placed["param_bytes"])
    held = {label: f(placed) for label, f in held.items()}
    for label, b in held.items():
        if b < 4 * gpu_mem:
            fail(f"{name}: {label} {b} B are not 4x --gpu-mem {gpu_mem} B")

    subprocess.run([a.compiler, model, "-o", w("train_placed")] + flags, check=True, stderr=subprocess.DEVNULL)
    if emits:
        with open(w("train_placed") + ".cpp") as f:
            if emits not in f.read():
                fail(f"{name}: the program under {' '.join(flags)} does not call {emits}")
    ssd = []
    if "ssd" in " ".join(flags):
        os.makedirs(w("ssd"), exist_ok=True)
        ssd = ["--ssd", w("ssd")]
    # Again with every copy between host and device done at its wait, the
    # latest the program allows (FY_DEFER_COPIES): a wait misplaced by
    # fy-async-copies then shows as different bits.
    for tag, env in (("placed", {}), ("deferred", {"FY_DEFER_COPIES": "1"})):
        r = subprocess.run(common(a, tokens, w("train_placed")) + ssd +
                           ["--gpu-mem", str(gpu_mem), "--log-json", w(f"{tag}.jsonl"), "--save", w(f"ckpt_{tag}")],
                           capture_output=True, text=True, env=dict(os.environ, **env))
        if r.returncode != 0:
            fail(f"{name}: the {tag} run under --gpu-mem {gpu_mem} exited {r.returncode}: {r.stderr[-2000:]}")
    r = subprocess.run(common(a, tokens, resident_program) + ["--gpu-mem", str(gpu_mem)], capture_output=True,
                       text=True)
    if r.returncode == 0 or "--gpu-mem" not in r.stderr or "too small" not in r.stderr:
        fail(f"{name}: the device-resident program was not refused under --gpu-mem {gpu_mem}: {r.stderr[-500:]}")

    for tag in ("placed", "deferred"):
        lp = losses(w(f"{tag}.jsonl"))
        if len(lr) != a.steps or lr != lp:
            fail(f"{name}: losses differ: resident {lr}, {tag} {lp}")
        if weights(resident_ckpt) != weights(w(f"ckpt_{tag}")):
            fail(f"{name}: the trained weights of the {tag} run differ")
    ratios = ", ".join(f"{label} {b / gpu_mem:.1f}x" for label, b in held.items()) or "nothing held"
    return (f"{name} ({' '.join(flags)}): {ratios} --gpu-mem {gpu_mem} B; device arena "
            f"{resident['arena_bytes']} B resident, {placed['arena_bytes']} B placed; {a.steps} losses and "
            f"the weights bit-identical, copies deferred to their waits too")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=4)
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    tokens = os.path.join(a.work, "tokens.bin")
    subprocess.run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", tokens, "--max-bytes", "100000"],
                   check=True, stdout=subprocess.DEVNULL)
    deep = ["--batch", "8", "--seq", "64", "--n-layer", "12", "--d-model", "64", "--n-head", "4", "--block-size", "64"]
    rows = [
        # Deep and narrow, long rows: activations grow with layers x batch x
        # sequence, the working set of one layer does not.
        case(a, tokens, "activations", deep, ["--activations", "host"], {"activations": lambda p: p["host_arena_bytes"]}),
        # Deeper and wider: the weights and the activations each outgrow what
        # one layer's ops hold at once.
        case(a, tokens, "both", ["--batch", "2", "--seq", "64", "--n-layer", "16", "--d-model", "128",
                                 "--n-head", "4", "--block-size", "64"],
             ["--activations", "host", "--params", "stream"],
             {"weights": lambda p: p["param_bytes"], "activations": lambda p: p["host_arena_bytes"]},
             emits="fy::rt::gather_up"),
        case(a, tokens, "ssd", deep, ["--activations", "ssd"], {"activations": lambda p: p["ssd_arena_bytes"]}),
        case(a, tokens, "recompute", deep, ["--activations", "recompute"], {}),
        case(a, tokens, "selective", deep, ["--activations", "selective"], {}),
        # Llama's RMS norms, SiLU and gating products are what it makes again.
        case(a, tokens, "selective-llama", ["--model", "llama", "--batch", "4", "--seq", "64", "--n-layer", "4",
                                            "--d-model", "64", "--n-head", "4", "--block-size", "64"],
             ["--activations", "selective"], {}),
        # An untied embedding streamed: the gather reads the step's rows from
        # its host master (fy-rows-first's gather_up), after their update only.
        case(a, tokens, "streamed-llama", ["--model", "llama", "--batch", "4", "--seq", "64", "--n-layer", "4",
                                           "--d-model", "64", "--n-head", "4", "--block-size", "64"],
             ["--params", "stream"], {}, emits="fy::rt::gather_up"),
        # 15 segments: the two embeddings, 12 layers, the head.
        case(a, tokens, "mixed", deep,
             ["--activations", ",".join(["keep", "host", "ssd", "recompute", "selective"][i % 5] for i in range(15))],
             {}),
    ]
    # The planner's own mix (fy-choose-placement, built-in CPU figures) under a
    # budget that keep-all (35.6 MB) does not fit: it must mix policies.
    planned = ["--gpu-mem", "10M", "--state", "ssd"]
    text = subprocess.run([a.compiler, resident_run(a, tokens, "activations", deep)[0], "--emit=plan"] + planned,
                          capture_output=True, text=True, check=True).stdout
    chose = re.search(r"chose activations (\S+), parameters (\w+)", text)
    if not chose or len(set(chose.group(1).split(","))) < 2:
        fail(f"planned: the planner did not mix policies under --gpu-mem 10M: {text[:400]}")
    rows.append(case(a, tokens, "planned", deep, planned, {}) + f" (chose {chose.group(1)}; parameters {chose.group(2)})")
    for r in rows:
        print("placement: " + r)
    print("placement: PASS")


if __name__ == "__main__":
    main()
