#!/usr/bin/env python3
"""GPU-machine measurements for bench/gpu.sh (issue 5). Subcommands:

  weights CONFIG.json OUT.safetensors   draw a model's initial weights (examples/models.py, seed 1337)
  e2e NAME DIR                          our bf16/fp16/fp32 programs vs PyTorch on the GPU (20 steps),
                                        placement variants, validation and --grad-accum 2
  speed DIR EXE                         tokens/s and TFLOPS, ours vs PyTorch eager + bf16 autocast
  ooc DIR EXE SSD                       out of core: state on SSD, --gpu-mem at the program's minimum
  rows DIR EXE                          the token embedding's update rows first vs whole (EXE against
                                        DIR/train_whole, compiled with --rows-first no, and the rest)

Each prints one summary line starting with the subcommand's name; full logs go to $OUT when set.
"""
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "examples"))
sys.path.insert(0, os.path.join(ROOT, "test", "e2e"))
import torch  # noqa: E402
from models import ModelConfig, build_model  # noqa: E402
import safetensors_io  # noqa: E402
sys.path.insert(0, os.path.join(ROOT, "bench", "overlap"))
import trace_busy  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
TOKENS = os.path.join(ROOT, ".gpu", "tokens.bin")
TOKENS_ZIPF = os.path.join(ROOT, ".gpu", "tokens_zipf.bin")  # zipf_tokens.py: ~3,100 distinct ids in 8,192


