#!/usr/bin/python3
"""A compile-time choice of how the next forward waits for the updates, against
its "no", side by side: --flag param-waits (fy-param-waits: the next forward
waits for each parameter's update before its first read, not for each layer
group's whole update) or --flag early-rows (fy-early-offload: a tied
embedding's rows that the step's batch does not read are updated during
backward, not all at the step's end).

The model is compiled with the flag's default (yes) and with no
(fuyou-compile --param-waits no, --early-rows no); the two programs run
interleaved, `--rounds` times each; then once each with --trace, from which
it reads, per step after the warm-up, the time the compute thread waited for
updates (its slices named "wait for parameter", "wait for group" and "wait
for rows") and the overlap ratio (step / busiest stream, trace_busy.py). The
AdamW state stays in memory. Losses must be identical between the two (the
same updates, only done or waited for at other times).

  bench/overlap/param_waits.py [--flag param-waits|early-rows] [--build build] [--work /tmp/fy_bench_pw]
                               [--steps 12] [--warmup 3] [--rounds 2] [--only MODEL]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
import trace_busy  # noqa: E402

PY = "/usr/bin/python3"

# Per flag, models: export flags, run flags, token file. For param-waits byte
# tokens (vocab 256), so that the blocks, not a 50k-row table, carry the
# optimizer's work: one heavy on the CPU optimizer (one thread, 28M
# parameters at 16 tokens a step), one on compute. For early-rows a tied
# table of GPT-2's 50,304 rows on Zipf-drawn ids (bench/gpu/zipf_tokens.py,
# BPE text's spread of rows): one where the table's update is the optimizer's
# bulk (one thread, 8 tokens a step), one on compute.
MODELS = {
    "param-waits": {
        "optimizer-heavy": ("--model gpt2 --batch 1 --seq 16 --n-layer 4 --d-model 768 --n-head 12 --block-size 16",
                            ["--optimizer-threads", "1"], "tokens.bin"),
        "compute-bound": ("--model gpt2 --batch 4 --seq 128 --n-layer 4 --d-model 256 --n-head 4 --block-size 128",
                          [], "tokens.bin"),
    },
    "early-rows": {
        "table-heavy": ("--model gpt2 --tie --vocab 50304 --batch 1 --seq 8 --n-layer 4 --d-model 256 --n-head 4 "
                        "--block-size 8", ["--optimizer-threads", "1"], "zipf.bin"),
        "compute-bound": ("--model gpt2 --tie --vocab 50304 --batch 4 --seq 128 --n-layer 2 --d-model 256 --n-head 4 "
                          "--block-size 128", [], "zipf.bin"),
    },
}
WAITS = ("wait for parameter", "wait for group", "wait for rows")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"wait bench: {' '.join(cmd)} failed:\n{r.stderr[-1500:]}")
    return r


def update_waits_ms(trace, warmup):
    """Median over the steps after `warmup` of the compute thread's waits for updates (ms)."""
    events = json.load(open(trace))["traceEvents"]
    names = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    slices = [e for e in events if e["ph"] == "X"]
    steps = sorted((e["ts"], e["ts"] + e["dur"]) for e in slices if names[e["tid"]] == "steps")
    waits = [(e["ts"], e["ts"] + e["dur"]) for e in slices
             if names[e["tid"]] == "compute" and e["name"].startswith(WAITS)]
    per_step = [sum(min(e, hi) - max(s, lo) for s, e in waits if e > lo and s < hi) / 1000 for lo, hi in steps[warmup:]]
    return statistics.median(per_step)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--flag", default="param-waits", choices=sorted(MODELS))
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/fy_bench_pw")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--only", help="one model of the flag's: " + "; ".join(
        f"{f}: {', '.join(m)}" for f, m in MODELS.items()))
    a = ap.parse_args()
    flag_name = "--" + a.flag
    fc = os.path.join(a.build, "bin", "fuyou-compile")
    w = lambda *p: os.path.join(a.work, *p)  # noqa: E731
    os.makedirs(a.work, exist_ok=True)
    run([PY, os.path.join(ROOT, "examples", "prepare_data.py"), "--out", w("tokens.bin"), "--max-bytes", "200000"])
    run([PY, os.path.join(ROOT, "bench", "gpu", "zipf_tokens.py"), w("zipf.bin"), "400000"])
    for model, (shape, flags, tokens) in MODELS[a.flag].items():
        if a.only and model != a.only:
            continue
        onnx = w(f"{a.flag}_{model}.onnx")
        run([PY, os.path.join(ROOT, "examples", "export.py"), "--out", onnx] + shape.split())
        # The rule is the compile's: a program for each value.
        exe = {}
        for flag in ("yes", "no"):
            exe[flag] = w(f"{a.flag}_{model}_{flag}")
            run([fc, onnx, "-o", exe[flag], flag_name, flag])
        common = lambda flag: [exe[flag], "--data", w(tokens), "--steps", str(a.steps),  # noqa: E731
                               "--log-every", "1000"] + flags
        ms = {"yes": [], "no": []}
        losses = {}
        for _ in range(a.rounds):
            for flag in ("yes", "no"):
                log = w(f"{a.flag}_{model}_{flag}.jsonl")
                if os.path.exists(log):
                    os.remove(log)
                run(common(flag) + ["--log-json", log])
                rows = [json.loads(line) for line in open(log)]
                ms[flag].append(statistics.median(r["ms"] for r in rows[a.warmup:]))
                losses.setdefault(flag, [r["loss"] for r in rows])
        parts = []
        for flag in ("yes", "no"):
            trace = w(f"{a.flag}_{model}_{flag}.trace.json")
            run(common(flag) + ["--trace", trace])
            s = trace_busy.summary(trace_busy.per_step(trace, a.warmup))
            parts.append(f"{flag_name} {flag}: {' '.join(f'{x:.1f}' for x in ms[flag])} ms/step, waits for "
                         f"updates {update_waits_ms(trace, a.warmup):.1f} ms/step, traced step {s['step_ms']:.1f} "
                         f"/ {s['largest']} {s['busy_ms'][s['largest']]:.1f} = {s['ratio']:.3f} (busy: "
                         + ", ".join(f"{k} {v:.1f}" for k, v in s["busy_ms"].items()) + ")")
        same = "identical" if losses["yes"] == losses["no"] else "DIFFER"
        ratio = statistics.median(ms["no"]) / statistics.median(ms["yes"])
        print(f"{model}: " + "; ".join(parts) + f"; no / yes {ratio:.3f}; losses {same}", flush=True)
        if same != "identical":
            sys.exit(f"wait bench: {model}: losses differ: {losses['yes']} against {losses['no']}")


if __name__ == "__main__":
    main()
