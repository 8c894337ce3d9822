#!/usr/bin/env python3
"""The planner at the sizes it is for (issue of 2026-11: "the best plan for a 48-96-layer model
in seconds, never worse than a uniform plan").

  FUYOU_TORCH2/bin/python bench/planner/scale.py --compiler build/bin/fuyou-compile --work DIR
      [--shape gpt2xl ...] [--small] [--profile FILE]

Large shapes (Hugging Face-shaped graphs exported from the meta device, CUDA target, AdamW's state
in host memory, the H100 profile of 2026-11-27), each under two --gpu-mem budgets:
  - planning time: CPU seconds of the compile with the planner minus those of the same compile
    with the placement given (--activations keep --params keep), which imports, lowers and carries
    out one plan; goal < 5 s at 48 layers, < 10 s at 96;
  - the chosen plan against every uniform plan (each of keep/host/recompute/selective with the
    weights resident or streamed), each compiled on its own with the same budget: the chosen
    prediction must be no slower than the fastest that fits;
  - the chosen plan against the lower bound --emit=plan prints (the busiest stream when every
    activation is kept).
--small: the 2-4-layer configs of the CPU and CUDA targets (built-in profiles) at three budgets
inside each one's feasible range, the class search against --plan-search exhaustive; goal: within 1%.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHAPES = {  # name -> (config.json, batch, seq, budgets)
    "gpt2xl": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 48, "n_embd": 1600,
                "n_head": 25, "n_positions": 1024, "vocab_size": 50257, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                "attn_pdrop": 0.0}, 8, 1024, ["24G", "16G"]),
    "llama7b": ({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                 "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 32,
                 "num_hidden_layers": 32, "vocab_size": 32000, "max_position_embeddings": 4096,
                 "rms_norm_eps": 1e-5, "tie_word_embeddings": False}, 1, 4096, ["24G", "40G"]),
    "gpt3_175b": ({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2", "n_layer": 96, "n_embd": 12288,
                   "n_head": 96, "n_positions": 2048, "vocab_size": 50257, "resid_pdrop": 0.0, "embd_pdrop": 0.0,
                   "attn_pdrop": 0.0}, 1, 2048, ["24G", "80G"]),
}
SMALL = [("gpt2", 2, 128, 4), ("gpt2", 3, 96, 4), ("gpt2", 4, 64, 2), ("llama", 2, 128, 4)]


def run(cmd):
    """(returncode, stderr, CPU seconds of the child)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    r = subprocess.run(cmd, capture_output=True, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.returncode, r.stderr, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def plan(compiler, model, out, args):
    rc, err, cpu = run([compiler, model, "--emit=plan", "-o", out] + args)
    if rc:
        return {"error": err.strip().splitlines()[-1] if err.strip() else f"exit {rc}", "cpu_s": cpu}
    s = open(out).read()
    num = lambda pat: float(re.search(pat, s).group(1)) if re.search(pat, s) else None
    step = re.search(r"predicted step: ([\d.e+-]+) ms", s)
    chose = re.search(r"planner: (\d+) plans evaluated, chose activations (\S+), parameters (\w+)", s)
    return {"cpu_s": round(cpu, 2), "step_ms": float(step.group(1)) if step else None,
            "fits": "(fits)" in s.split("device:")[1].splitlines()[0],
            "evaluated": int(chose.group(1)) if chose else None,
            "activations": chose.group(2) if chose else None, "params": chose.group(3) if chose else None,
            "bound_ms": num(r"lower bound \(.*\): ([\d.e+-]+) ms")}


def short(acts):
    out, prev, n = [], None, 0
    for a in acts.split(",") + [None]:
        if a == prev:
            n += 1
            continue
        if prev:
            out.append(f"{prev}x{n}" if n > 1 else prev)
        prev, n = a, 1
    return ",".join(out)


def large(a, name):
    cfg, B, T, budgets = SHAPES[name]
    d = os.path.join(a.work, name)
    os.makedirs(d, exist_ok=True)
    model = os.path.join(d, "model.onnx")
    if not os.path.exists(model):
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f)
        subprocess.run([sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", d, "--meta",
                        "--out", model, "--batch", str(B), "--seq", str(T)], check=True, capture_output=True)
    common = ["--target", "cuda", "--state", "memory", "--profile", a.profile]
    base = plan(a.compiler, model, os.path.join(d, "base.txt"), common + ["--activations", "keep", "--params", "keep"])
    rows = []
    for budget in budgets:
        args = common + ["--gpu-mem", budget]
        chosen = plan(a.compiler, model, os.path.join(d, f"plan-{budget}.txt"), args)
        uniform = {}
        for pol in ("keep", "host", "recompute", "selective"):
            for par in ("keep", "stream"):
                u = plan(a.compiler, model, os.path.join(d, f"u-{budget}.txt"),
                         args + ["--activations", pol, "--params", par])
                uniform[f"{pol}/{par}"] = {"step_ms": u.get("step_ms"), "fits": u.get("fits")}
        fitting = {k: v["step_ms"] for k, v in uniform.items() if v["fits"]}
        best = min(fitting, key=fitting.get) if fitting else None
        row = {"shape": name, "budget": budget, "planning_cpu_s": round(chosen["cpu_s"] - base["cpu_s"], 2),
               "compile_cpu_s": chosen["cpu_s"], **{k: chosen.get(k) for k in
                                                     ("evaluated", "params", "step_ms", "bound_ms", "error")},
               "activations": short(chosen["activations"]) if chosen.get("activations") else None,
               "best_uniform": best, "best_uniform_ms": fitting.get(best), "uniform": uniform}
        if chosen.get("step_ms") and best:
            row["over_best_uniform"] = round(chosen["step_ms"] / fitting[best], 4)
        if chosen.get("step_ms") and chosen.get("bound_ms"):
            row["over_bound"] = round(chosen["step_ms"] / chosen["bound_ms"], 4)
        rows.append(row)
        print(f"{name} --gpu-mem {budget}: planning {row['planning_cpu_s']} s CPU ({row['evaluated']} plans; "
              f"compile {row['compile_cpu_s']} s), chose {row['activations']} / {row['params']} "
              f"{row['step_ms']} ms; fastest uniform that fits {best} {fitting.get(best)} ms "
              f"(x{row.get('over_best_uniform')}); bound {row['bound_ms']} ms (x{row.get('over_bound')})"
              + (f"; error {row['error']}" if row.get("error") else ""), flush=True)
    return rows


