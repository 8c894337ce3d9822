#!/usr/bin/env python3
"""The placement planner on the GPU (issue 4): planned here, measured there.

  prepare PROFILE OUTDIR [TRACES]   (development machine: needs fuyou-compile;
                                     PLANNER_CONFIGS="NAME ..." prepares those alone)
      For each config: export the model, find the feasible --gpu-mem range
      (least = the planner's "least device memory found", keep = the keep-all
      plan's device bytes), set the budget inside it, plan with --plan-search
      classes and exhaustive (both --target cuda --state memory --profile
      PROFILE), and write the chosen plan's C++ (train.cpp) and the keep-all
      program's (keep.cpp) with config.json (budget, plans, predictions), and
      the schedule rules run compares, each compiled into a program of its own
      with the chosen plan given explicitly (pins): train_whole.cpp (--rows-first
      no), train_group_waits.cpp (--param-waits no), train_early_no.cpp
      (--early-rows no, where a tied table's rows are early), train_hold_no.cpp
      (--early-hold no, where a table is held) and, where gradients land more
      than one group later, train_landing1.cpp and devopt_landing1.cpp
      (--grad-landing 1).
      With TRACES (an earlier run's $OUT), each config is planned with
      --kernel-times from its traced program there: profile-guided planning.
  run DIR                  (GPU machine, after bench/gpu.sh built the programs)
      For each config: the chosen program under its --gpu-mem and the keep-all
      one, 12 steps each (median after 3), losses compared (placement must not
      change them), then a traced run of the chosen program whose per-track
      busy times give the overlap ratio (step / busiest stream), and one of
      each variant prepare compiled with a schedule rule otherwise
      (train_whole, ...; the same losses), side by side.

  kernel-times RESULTS PROFILE   (development machine, after run)
      RESULTS is the run's $OUT (planner.json and each chosen program's
      trace): each measured plan, and the keep-all one, predicted again with
      --kernel-times from that trace (kernels priced at their measured times,
      the rest of the model unchanged), against the measured steps.
  repredict RESULTS PROFILE      (development machine, after run)
      The same from PROFILE alone (no trace): e.g. the profile bench/gpu.sh
      calibrated on the GPU machine, against the one the plans were made with.

Goals (issue 4): classes/exhaustive predicted <= 1.05; measured/predicted within
+-20%; step <= 1.15 x the busiest stream.
"""
import importlib.util
import json
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# name, model, export flags, budget fraction of the feasible range. Three or
# four layers keep the exhaustive search (4^(layers+3) x 2 plans: keep, host,
# recompute, selective) to minutes (140 s for 4 layers on the 2-core VM).
CONFIGS = [
    ("gpt2-L4-d1024-B8", "gpt2", "--n-layer 4 --d-model 1024 --n-head 16 --batch 8 --seq 1024", 0.5),
    ("gpt2-L3-d1536-B4", "gpt2", "--n-layer 3 --d-model 1536 --n-head 16 --batch 4 --seq 1024", 0.3),
    ("gpt2-L4-d768-B16", "gpt2", "--n-layer 4 --d-model 768 --n-head 12 --batch 16 --seq 512", 0.6),
    ("llama-L4-d1024-B8", "llama", "--n-layer 4 --d-model 1024 --n-head 16 --batch 8 --seq 1024", 0.5),
    ("llama-L3-d2048-B4", "llama", "--n-layer 3 --d-model 2048 --n-head 16 --batch 4 --seq 512", 0.4),
]


