#!/usr/bin/env python3
"""The planner's choice at GPT-2 XL's shape on the GPU, against the uniform plan it must beat.

Hugging Face's GPT2LMHeadModel at 48 layers, d 1600 (1.56 B parameters), B 8, T 1024, exported
from the meta device; CUDA target, AdamW's state in host memory, --gpu-mem 24G. Two programs:
the planner's choice (plan) and the uniform --activations recompute --params keep (recompute),
the fastest uniform plan that fits by the planner's own figures.

  prepare PROFILE OUTDIR    (development machine, torch 2.x's Python: exports, plans with
                             PROFILE, writes plan.cpp, recompute.cpp, params.json, config.json)
  run DIR                   (GPU machine, the programs built beside their C++ as DIR/plan and
                             DIR/recompute): draws the weights (params.json: names and shapes),
                             runs each program STEPS steps from them, the losses compared bit for
                             bit (placement never changes results), median step after the first 3
                             against the prediction; then a few traced steps of each for
                             --kernel-times. Writes $OUT/xl.json and prints lines "xl ...".
  repredict RESULTS [PROFILE]   (development machine, after run; RESULTS holds xl.json, the traces
                             and profile_cuda.json from bench/gpu.sh's calibration): both programs
                             predicted again with that machine's profile (or PROFILE), and with
                             --kernel-times from their own traces, against what was measured.

Goal (issue 42): measured within 10% of predicted, losses bit-identical, in one device call of
under 8 minutes (bench/gpu/lease.sh 470 xl).
"""
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CONFIG = {"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 48, "n_embd": 1600,
          "n_head": 25, "n_positions": 1024, "vocab_size": 50257, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
          "attn_pdrop": 0.0}
BATCH, SEQ, GPU_MEM = 8, 1024, "24G"
PROGRAMS = {"plan": [], "recompute": ["--activations", "recompute", "--params", "keep"]}
STEPS, TRACED_STEPS = 12, 4