def sh(cmd, log=None, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if log:
        with open(os.path.join(OUT, log), "a") as f:
            f.write("$ " + " ".join(cmd) + "\n" + r.stdout + r.stderr + "\n")
    return r


def read_log(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def weights(cfg_path, out):
    with open(cfg_path) as f:
        cfg = ModelConfig.from_dict(json.load(f))
    torch.manual_seed(1337)
    model = build_model(cfg)
    sd = model.state_dict()
    safetensors_io.save(out, {k: v.detach().float().numpy() if v.is_floating_point() else v.numpy()
                              for k, v in sd.items()}, {"producer": "bench/gpu/run.py"})


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def e2e(name, d):
    cfg = json.load(open(os.path.join(d, "model.onnx.json")))
    B, T, steps = cfg["batch"], cfg["seq"], 20
    ok = True
    rows = []
    # fp16: from a loss scale that overflows, against torch rounding its
    # matmul operands to fp16 with GradScaler's rule: the same steps skipped.
    scale = ["--loss-scale-init", str(2 ** 30)]
    for prec, oracle_args, tol in (("bf16", ["--autocast", "bf16"], 2e-2),
                                   ("fp16", ["--operands", "fp16"] + scale, 2e-2), ("fp32", [], 1e-4),
                                   # attention and the loss fused (--fuse all)
                                   ("bf16_fused", ["--autocast", "bf16"], 2e-2), ("fp32_fused", [], 1e-4),
                                   # activations stored in 16 bits (--half-activations yes)
                                   ("bf16_half", ["--autocast", "bf16"], 2e-2),
                                   ("bf16_fused_half", ["--autocast", "bf16"], 2e-2)):
        exe = os.path.join(d, f"train_{prec}")
        ours = os.path.join(OUT, f"{name}_{prec}.jsonl")
        ref = os.path.join(OUT, f"{name}_{prec}_torch.jsonl")
        r = sh([exe, "--data", TOKENS, "--steps", str(steps), "--log-json", ours, "--log-every", "100"]
               + (scale if prec == "fp16" else []), log=f"e2e_{name}.log")
        if r.returncode != 0:
            print(f"e2e {name} {prec}: FAIL: our program exited {r.returncode}: {r.stderr.strip()[-300:]}")
            ok = False
            continue
        early = re.search(r"the embedding's rows early in (\d+ of \d+) steps", r.stderr)
        if prec == "bf16":
            rows.append(f"bf16: a tied table's rows early in {early.group(1) if early else 'no'} steps")
        r = sh([sys.executable, os.path.join(ROOT, "test/e2e/oracle.py"), "--onnx", os.path.join(d, "model.onnx"),
                "--data", TOKENS, "--batch", str(B), "--seq", str(T), "--steps", str(steps), "--out-losses", ref,
                "--device", "cuda"] + oracle_args, log=f"e2e_{name}.log")
        if r.returncode != 0:
            print(f"e2e {name} {prec}: FAIL: oracle exited {r.returncode}: {r.stderr.strip()[-300:]}")
            ok = False
            continue
        a, b = read_log(ours), read_log(ref)
        worst = max(rel(x["loss"], y["loss"]) for x, y in zip(a, b))
        good = len(a) == len(b) == steps and worst <= tol
        skips = ""
        if prec == "fp16":
            sa, sb = [x.get("skipped") for x in a], [y.get("skipped") for y in b]
            good &= sa == sb and any(sa) and not all(sa)
            skips = f", steps skipped {sa.count(True)} (torch {sb.count(True)}{', the same' if sa == sb else ', DIFFERENT'})"
        ok &= good
        rows.append(f"{prec}: worst loss rel err {worst:.2e} (tol {tol:g}), loss {a[0]['loss']:.4f} -> "
                    f"{a[-1]['loss']:.4f} vs torch {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f}{skips}")
    # The same bf16 program placed otherwise: activations in host memory
    # (--activations host), on SSD through it (ssd), computed again (recompute,
    # or only those made without a product: selective);
    # parameters streamed (--params stream); the last three groups' AdamW on
    # the GPU (--device-optimizer 3); a tied table's early rows sent down all
    # at once (--early-chunks all); and a tied table's rows all updated at
    # the step's end (compiled with --early-rows no). Bit-identical losses.
    for variant, what in (("host", "activations on host"), ("ssd", "activations on SSD"),
                          ("recompute", "activations recomputed"),
                          ("selective", "activations made without a product recomputed"),
                          ("stream", "parameters streamed"),
                          ("devopt", "the last three groups' AdamW on the GPU"),
                          ("chunks", "the tied table's early rows down at once"),
                          ("early_no", "the tied table's rows all at the end")):
        log = os.path.join(OUT, f"{name}_bf16_{variant}.jsonl")
        extra, exe = [], os.path.join(d, f"train_bf16_{variant}")
        if variant == "ssd":
            extra = ["--ssd", os.path.join("/tmp", f"fyssd_e2e_{name}")]
            os.makedirs(extra[1], exist_ok=True)
        r = sh([exe, "--data", TOKENS, "--steps", str(steps), "--log-json", log,
                "--log-every", "100"] + extra, log=f"e2e_{name}.log")
        same = r.returncode == 0 and [x["loss"] for x in read_log(log)] == \
            [x["loss"] for x in read_log(os.path.join(OUT, f"{name}_bf16.jsonl"))]
        note = ""
        if variant == "devopt" and same:
            # Its masters and moments come back from the device for a
            # checkpoint: the same bytes as the CPU optimizer's.
            saved = []
            for tag, x in (("base", os.path.join(d, "train_bf16")), ("devopt", exe)):
                ck = os.path.join("/tmp", f"fyck_{name}_{tag}")
                sh(["rm", "-rf", ck])
                sh([x, "--data", TOKENS, "--steps", "5", "--log-every", "100", "--save", ck], log=f"e2e_{name}.log")
                saved.append({f: open(os.path.join(ck, f), "rb").read() for f in sorted(os.listdir(ck))
                              if f != "manifest.json"} if os.path.isdir(ck) else None)
            ck_same = saved[0] is not None and saved[0] == saved[1]
            note = ", checkpoint the same bytes" if ck_same else ", checkpoint DIFFERENT"
            ok &= ck_same
        ok &= same
        rows.append(f"{what}: losses {'bit-identical' if same else 'DIFFER'}{note}"
                    + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.strip()[-200:]})"))
    # The fused program with 16-bit activations (its product copies, its
    # bias sums that make them, its norms' gradients with the residual's)
    # placed otherwise: bit-identical losses to it.
    for variant in ("host", "recompute"):
        log = os.path.join(OUT, f"{name}_bf16_fused_half_{variant}.jsonl")
        r = sh([os.path.join(d, f"train_bf16_fused_half_{variant}"), "--data", TOKENS, "--steps", str(steps),
                "--log-json", log, "--log-every", "100"], log=f"e2e_{name}.log")
        same = r.returncode == 0 and [x["loss"] for x in read_log(log)] == \
            [x["loss"] for x in read_log(os.path.join(OUT, f"{name}_bf16_fused_half.jsonl"))]
        ok &= same
        rows.append(f"bf16_fused_half, activations {variant}: losses {'bit-identical' if same else 'DIFFER'}"
                    + ("" if r.returncode == 0 else f" (exit {r.returncode}: {r.stderr.strip()[-200:]})"))
    ok &= validation(name, d, cfg, rows)
    print(f"e2e {name}: {'PASS' if ok else 'FAIL'}: " + "; ".join(rows))
    return ok


def validation(name, d, cfg, rows):
    """The eval step (--val-data) and gradient accumulation on the GPU: fp32 val_loss and losses with
    --grad-accum 2 against torch's; and on a file of exactly one batch, val_loss after step s is step
    s+1's loss bit for bit (the eval step's forward is the train step's), bf16 and fp32."""
    B, T = cfg["batch"], cfg["seq"]
    with open(TOKENS, "rb") as f:
        raw = f.read()
    one, val = os.path.join(OUT, f"{name}_one.bin"), os.path.join(OUT, f"{name}_val.bin")
    with open(one, "wb") as f:
        f.write(raw[: (B * T + 1) * 2])
    with open(val, "wb") as f:
        f.write(raw[len(raw) * 4 // 5 // 2 * 2:])
    ok = True
    flags = ["--grad-accum", "2", "--val-data", val, "--val-every", "4", "--val-batches", "3"]
    ours, ref = os.path.join(OUT, f"{name}_val.jsonl"), os.path.join(OUT, f"{name}_val_torch.jsonl")
    r = sh([os.path.join(d, "train_fp32"), "--data", TOKENS, "--steps", "12", "--log-json", ours] + flags,
           log=f"e2e_{name}.log")
    q = sh([sys.executable, os.path.join(ROOT, "test/e2e/oracle.py"), "--onnx", os.path.join(d, "model.onnx"),
            "--data", TOKENS, "--batch", str(B), "--seq", str(T), "--steps", "12", "--out-losses", ref,
            "--device", "cuda"] + flags, log=f"e2e_{name}.log")
    if r.returncode or q.returncode:
        rows.append(f"validation: FAIL: exit {r.returncode}/{q.returncode}: {(r.stderr + q.stderr).strip()[-300:]}")
        return False
    a, b = read_log(ours), read_log(ref)
    va, vb = [(x["step"], x["val_loss"]) for x in a if "val_loss" in x], [(x["step"], x["val_loss"]) for x in b if "val_loss" in x]
    worst = max([rel(x["loss"], y["loss"]) for x, y in zip(a, b)] + [rel(x[1], y[1]) for x, y in zip(va, vb)])
    good = len(a) == len(b) == 12 and [s for s, _ in va] == [s for s, _ in vb] == [4, 8, 12] and worst <= 1e-4
    ok &= good
    rows.append(f"fp32 --grad-accum 2 with val_loss at steps {[s for s, _ in va]}: worst rel err to torch "
                f"{worst:.2e}{'' if good else ' FAIL'}")
    for prec, extra in (("bf16", []), ("bf16", ["--grad-accum", "2"]), ("fp32", [])):
        log = os.path.join(OUT, f"{name}_{prec}_one{len(extra)}.jsonl")
        r = sh([os.path.join(d, f"train_{prec}"), "--data", one, "--steps", "6", "--val-data", one,
                "--val-every", "1", "--log-json", log] + extra, log=f"e2e_{name}.log")
        recs = read_log(log) if r.returncode == 0 else []
        pairs = [(x["val_loss"], y["loss"]) for x, y in zip(recs, recs[1:])]
        same = len(pairs) == 5 and all(v == l for v, l in pairs)
        ok &= same
        rows.append(f"{' '.join([prec] + extra)} one batch: val_loss(s) == loss(s+1) "
                    + ("bit for bit" if same else f"FAIL {pairs or r.stderr.strip()[-200:]}"))
    return ok


def flops_per_token(cfg, T):
    L, d, V = cfg["n_layer"], cfg["d_model"], cfg["vocab_size"]
    n = 12 * L * d * d + V * d  # matmul weights (blocks + lm_head)
    return 6 * n + 12 * L * d * T  # + attention scores and values, fwd + bwd


def torch_eager(cfg, B, T, steps=30, compiled=False):
    """Median ms of PyTorch's step (bf16 autocast) after 5, and its peak memory: eager with the
    foreach AdamW, or (compiled) torch.compile's model with the fused AdamW."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.from_dict(cfg)).cuda().train()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=compiled)
    step_model = torch.compile(model) if compiled else model
    g = torch.Generator().manual_seed(0)
    V = cfg["vocab_size"]
    idx = torch.randint(0, V, (B, T), generator=g).cuda()
    tgt = torch.randint(0, V, (B, T), generator=g).cuda()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for s in range(steps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16):
            loss = step_model(idx, tgt)
        loss.backward()
        opt.step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    peak = torch.cuda.max_memory_allocated()
    del model, opt, step_model
    torch.cuda.empty_cache()
    return statistics.median(times[5:]) * 1000.0, peak


def ours_run(exe, steps, extra=(), log="speed.log", data=TOKENS):
    name = os.path.basename(os.path.dirname(exe)) + "_" + os.path.basename(exe)
    path = os.path.join(OUT, name + ".jsonl")
    r = sh([exe, "--data", data, "--steps", str(steps), "--log-json", path, "--log-every", "1000"] + list(extra),
           log=log)
    if r.returncode != 0:
        return None, r.stderr
    ms = [x["ms"] for x in read_log(path)]
    return statistics.median(ms[3:] if len(ms) > 5 else ms), r.stderr


def speed(d, exe):
    cfg = json.load(open(os.path.join(d, "model.json")))
    B, T = map(int, open(os.path.join(d, "shape")).read().split())
    fpt = flops_per_token(cfg, T)
    ours_ms, err = ours_run(exe, 20)
    if ours_ms is None:
        print(f"speed: FAIL: our program: {err.strip()[-400:]}")
        return False
    torch_ms, torch_mem = torch_eager(cfg, B, T)
    tok = B * T
    ours_tps, torch_tps = tok / ours_ms * 1e3, tok / torch_ms * 1e3
    print(f"speed B={B} T={T}: ours {ours_ms:.1f} ms/step {ours_tps:.0f} tok/s {ours_tps * fpt / 1e12:.1f} TFLOPS; "
          f"torch eager bf16 autocast {torch_ms:.1f} ms/step {torch_tps:.0f} tok/s {torch_tps * fpt / 1e12:.1f} TFLOPS "
          f"(peak {torch_mem / 2**30:.1f} GiB); ratio {ours_tps / torch_tps:.3f}")
    print("speed: ours: " + " | ".join(l for l in err.splitlines() if l.startswith("train:")))
    return True


def variants(weights_path, *exes):
    """Step time and least --gpu-mem of programs of one model placed otherwise (same weights), the first
    the all-resident one: each prints 'variant NAME: ms/step, MiB, ratios to the first'."""
    rows = []
    for exe in exes:
        w = exe + ".weights.safetensors"
        if not os.path.exists(w):
            os.symlink(weights_path, w)
        r = sh([exe, "--data", TOKENS, "--steps", "1", "--gpu-mem", "1M"], log="variants.log")
        need = re.search(r"needs at least ([0-9.]+) MiB", r.stderr)
        ms, err = ours_run(exe, 12, log="variants.log")
        if ms is None or not need:
            print(f"variant {os.path.basename(os.path.dirname(exe))}: FAIL: {(err or r.stderr).strip()[-300:]}")
            return False
        name = os.path.basename(os.path.dirname(exe))
        losses = [x["loss"] for x in read_log(os.path.join(OUT, name + "_" + os.path.basename(exe) + ".jsonl"))]
        rows.append((name, ms, float(need.group(1)), losses))
    for name, ms, need, losses in rows:
        same = "bit-identical" if losses == rows[0][3] else f"DIFFER ({losses[:3]} vs {rows[0][3][:3]})"
        print(f"variant {name}: {ms:.1f} ms/step ({ms / rows[0][1]:.3f}x), needs {need:.0f} MiB "
              f"({need / rows[0][2]:.3f}x), {len(losses)} losses {same}")
    return True


class GpuBusy:
    """Samples nvidia-smi's utilisation (share of time a kernel was running) while a run goes."""

    def __init__(self):
        self.samples, self.stop = [], False
        self.t = threading.Thread(target=self.loop, daemon=True)

    def loop(self):
        p = subprocess.Popen(["nvidia-smi", "--query-gpu=utilization.gpu", "--format=csv,noheader,nounits",
                              "-lms", "200"], stdout=subprocess.PIPE, text=True)
        for line in p.stdout:
            if self.stop:
                break
            try:
                self.samples.append(float(line.strip()))
            except ValueError:
                pass
        p.kill()

    def __enter__(self):
        self.t.start()
        return self

    def __exit__(self, *a):
        self.stop = True


def ooc(d, exe, ssd):
    cfg = json.load(open(os.path.join(d, "model.json")))
    B, T = map(int, open(os.path.join(d, "shape")).read().split())
    # The program names the least --gpu-mem it can run in.
    r = sh([exe, "--data", TOKENS, "--steps", "1", "--gpu-mem", "1M"], log="ooc.log")
    m = re.search(r"needs at least ([0-9.]+) MiB", r.stderr)
    streamed = "parameters streamed" in r.stderr
    if not m:
        print(f"ooc: FAIL: no minimum from the program: {r.stderr.strip()[-300:]}")
        return False
    gpu_mem = int(float(m.group(1)) * 1.02 * 2**20)
    os.makedirs(ssd, exist_ok=True)
    steps = 12
    trace = os.path.join(OUT, f"ooc_trace_{os.path.basename(d)}.json")
    with GpuBusy() as busy:
        ms, err = ours_run(exe, steps, ["--gpu-mem", str(gpu_mem), "--ssd", ssd, "--trace", trace], log="ooc.log")
    if ms is None:
        print(f"ooc: FAIL: {err.strip()[-400:]}")
        return False
    params = sum(p.numel() for p in build_model(ModelConfig.from_dict(cfg)).parameters())
    # weights + states: fp32 master, Adam m and v (host/SSD), and the device's
    # resident working copy unless the program streams its parameters
    per_param = 12 if streamed else 16
    total = per_param * params
    tps = B * T / ms * 1e3
    fpt = flops_per_token(cfg, T)
    util = statistics.mean(busy.samples[len(busy.samples) // 4:]) if busy.samples else float("nan")
    print(f"ooc{' (streamed parameters)' if streamed else ''}: {params / 1e6:.0f}M params, "
          f"weights+states ({per_param} B/param) {total / 2**30:.2f} GiB = "
          f"{total / gpu_mem:.2f}x --gpu-mem {gpu_mem / 2**30:.2f} GiB; {ms:.0f} ms/step, {tps:.0f} tok/s, "
          f"{tps * fpt / 1e12:.2f} TFLOPS; GPU busy {util:.0f}% (nvidia-smi)")
    print("ooc: ours: " + " | ".join(l for l in err.splitlines() if l.startswith("train:")))
    return True


def step_start_idle(trace):
    """Median, over the steps after the first, of the time from a step's start
    to its first kernel on the GPU (ms): what the forward waits for."""
    events = json.load(open(trace))["traceEvents"]
    tracks = {e["tid"]: e["args"]["name"] for e in events if e["ph"] == "M"}
    slices = [e for e in events if e["ph"] == "X"]
    steps = sorted((e for e in slices if tracks[e["tid"]] == "steps"), key=lambda e: e["ts"])
    kernels = sorted(e["ts"] for e in slices if tracks[e["tid"]] == "gpu")
    idle = []
    for s in steps[1:]:
        first = next((t for t in kernels if t >= s["ts"]), None)
        if first is not None and first < s["ts"] + s["dur"]:
            idle.append((first - s["ts"]) / 1000.0)
    return statistics.median(idle) if idle else float("nan")


def rows(d, exe):
    """How the next forward waits for the updates: the default (the token
    embedding's rows first, its rows the batch does not read updated during
    backward, then each parameter's update, fy-param-waits) against the
    same model compiled (bench/gpu/prepare.sh, into DIR beside EXE) with all
    of the table's rows updated at the step's end (train_early_no: --early-rows
    no), with the table's whole update (train_whole: --rows-first no) and
    with each group's whole update (train_group_waits: --param-waits no):
    ms/step, interleaved twice, and
    from a trace the GPU's idle time at each step's start and step / busiest
    stream; on the byte tokens (at most 256 distinct rows a batch) and on the
    Zipf ones (about 3,100)."""
    variants = {"default": exe, "table at the end": os.path.join(d, "train_early_no"),
                "whole table": os.path.join(d, "train_whole"), "group waits": os.path.join(d, "train_group_waits")}
    for v, x in variants.items():
        if not os.path.exists(x):
            print(f"rows: FAIL: {v}: no program {x} (bench/gpu/prepare.sh emits its C++, bench/gpu.sh builds it)")
            return False
        if not os.path.lexists(x + ".weights.safetensors"):  # the same weights as EXE's
            os.symlink(os.path.abspath(exe + ".weights.safetensors"), x + ".weights.safetensors")
    for data in (TOKENS, TOKENS_ZIPF):
        if not os.path.exists(data):
            continue
        ms = {v: [] for v in variants}
        for _ in range(2):
            for v, x in variants.items():
                m, err = ours_run(x, 20, log="rows.log", data=data)
                if m is None:
                    print(f"rows: FAIL: {v} {os.path.basename(x)}: {err.strip()[-400:]}")
                    return False
                ms[v].append(m)
        parts = []
        for i, (v, x) in enumerate(variants.items()):
            trace = os.path.join(OUT, f"rows_{i}_{os.path.basename(data)}.trace.json")
            m, _ = ours_run(x, 6, ["--trace", trace], log="rows.log", data=data)
            idle = step_start_idle(trace) if m is not None else float("nan")
            # Issue 4's overlap goal: traced step / the busiest stream's busy time.
            s = trace_busy.summary(trace_busy.per_step(trace, 2)) if m is not None else None
            overlap = f"{s['ratio']:.3f} (step {s['step_ms']:.1f}, {s['largest']} {s['busy_ms'][s['largest']]:.1f})" \
                if s else "no trace"
            parts.append(f"{v}: {' '.join(f'{x:.1f}' for x in ms[v])} ms/step "
                         f"({statistics.median(ms[v]) / statistics.median(ms['default']):.3f} of default), "
                         f"GPU idle at the step's start {idle:.2f} ms, step / busiest stream {overlap}")
        print(f"rows {os.path.basename(data)}: " + "; ".join(parts))
    return True


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    ok = {"weights": lambda: weights(*args) or True, "e2e": lambda: e2e(*args), "speed": lambda: speed(*args),
          "ooc": lambda: ooc(*args), "variants": lambda: variants(*args), "rows": lambda: rows(*args)}[cmd]()
    sys.exit(0 if ok else 1)