def run(cmd, check=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        sys.exit(f"planner: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    return r


def pins(plan_text):
    """The flags that give a --emit=plan answer's chosen plan without a search:
    each segment's activations, the parameters' placement, a tied table's early
    rows (and how their chunks go down) and the gradients' landing distance.
    A schedule rule compiled otherwise (--rows-first no, ...) moves the
    planner's predictions, so under --gpu-mem alone it may choose another plan."""
    m = re.search(r"^planner: \d+ plans evaluated, chose activations (\S+), parameters (\w+)(.*)$", plan_text, re.M)
    if not m:
        sys.exit(f"planner: no chosen plan in: {plan_text[:500]}")
    acts, params, rest = m.groups()
    flags = ["--activations", acts, "--params", params]
    if e := re.search(r"a tied table's rows early: (\w+)", rest):
        flags += ["--early-rows", e.group(1)]
        if e.group(1) == "yes":
            flags += ["--early-chunks", "all" if "down all at once" in rest else "paced"]
    g = re.search(r"gradients freed (\d+) groups later", rest)
    return flags + ["--grad-landing", g.group(1) if g else "1"]


def with_rule(flags, name, value):
    """flags with --NAME VALUE in place of a --NAME in them; a table's update
    whole (--rows-first no) or at the step's end (--early-rows no) has no early
    rows, so those go too."""
    drop = {"--" + name}
    if value == "no" and name in ("rows-first", "early-rows"):
        drop |= {"--early-rows", "--early-chunks"}
    out = []
    for i in range(0, len(flags), 2):
        if flags[i] not in drop:
            out += flags[i:i + 2]
    return out + ["--" + name, value]


def placement(plan_text):
    """Each segment's activations and the parameters' placement as --emit=plan
    prints them, whether the planner chose them or they were given."""
    return (re.findall(r"^segment \d+: (\w+)", plan_text, re.M),
            "streamed" if "parameters: streamed" in plan_text else "resident")


def emit_variants(name, d, flags, prog, variants):
    """prog.cpp's plan given explicitly (pins), compiled once more with each
    variant's rule: d/VARIANT.cpp. Checks that the pinned flags alone give
    prog.cpp's C++ byte for byte, and that each variant's plan places what
    prog.cpp's does (and its landing, but for --grad-landing); warns where not.
    Returns {variant: {"rule": ..., "same_plan": ...}}."""
    plan = run(flags + ["--emit=plan"]).stdout
    pin = pins(plan)
    with open(os.path.join(d, prog + ".cpp")) as f:
        ref = f.read()
    notes = {}
    if run(flags + pin + ["--emit=cpp"]).stdout != ref:
        print(f"planner: {name}: WARNING: {prog}.cpp's plan given explicitly ({' '.join(pin)}) compiles to other "
              f"C++: its variants may differ from it in more than their rule")
    for variant, rule, value in variants:
        vflags = flags + with_rule(pin, rule, value)
        cpp = os.path.join(d, variant + ".cpp")
        with open(cpp, "w") as f:
            f.write(run(vflags + ["--emit=cpp"]).stdout)
        same = placement(run(vflags + ["--emit=plan"]).stdout) == placement(plan)
        if rule != "grad-landing":
            same &= landing(cpp) == landing(os.path.join(d, prog + ".cpp"))
        notes[variant] = {"rule": f"--{rule} {value}", "same_plan": same}
        if not same:
            print(f"planner: {name}: WARNING: {variant}.cpp (--{rule} {value}) has another plan than {prog}.cpp's")
    return notes


def prepare(profile, out, traces=None):
    bench = load("planner_bench", os.path.join(ROOT, "bench", "planner", "run.py"))
    fc = os.path.join(ROOT, "build", "bin", "fuyou-compile")
    only = os.environ.get("PLANNER_CONFIGS", "").split()  # e.g. "llama-L3-d2048-B4": those alone
    for name, model, shape, frac in CONFIGS:
        if only and name not in only:
            continue
        d = os.path.join(out, name)
        os.makedirs(d, exist_ok=True)
        onnx = os.path.join(d, "model.onnx")
        run([PY, os.path.join(ROOT, "examples", "export.py"), "--model", model, "--out", onnx, "--vocab", "50304",
             "--block-size", "1024"] + shape.split())
        base = [fc, onnx, "--target", "cuda", "--state", "memory", "--profile", profile]
        if traces:
            base += ["--kernel-times", os.path.join(traces, f"planner_{name}.trace.json")]
        keep = bench.parse_plan(run(base + ["--emit=plan"]).stdout)
        r = run(base + ["--emit=plan", "--gpu-mem", "1"], check=False)
        m = re.search(r"the least device memory found: (\d+) bytes", r.stderr)
        if not m:
            sys.exit(f"planner: {name}: no least-memory figure in: {r.stderr[-500:]}")
        least = int(m.group(1))
        budget = -(-int(least + frac * (keep["device_bytes"] - least)) // 2**20) * 2**20
        cfg = {"config": name, "model": model, "shape": shape, "profile": os.path.basename(profile),
               "kernel_times": bool(traces),
               "least_device_bytes": least, "keep": keep, "budget_frac": frac, "gpu_mem": budget}
        for search in ("classes", "exhaustive"):
            cfg[search] = bench.parse_plan(
                run(base + ["--emit=plan", "--gpu-mem", str(budget), "--plan-search", search]).stdout)
            cfg[search]["short"] = bench.short(cfg[search])
        cfg["classes_over_exhaustive"] = round(cfg["classes"]["predicted_ms"] / cfg["exhaustive"]["predicted_ms"], 4)
        with open(os.path.join(d, "train.cpp"), "w") as f:
            f.write(run(base + ["--emit=cpp", "--gpu-mem", str(budget)]).stdout)
        with open(os.path.join(d, "keep.cpp"), "w") as f:
            f.write(run(base + ["--emit=cpp"]).stdout)
        # And with the AdamW of the groups at the step's boundary on the GPU
        # (--device-optimizer N): the N of 1-4 the model predicts fastest
        # within the budget.
        for n in (1, 2, 3, 4):
            r = run(base + ["--emit=plan", "--gpu-mem", str(budget), "--device-optimizer", str(n)], check=False)
            if r.returncode == 0 and ("devopt" not in cfg or
                                      bench.parse_plan(r.stdout)["predicted_ms"] < cfg["devopt"]["predicted_ms"]):
                cfg["devopt"] = bench.parse_plan(r.stdout)
                cfg["devopt"]["short"] = bench.short(cfg["devopt"])
                cfg["devopt"]["groups"] = n
        if "devopt" in cfg:
            with open(os.path.join(d, "devopt.cpp"), "w") as f:
                f.write(run(base + ["--emit=cpp", "--gpu-mem", str(budget), "--device-optimizer",
                                    str(cfg["devopt"]["groups"])]).stdout)
        # The schedule rules run compares, each compiled into a program of its
        # own (a program takes none of them) with train.cpp's plan, or
        # devopt.cpp's, given explicitly: the comparison is of the rule alone.
        train_flags = base + ["--gpu-mem", str(budget)]
        with open(os.path.join(d, "train.cpp")) as f:
            held = "early_release" in f.read()
        pin = pins(run(train_flags + ["--emit=plan"]).stdout)
        early = "--early-rows" in pin and pin[pin.index("--early-rows") + 1] == "yes"
        rules = ([("train_whole", "rows-first", "no"), ("train_group_waits", "param-waits", "no")]
                 + ([("train_early_no", "early-rows", "no")] if early else [])
                 + ([("train_hold_no", "early-hold", "no")] if held else [])
                 + ([("train_landing1", "grad-landing", "1")] if landing(os.path.join(d, "train.cpp")) > 1 else []))
        notes = emit_variants(name, d, train_flags, "train", rules)
        if "devopt" in cfg and landing(os.path.join(d, "devopt.cpp")) > 1:
            notes |= emit_variants(name, d, train_flags + ["--device-optimizer", str(cfg["devopt"]["groups"])],
                                   "devopt", [("devopt_landing1", "grad-landing", "1")])
        cfg["variants"] = notes
        print(f"{name}: the plan of train.cpp (devopt.cpp) with one rule otherwise: "
              + ", ".join(f"{v}.cpp ({n['rule']}{'' if n['same_plan'] else ', ANOTHER PLAN'})" for v, n in notes.items()))
        os.replace(onnx + ".json", os.path.join(d, "model.json"))
        os.remove(onnx)
        with open(os.path.join(d, "config.json"), "w") as f:
            json.dump(cfg, f, indent=1)
        if "devopt" in cfg:
            print(f"{name}: --device-optimizer {cfg['devopt']['groups']}: {cfg['devopt']['short']} "
                  f"{cfg['devopt']['predicted_ms']:.2f} ms predicted")
        print(f"{name}: --gpu-mem {budget / 2**20:.0f} MiB ({budget / keep['device_bytes']:.2f} of keep-all); "
              f"classes {cfg['classes']['short']} {cfg['classes']['predicted_ms']:.2f} ms "
              f"({cfg['classes']['plans_evaluated']} plans), exhaustive {cfg['exhaustive']['short']} "
              f"{cfg['exhaustive']['predicted_ms']:.2f} ms ({cfg['exhaustive']['plans_evaluated']} plans): "
              f"{cfg['classes_over_exhaustive']:.3f}")


def measure(exe, tokens, steps, extra, log):
    if os.path.exists(log):
        os.remove(log)
    r = run([exe, "--data", tokens, "--steps", str(steps), "--log-every", "1000", "--log-json", log] + extra,
            check=False)
    if r.returncode != 0:
        return None, None, r.stderr.strip()[-400:]
    rows = [json.loads(line) for line in open(log)]
    return statistics.median(x["ms"] for x in rows[3:]), [x["loss"] for x in rows], r.stderr


def landing(cpp):
    """fy-grad-landed's distance in a program: how many grad_offloads later
    its first grad_landed comes (0: none)."""
    with open(cpp) as f:
        calls = re.findall(r"fy::rt::(grad_offload|grad_landed)\(", f.read())
    return calls.index("grad_landed") - 1 if "grad_landed" in calls else 0


def run_all(top):
    busy = load("trace_busy", os.path.join(ROOT, "bench", "overlap", "trace_busy.py"))
    gpurun = os.path.join(HERE, "run.py")
    out = os.environ.get("OUT", "/tmp")
    # GPT-2-vocabulary ids with BPE-like frequencies: the embedding's rows
    # first part is as large as real text makes it (byte tokens: <= 256 rows).
    tokens = os.path.join(ROOT, ".gpu", "tokens_zipf.bin")
    if not os.path.exists(tokens):
        tokens = os.path.join(ROOT, ".gpu", "tokens.bin")
    print(f"planner: data {os.path.basename(tokens)}")
    results = []
    for name in sorted(os.listdir(top)):
        d = os.path.join(top, name)
        cfg = json.load(open(os.path.join(d, "config.json")))
        w = os.path.join(d, "train.weights.safetensors")
        run(["python3", gpurun, "weights", os.path.join(d, "model.json"), w])
        for prog in ("keep", "devopt"):  # the same weights (a program reads PROGRAM.weights.safetensors)
            if not os.path.lexists(os.path.join(d, prog + ".weights.safetensors")):
                os.symlink(w, os.path.join(d, prog + ".weights.safetensors"))
        common = []  # --state memory: the moments stay in host memory, no --ssd
        ms, losses, err = measure(os.path.join(d, "train"), tokens, 12, common + ["--gpu-mem", str(cfg["gpu_mem"])],
                                  os.path.join(out, f"planner_{name}.jsonl"))
        kms, klosses, kerr = measure(os.path.join(d, "keep"), tokens, 12, common,
                                     os.path.join(out, f"planner_{name}_keep.jsonl"))
        if ms is None or kms is None:
            print(f"planner {name}: FAIL: {err if ms is None else kerr}")
            continue
        trace = os.path.join(out, f"planner_{name}.trace.json")
        tms, _, _ = measure(os.path.join(d, "train"), tokens, 6,
                            common + ["--gpu-mem", str(cfg["gpu_mem"]), "--trace", trace],
                            os.path.join(out, f"planner_{name}_traced.jsonl"))
        s = busy.summary(busy.per_step(trace, 2)) if tms is not None else None
        # The same plan compiled with one schedule rule otherwise (prepare:
        # train_whole.cpp and the rest), traced side by side with the run
        # above; skipped where prepare wrote no such program. The same losses.
        def variant(prog, steps):
            exe = os.path.join(d, prog)
            if not os.path.exists(exe):
                return None, None, None
            if not os.path.lexists(exe + ".weights.safetensors"):
                os.symlink(w, exe + ".weights.safetensors")
            tag = prog[len("train"):] if prog.startswith("train_") else "_" + prog
            trace = os.path.join(out, f"planner_{name}{tag}.trace.json")
            ms, losses, err = measure(exe, tokens, steps, common + ["--gpu-mem", str(cfg["gpu_mem"]), "--trace", trace],
                                      os.path.join(out, f"planner_{name}{tag}.jsonl"))
            if ms is None:
                print(f"planner {name}: {prog}: FAIL: {err}")
                return None, None, None
            return ms, losses, busy.summary(busy.per_step(trace, 2))

        # The embedding's update whole (compiled with --rows-first no: the step waits for all of it).
        wms, _, sw = variant("train_whole", 6)
        # Each group's whole update waited for (compiled with --param-waits no).
        gms, glosses, sg = variant("train_group_waits", 12)
        # The tied table's rows all updated at the step's end (compiled with --early-rows no).
        ems, elosses, se = variant("train_early_no", 12)
        # A held table's rows handed over after its last read instead (compiled
        # with --early-hold no, the hand-over before commit fef2264): the same
        # kernels. Only where train.cpp holds a table.
        hms, hlosses, sh = variant("train_hold_no", 6)
        # Where the program frees a group's gradients later than the next
        # group's grad_offload (fy-grad-landed), the kernels also waiting there
        # (compiled with --grad-landing 1, the rule before).
        lms, llosses, sl = variant("train_landing1", 6)
        # The boundary groups' AdamW on the GPU (bench/gpu/planner.py prepare):
        # the same losses as keep-all, and its own overlap.
        dv = None
        if os.path.exists(os.path.join(d, "devopt")):
            dms, dlosses, derr = measure(os.path.join(d, "devopt"), tokens, 12, common + ["--gpu-mem", str(cfg["gpu_mem"])],
                                         os.path.join(out, f"planner_{name}_devopt.jsonl"))
            dtrace = os.path.join(out, f"planner_{name}_devopt.trace.json")
            tdms, _, _ = measure(os.path.join(d, "devopt"), tokens, 6,
                                 common + ["--gpu-mem", str(cfg["gpu_mem"]), "--trace", dtrace],
                                 os.path.join(out, f"planner_{name}_devopt_traced.jsonl"))
            sd = busy.summary(busy.per_step(dtrace, 2)) if tdms is not None else None
            # ... and with the kernels waiting at the next grad_offload too
            # (devopt_landing1: compiled with --grad-landing 1; 6 steps traced,
            # its losses against the first 6 of the 12 above).
            dlms, dllosses, sdl = variant("devopt_landing1", 6)
            dv = {"groups": cfg["devopt"]["groups"], "plan": cfg["devopt"]["short"],
                  "predicted_ms": cfg["devopt"]["predicted_ms"], "measured_ms": dms, "error": None if dms else derr,
                  "losses_bit_identical_to_keep": dlosses == klosses if dms else False, "overlap": sd,
                  "grad_landing_next_ms": dlms, "overlap_grad_landing_next": sdl,
                  "grad_landing_next_losses_identical": dllosses == dlosses[:len(dllosses)] if dllosses and dms else None}
            if dms:
                print(f"planner {name}: --device-optimizer {dv['groups']}: {dv['plan']} predicted "
                      f"{dv['predicted_ms']:.1f} ms, measured {dms:.1f} -> {dms / dv['predicted_ms']:.3f}; losses "
                      f"{'bit-identical' if dv['losses_bit_identical_to_keep'] else 'DIFFER'} to keep-all; "
                      + (f"traced step {sd['step_ms']:.1f} ms, busiest {sd['largest']} "
                         f"{sd['busy_ms'][sd['largest']]:.1f} ms -> {sd['ratio']:.3f}" if sd else "no trace")
                      + (f" (--grad-landing 1: {dlms:.1f} ms/step, traced step {sdl['step_ms']:.1f} ms -> "
                         f"{sdl['ratio']:.3f}, losses {'identical' if dv['grad_landing_next_losses_identical'] else 'DIFFER'})"
                         if sdl else ""))
            else:
                print(f"planner {name}: --device-optimizer {dv['groups']}: FAIL: {derr}")
        g = cfg["classes"]
        row = {"config": name, "plan": g["short"], "gpu_mem_mib": cfg["gpu_mem"] / 2**20,
               "classes_over_exhaustive": cfg["classes_over_exhaustive"], "predicted_ms": g["predicted_ms"],
               "measured_ms": ms, "measured_over_predicted": ms / g["predicted_ms"],
               "keep_predicted_ms": cfg["keep"]["predicted_ms"], "keep_measured_ms": kms,
               "keep_measured_over_predicted": kms / cfg["keep"]["predicted_ms"],
               "losses_bit_identical_to_keep": losses == klosses, "overlap": s, "overlap_rows_first_no": sw,
               "overlap_param_waits_no": sg, "param_waits_no_losses_identical": glosses == losses if glosses else None,
               "early_rows_no_ms": ems, "overlap_early_rows_no": se,
               "early_rows_no_losses_identical": elosses == losses if elosses else None,
               "early_hold_no_ms": hms, "overlap_early_hold_no": sh,
               "early_hold_no_losses_identical": hlosses == losses[:len(hlosses)] if hlosses else None,
               "grad_landing_next_ms": lms, "overlap_grad_landing_next": sl,
               "grad_landing_next_losses_identical": llosses == losses[:len(llosses)] if llosses else None,
               "device_optimizer": dv}
        results.append(row)
        ov = (f"traced step {s['step_ms']:.1f} ms, busiest {s['largest']} {s['busy_ms'][s['largest']]:.1f} ms "
              f"-> {s['ratio']:.3f}") if s else "no trace"
        if sw:
            ov += f" (--rows-first no: step {sw['step_ms']:.1f} ms -> {sw['ratio']:.3f})"
        if sg:
            ov += (f" (--param-waits no: step {sg['step_ms']:.1f} ms -> {sg['ratio']:.3f}, losses "
                   f"{'identical' if glosses == losses else 'DIFFER'})")
        if se:
            ov += (f" (--early-rows no: {ems:.1f} ms/step, traced step {se['step_ms']:.1f} ms -> {se['ratio']:.3f}, "
                   f"losses {'identical' if elosses == losses else 'DIFFER'})")
        if sh:
            ov += (f" (--early-hold no: {hms:.1f} ms/step, traced step {sh['step_ms']:.1f} ms -> {sh['ratio']:.3f}, losses "
                   f"{'identical' if row['early_hold_no_losses_identical'] else 'DIFFER'})")
        if sl:
            ov += (f" (--grad-landing 1: {lms:.1f} ms/step, traced step {sl['step_ms']:.1f} ms -> {sl['ratio']:.3f}, "
                   f"losses {'identical' if row['grad_landing_next_losses_identical'] else 'DIFFER'})")
        print(f"planner {name}: {g['short']} under {row['gpu_mem_mib']:.0f} MiB, classes/exh "
              f"{row['classes_over_exhaustive']:.3f}; predicted {g['predicted_ms']:.1f} ms, measured {ms:.1f} "
              f"-> {row['measured_over_predicted']:.3f}; keep-all {cfg['keep']['predicted_ms']:.1f} / {kms:.1f} "
              f"-> {row['keep_measured_over_predicted']:.3f}; losses {'bit-identical' if row['losses_bit_identical_to_keep'] else 'DIFFER'}; {ov}")
        if s:
            print(f"planner {name}: busy " + ", ".join(f"{k} {v:.1f}" for k, v in s["busy_ms"].items()))
    with open(os.path.join(out, "planner.json"), "w") as f:
        json.dump(results, f, indent=1)
    mp = [r["measured_over_predicted"] for r in results]
    ov = [r["overlap"]["ratio"] for r in results if r["overlap"]]
    dv = [r["device_optimizer"] for r in results if r["device_optimizer"] and r["device_optimizer"]["overlap"]]
    if dv:
        print(f"planner: with --device-optimizer, step <= 1.15 x busiest stream in "
              f"{sum(x['overlap']['ratio'] <= 1.15 for x in dv)}/{len(dv)}, measured/predicted within +-20% in "
              f"{sum(abs(x['measured_ms'] / x['predicted_ms'] - 1) <= 0.2 for x in dv)}/{len(dv)}, losses "
              f"bit-identical to keep-all in {sum(x['losses_bit_identical_to_keep'] for x in dv)}/{len(dv)}")
    print(f"planner: measured/predicted within +-20% in {sum(abs(x - 1) <= 0.2 for x in mp)}/{len(mp)}; "
          f"classes within 5% of exhaustive in {sum(r['classes_over_exhaustive'] <= 1.05 for r in results)}/"
          f"{len(results)}; step <= 1.15 x busiest stream in {sum(x <= 1.15 for x in ov)}/{len(ov)}")
    return len(results) == len(os.listdir(top))


def kernel_times(results, profile, use_trace=True):
    bench = load("planner_bench", os.path.join(ROOT, "bench", "planner", "run.py"))
    fc = os.path.join(ROOT, "build", "bin", "fuyou-compile")
    measured = {r["config"]: r for r in json.load(open(os.path.join(results, "planner.json")))}
    label = "kernel times" if use_trace else "profile " + os.path.basename(profile)
    ratios = []
    for name, model, shape, _ in CONFIGS:
        if name not in measured:
            continue
        onnx = os.path.join("/tmp", f"fy_planner_{name}.onnx")
        if not os.path.exists(onnx):
            run([PY, os.path.join(ROOT, "examples", "export.py"), "--model", model, "--out", onnx, "--vocab", "50304",
                 "--block-size", "1024"] + shape.split())
        base = [fc, onnx, "--target", "cuda", "--state", "memory", "--profile", profile, "--emit=plan"]
        if use_trace:
            base += ["--kernel-times", os.path.join(results, f"planner_{name}.trace.json")]
        # The plan that was measured (the prepared one may differ once the model changes).
        short, params, *tags = measured[name]["plan"].split("+")
        full = {v: k for k, v in bench.ABBREV.items()}
        g = {"short": measured[name]["plan"], "activations": [full[c] for c in short], "params": params}
        pred = {}
        early = (["--early-rows", "no"] if "late" in tags else []) + (["--early-chunks", "all"] if "all" in tags else [])
        for tag, extra in (("plan", ["--activations", ",".join(g["activations"]), "--params", g["params"]] + early),
                           ("keep", [])):
            pred[tag] = float(re.search(r"predicted step: ([0-9.]+) ms", run(base + extra).stdout).group(1))
        m = measured[name]
        r, k = m["measured_ms"] / pred["plan"], m["keep_measured_ms"] / pred["keep"]
        ratios.append(r)
        print(f"{label} {name}: {g['short']} predicted {pred['plan']:.1f} ms, measured {m['measured_ms']:.1f} "
              f"-> {r:.3f}; keep-all {pred['keep']:.1f} / {m['keep_measured_ms']:.1f} -> {k:.3f}")
    print(f"{label}: measured/predicted within +-20% in {sum(abs(x - 1) <= 0.2 for x in ratios)}/{len(ratios)}")
    return True


def adamw_rate(trace):
    """Params/s of the CPU optimizer's contiguous AdamW slices after the first
    two steps (the rows first ones, gathers of scattered rows, left out)."""
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    tracks = {(e["pid"], e["tid"]): e["args"]["name"] for e in events if e.get("ph") == "M" and "tid" in e}
    slices = [e for e in events if e.get("ph") == "X"]
    steps = sorted(e["ts"] for e in slices if tracks.get((e["pid"], e["tid"])) == "steps")
    params = seconds = 0.0
    for e in slices:
        name = e["name"]
        if (tracks.get((e["pid"], e["tid"])) == "cpu optimizer" and len(steps) > 2 and e["ts"] >= steps[2]
                and (name == "adamw" or name.startswith("adamw, group") or name.startswith("adamw early rows, group"))):
            params += e.get("args", {}).get("bytes", 0) / 16
            seconds += e["dur"] * 1e-6
    return params / seconds if seconds else 0.0


def opt_rate(top, *threads):
    """The CPU AdamW's rate inside the programs at several --optimizer-threads
    (0: every CPU, the default), against the profile's calibrated rate: in
    the H100 run of 2026-11-27 (commit ca5437b) the programs' AdamW ran at
    3.5-4.0 G params/s against 4.70."""
    out = os.environ.get("OUT", "/tmp")
    tokens = os.path.join(ROOT, ".gpu", "tokens_zipf.bin")
    if not os.path.exists(tokens):
        tokens = os.path.join(ROOT, ".gpu", "tokens.bin")
    only = os.environ.get("OPTRATE_CONFIGS", "").split()
    for name in sorted(os.listdir(top)):
        d = os.path.join(top, name)
        if not os.path.exists(os.path.join(d, "train")) or (only and name not in only):
            continue
        cfg = json.load(open(os.path.join(d, "config.json")))
        rates = []
        for t in threads or ("0",):
            trace = os.path.join(out, f"optrate_{name}_t{t}.trace.json")
            ms, _, err = measure(os.path.join(d, "train"), tokens, 6,
                                 ["--gpu-mem", str(cfg["gpu_mem"]), "--trace", trace, "--optimizer-threads", t],
                                 os.path.join(out, f"optrate_{name}_t{t}.jsonl"))
            rates.append(f"threads {t}: " + (f"{ms:.1f} ms/step, AdamW {adamw_rate(trace) / 1e9:.2f} G params/s"
                                             if ms is not None else f"FAIL {err}"))
        print(f"optrate {name}: " + "; ".join(rates))
    return True


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    ok = {"prepare": lambda: prepare(*args) or True, "run": lambda: run_all(*args),
          "optrate": lambda: opt_rate(*args),
          "kernel-times": lambda: kernel_times(*args),
          "repredict": lambda: kernel_times(*args, use_trace=False)}[cmd]()
    sys.exit(0 if ok else 1)