def small(a):
    d = os.path.join(a.work, "small")
    os.makedirs(d, exist_ok=True)
    rows = []
    for model_name, L, dm, heads in SMALL:
        model = os.path.join(d, f"{model_name}-{L}-{dm}.onnx")
        if not os.path.exists(model):
            subprocess.run(["/usr/bin/python3", os.path.join(ROOT, "examples/export.py"), "--model", model_name,
                            "--n-layer", str(L), "--d-model", str(dm), "--n-head", str(heads), "--batch", "4",
                            "--seq", "64", "--block-size", "64", "--out", model], check=True, capture_output=True)
        for target in ("cuda", "cpu"):
            common = ["--target", target, "--state", "memory"]
            plan(a.compiler, model, os.path.join(d, "p.txt"), common)  # the keep-all plan, read below
            dev = int(re.search(r"device: (\d+) B", open(os.path.join(d, "p.txt")).read()).group(1))
            _, err, _ = run([a.compiler, model, "--emit=plan", "-o", os.devnull, "--gpu-mem", "1"] + common)
            least = int(re.search(r"least device memory found: (\d+)", err).group(1))
            for frac in (0.2, 0.5, 0.8):
                budget = str(int(least + frac * (dev - least)))
                c = plan(a.compiler, model, os.path.join(d, "c.txt"), common + ["--gpu-mem", budget])
                e = plan(a.compiler, model, os.path.join(d, "e.txt"),
                         common + ["--gpu-mem", budget, "--plan-search", "exhaustive"])
                row = {"config": f"{model_name}-L{L}-d{dm}", "target": target, "frac": frac,
                       "classes_ms": c["step_ms"], "classes_plans": c["evaluated"], "classes_cpu_s": c["cpu_s"],
                       "exhaustive_ms": e["step_ms"], "exhaustive_plans": e["evaluated"],
                       "exhaustive_cpu_s": e["cpu_s"], "ratio": round(c["step_ms"] / e["step_ms"], 4)}
                rows.append(row)
                print(f"{row['config']} {target} budget {frac:.1f}: classes {c['step_ms']} ms ({c['evaluated']} plans, "
                      f"{c['cpu_s']:.2f} s) exhaustive {e['step_ms']} ms ({e['evaluated']} plans, {e['cpu_s']:.1f} s): "
                      f"x{row['ratio']}", flush=True)
    print(f"small: classes within 1% of exhaustive in {sum(r['ratio'] <= 1.01 for r in rows)}/{len(rows)}, "
          f"worst x{max(r['ratio'] for r in rows)}")
    return rows


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--shape", action="append", choices=sorted(SHAPES))
    ap.add_argument("--small", action="store_true")
    ap.add_argument("--profile", default=os.path.join(ROOT, "bench/gpu/results/profile_h100_2026-11-27.json"))
    a = ap.parse_args()
    rows = []
    for name in a.shape or ([] if a.small else SHAPES):
        rows += large(a, name)
    if a.small:
        rows += small(a)
    with open(os.path.join(a.work, "rows.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