def sh(cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"planner_xl: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    return r


def figures(plan_text):
    """What --emit=plan says of a plan: placement, step, device bytes, the two comparisons."""
    num = lambda pat: float(m.group(1)) if (m := re.search(pat, plan_text)) else None
    chose = re.search(r"chose activations (\S+), parameters (\w+)", plan_text)
    acts = chose.group(1) if chose else ",".join(re.findall(r"^segment \d+: (\w+)", plan_text, re.M))
    params = chose.group(2) if chose else ("stream" if "parameters: stream" in plan_text else "keep")
    return {"activations": acts, "params": params, "predicted_ms": num(r"predicted step: ([\d.]+) ms"),
            "device_bytes": int(num(r"device: (\d+) B") or 0), "lower_bound_ms": num(r"lower bound \(.*\): ([\d.]+) ms"),
            "uniform": (m.group(1) if (m := re.search(r"fastest uniform plan that fits \((.*)\)", plan_text)) else None)}


def runs(acts):
    """keep,keep,recompute,... as keep x2, recompute x16, ..."""
    out = []
    for a in acts.split(","):
        if out and out[-1][0] == a:
            out[-1][1] += 1
        else:
            out.append([a, 1])
    return ", ".join(a if n == 1 else f"{a} x{n}" for a, n in out)


def export(work, python):
    """The meta-device export (no weight made): WORK/model.onnx."""
    os.makedirs(work, exist_ok=True)
    onnx = os.path.join(work, "model.onnx")
    if not os.path.exists(onnx):
        with open(os.path.join(work, "config.json"), "w") as f:
            json.dump(CONFIG, f)
        sh([python, os.path.join(ROOT, "examples", "export_hf.py"), "--config", work, "--meta", "--out", onnx,
            "--batch", str(BATCH), "--seq", str(SEQ)])
    return onnx


def params_of(onnx):
    """Names and shapes of the trained initializers (the ONNX file's, without its data)."""
    import onnx as onnx_lib
    m = onnx_lib.load(onnx, load_external_data=False)
    meta = {p.key: p.value for p in m.metadata_props}
    frozen = set(filter(None, meta.get("fuyou.frozen", "").split(",")))
    return [{"name": t.name, "shape": list(t.dims)} for t in m.graph.initializer
            if t.name not in frozen and t.data_type == onnx_lib.TensorProto.FLOAT and len(t.dims) > 0]


def prepare(profile, out):
    fc = os.path.join(ROOT, "build", "bin", "fuyou-compile")
    work = os.path.join("/tmp", "fy_planner_xl")
    onnx = export(work, sys.executable)
    os.makedirs(out, exist_ok=True)
    base = [fc, onnx, "--target", "cuda", "--state", "memory", "--gpu-mem", GPU_MEM, "--profile", profile]
    cfg = {"config": CONFIG, "batch": BATCH, "seq": SEQ, "gpu_mem": GPU_MEM, "profile": os.path.basename(profile)}
    for name, flags in PROGRAMS.items():
        text = sh(base + flags + ["--emit=plan"]).stdout
        with open(os.path.join(out, f"{name}.plan.txt"), "w") as f:
            f.write(text)
        cfg[name] = figures(text)
        with open(os.path.join(out, f"{name}.cpp"), "w") as f:
            f.write(sh(base + flags + ["--emit=cpp"]).stdout)
    with open(os.path.join(out, "params.json"), "w") as f:
        json.dump(params_of(onnx), f)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(cfg, f, indent=1)
    p, r = cfg["plan"], cfg["recompute"]
    print(f"xl: plan {runs(p['activations'])} / {p['params']}: {p['predicted_ms']} ms predicted, "
          f"{p['device_bytes'] / 2**30:.1f} GiB; recompute {r['predicted_ms']} ms, {r['device_bytes'] / 2**30:.1f} GiB")


def draw_weights(params_json, path):
    """GPT-2's initialisation by name and shape (normal 0.02 for matrices, ones for a norm's
    weight, zeros for a bias), seed 1337: the same tensors for both programs."""
    import torch
    sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
    import safetensors_io
    torch.manual_seed(1337)
    tensors = {}
    for p in json.load(open(params_json)):
        shape = p["shape"]
        if p["name"].endswith(".bias"):
            t = torch.zeros(shape)
        elif len(shape) == 1:
            t = torch.ones(shape)
        else:
            t = torch.empty(shape).normal_(0.0, 0.02)
        tensors[p["name"]] = t.numpy()
    safetensors_io.save(path, tensors, {"producer": "bench/gpu/planner_xl.py"})


def measure(exe, tokens, steps, extra, log):
    """(median ms after the first 3 steps, losses, error or None): bench/gpu/planner.py's run."""
    sys.path.insert(0, HERE)
    import planner
    ms, losses, err = planner.measure(exe, tokens, steps, extra, log)
    return ms, losses, err if ms is None else None


def run(d):
    out = os.environ.get("OUT", "/tmp")
    cfg = json.load(open(os.path.join(d, "config.json")))
    tokens = os.path.join(ROOT, ".gpu", "tokens_zipf.bin")  # GPT-2-vocabulary ids (zipf_tokens.py)
    weights = os.path.join(d, "weights.safetensors")
    if not os.path.exists(weights):
        draw_weights(os.path.join(d, "params.json"), weights)
    res = {"gpu_mem": cfg["gpu_mem"], "steps": STEPS}
    for name in PROGRAMS:
        common = ["--weights", weights]
        ms, losses, err = measure(os.path.join(d, name), tokens, STEPS, common, os.path.join(out, f"xl_{name}.jsonl"))
        if ms is None:
            print(f"xl {name}: FAIL: {err}")
            res[name] = {"error": err}
            continue
        pred = cfg[name]["predicted_ms"]
        res[name] = {"measured_ms": ms, "predicted_ms": pred, "measured_over_predicted": ms / pred, "losses": losses}
        print(f"xl {name}: {runs(cfg[name]['activations'])} / {cfg[name]['params']}: measured {ms:.1f} ms/step, "
              f"predicted {pred:.1f} -> {ms / pred:.3f}; losses {losses[0]:.4f} .. {losses[-1]:.4f}")
    for name in PROGRAMS:
        if "measured_ms" in res[name]:
            trace = os.path.join(out, f"xl_{name}.trace.json")
            tms, _, err = measure(os.path.join(d, name), tokens, TRACED_STEPS, ["--weights", weights, "--trace", trace],
                                  os.path.join(out, f"xl_{name}_traced.jsonl"))
            res[name]["traced_ms"] = tms
            if err:
                print(f"xl {name} traced: FAIL: {err}")
    ok = all("measured_ms" in res[n] for n in PROGRAMS)
    if ok:
        same = res["plan"]["losses"] == res["recompute"]["losses"]
        res["losses_bit_identical"] = same
        ratio = res["plan"]["measured_ms"] / res["recompute"]["measured_ms"]
        print(f"xl: plan / recompute measured {ratio:.3f} (predicted "
              f"{cfg['plan']['predicted_ms'] / cfg['recompute']['predicted_ms']:.3f}); losses "
              f"{'bit-identical' if same else 'DIFFER'} over {STEPS} steps")
    with open(os.path.join(out, "xl.json"), "w") as f:
        json.dump(res, f, indent=1)
    return ok and res["losses_bit_identical"]


def repredict(results, profile=None):
    fc = os.path.join(ROOT, "build", "bin", "fuyou-compile")
    measured = json.load(open(os.path.join(results, "xl.json")))
    profile = profile or os.path.join(results, "profile_cuda.json")
    onnx = export(os.path.join("/tmp", "fy_planner_xl"), sys.executable)
    cfg = json.load(open(os.path.join(ROOT, ".gpu", "xl", "config.json")))
    for name in PROGRAMS:
        m = measured.get(name, {})
        if "measured_ms" not in m:
            continue
        plan = cfg[name]
        base = [fc, onnx, "--target", "cuda", "--state", "memory", "--gpu-mem", GPU_MEM, "--profile", profile,
                "--activations", plan["activations"], "--params", plan["params"], "--emit=plan"]
        for label, extra in (("profile " + os.path.basename(profile), []),
                             ("kernel times", ["--kernel-times", os.path.join(results, f"xl_{name}.trace.json")])):
            if extra and not os.path.exists(extra[1]):
                continue
            pred = figures(sh(base + extra).stdout)["predicted_ms"]
            print(f"xl {name}, {label}: predicted {pred:.1f} ms, measured {m['measured_ms']:.1f} "
                  f"-> {m['measured_ms'] / pred:.3f}")
    return True


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    ok = {"prepare": lambda: prepare(*args) or True, "run": lambda: run(*args),
          "repredict": lambda: repredict(*args)}[cmd]()
    sys.exit(0 if ok else 1)
