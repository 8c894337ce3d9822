#!/usr/bin/python3
"""End-to-end oracle test: export with torch, compile with fuyou-compile, train
on the CPU target, and compare every step's loss and the step-1 gradients with
PyTorch training the same module from the same weights on the same batches.

    /usr/bin/python3 test/e2e/e2e.py --compiler build/bin/fuyou-compile --work DIR \
        --model gpt2 [--no-tie] [--gelu erf] [--freeze REGEX]... [--steps 20]
"""
import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"


def run(cmd, **kw):
    print("+", " ".join(cmd), flush=True)
    r = subprocess.run(cmd, **kw)
    if r.returncode != 0:
        sys.exit(f"e2e: FAIL: command exited {r.returncode}: {' '.join(cmd)}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--model", default="gpt2")
    ap.add_argument("--no-tie", action="store_true")
    ap.add_argument("--gelu", default=None)
    ap.add_argument("--freeze", action="append", default=[])
    ap.add_argument("--exporter", choices=["torchscript", "dynamo"], default="torchscript",
                    help="dynamo: torch 2.x's exporter, run by --torch2-python")
    ap.add_argument("--torch2-python", default=os.environ.get("FUYOU_TORCH2_PYTHON"),
                    help="the interpreter of the torch 2.x environment make deps creates")
    ap.add_argument("--torch2", action="store_true",
                    help="export with torch 2.x (--torch2-python) whichever the exporter (dynamo implies it)")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=32)
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--grad-rtol", type=float, default=None, help="step 1's gradients (default: --rtol)")
    ap.add_argument("--clip-norm", default=None)
    ap.add_argument("--bitwise-vs-ssd", action="store_true",
                    help="also train with AdamW's state on SSD (--ssd, two striped dirs): same bits")
    ap.add_argument("--bitwise-vs-loss-scale", action="store_true",
                    help="also build with --loss-scale dynamic (fp32, the scale growing every 3 steps): "
                         "scaling by powers of two changes no bit")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "fp16", "bf16"],
                    help="compile at this precision; the oracle rounds its matmul operands the same way")
    ap.add_argument("--half-activations", default="auto", choices=["auto", "yes", "no"],
                    help="fuyou-compile's --half-activations (auto: 16-bit activations at bf16/fp16)")
    ap.add_argument("--autocast", action="store_true",
                    help="the oracle trains under torch's bf16 autocast on the CPU instead of rounding only "
                         "its matmul operands (for 16-bit activations)")
    ap.add_argument("--loss-scale-init", default=None,
                    help="first loss scale (fp16); steps skipped must be the oracle's, step for step")
    ap.add_argument("--bitwise-vs-placed", action="store_true",
                    help="also build with activations recomputed and weights streamed: same bits")
    ap.add_argument("--bitwise-vs-sync", action="store_true",
                    help="also build with --sync-optimizer: losses and trained weights must match bit for bit")
    ap.add_argument("--bitwise-vs-device-optimizer", action="store_true",
                    help="also build with --device-optimizer 3 (the last three groups inline; on the CPU target "
                         "cpu_adamw): losses and trained weights must match bit for bit")
    ap.add_argument("--bitwise-vs-whole", action="store_true",
                    help="also compile with --rows-first no: same bits; and the main run (traced) must have "
                         "updated the next step's embedding rows first in every step but the last, "
                         "each the rows its forward read")
    ap.add_argument("--bitwise-vs-early", action="store_true",
                    help="also compile with --early-rows no: same bits; and the main run (traced) must have "
                         "updated the tied embedding's rows that each step's batch does not read early "
                         "(during backward) in every step but the first, whose gradients it records")
    ap.add_argument("--bitwise-vs-external", action="store_true",
                    help="also compile the model saved with ONNX external data (as torch.onnx.export writes "
                         "one over 2 GiB), in one file and in a file per tensor: same bits")
    ap.add_argument("--d-model", default=None, help="the exported model's width")
    ap.add_argument("--wide-vocab", type=int, default=None,
                    help="a vocabulary of N > 65536: the corpus's bytes become ids from N-4336 up, "
                         "in an llm.c uint32 token file (Llama 3's layout)")
    ap.add_argument("--roundtrip-onnx", action="store_true",
                    help="write the trained weights back into the ONNX file (examples/onnx_weights.py; also "
                         "into the external-data copy with --bitwise-vs-external): its loss on the next batch, "
                         "evaluated by onnx_eval.py's numpy interpreter, must be the one our program logs there")
    ap.add_argument("--grad-accum", default=None, help="both sides: micro-batches a step")
    ap.add_argument("--weight-decay", default="0.01", help="both sides")
    ap.add_argument("--no-decay", action="append", default=[], help="both sides: --no-decay REGEX")
    ap.add_argument("--decay-1d", default=None, help="both sides: --decay-1d yes|no")
    ap.add_argument("--lr-schedule", default=None, help="both sides: --lr-schedule KIND")
    ap.add_argument("--warmup-steps", default=None)
    ap.add_argument("--lr-decay-steps", default=None)
    ap.add_argument("--min-lr", default=None)
    a = ap.parse_args()

    os.makedirs(a.work, exist_ok=True)
    w = lambda name: os.path.join(a.work, name)
    data = w("tokens.bin")
    if not os.path.exists(data):
        run([PY, os.path.join(ROOT, "examples/prepare_data.py"), "--out", data,
             "--max-bytes", "200000"])

    if a.wide_vocab:
        # Every id past uint16: a program that narrowed them would train on
        # other tokens, or refuse the file.
        import numpy as np
        wide = w("tokens32.bin")
        ids = (a.wide_vocab - 1 - 17 * np.fromfile(data, dtype="<u2").astype(np.uint32)).astype("<u4")
        assert ids.min() > 65535
        header = np.zeros(256, dtype="<i4")
        header[:3] = (20240801, 7, ids.size)
        with open(wide, "wb") as f:
            f.write(header.tobytes() + ids.tobytes())
        data = wide

    export_py = PY
    if a.exporter == "dynamo" or a.torch2:
        export_py = a.torch2_python
        if not export_py or not os.access(export_py, os.X_OK):
            sys.exit(f"e2e: FAIL: no torch 2.x interpreter at {export_py!r} (make deps creates it)")
    export = [export_py, os.path.join(ROOT, "examples/export.py"), "--model", a.model, "--exporter", a.exporter,
              "--out", w("model.onnx"), "--batch", str(a.batch), "--seq", str(a.seq)]
    if a.no_tie:
        export.append("--no-tie")
    if a.gelu:
        export += ["--gelu", a.gelu]
    if a.d_model:
        export += ["--d-model", a.d_model]
    if a.wide_vocab:
        export += ["--vocab", str(a.wide_vocab)]
    run(export, stdout=subprocess.DEVNULL)

    prec = ["--precision", a.precision, "--half-activations", a.half_activations]
    freeze = []
    for f in a.freeze:
        freeze += ["--freeze", f]
    run([a.compiler, w("model.onnx"), "-o", w("train"), *prec] + freeze)

    # The same hyper-parameters on both sides, spelled out (torch's defaults).
    hp = ["--lr", "1e-3", "--beta1", "0.9", "--beta2", "0.999", "--eps", "1e-8",
          "--weight-decay", a.weight_decay]
    for r in a.no_decay:
        hp += ["--no-decay", r]
    if a.clip_norm:
        hp += ["--clip-norm", a.clip_norm]
    for flag in ("grad_accum", "lr_schedule", "warmup_steps", "lr_decay_steps", "min_lr", "decay_1d"):
        if getattr(a, flag) is not None:
            hp += ["--" + flag.replace("_", "-"), getattr(a, flag)]
    scaling = []
    if a.loss_scale_init:
        scaling = ["--loss-scale-init", a.loss_scale_init]
    for f in (w("ours.jsonl"), w("ours_grads.safetensors")):
        if os.path.exists(f):
            os.remove(f)
    trace = ["--trace", w("ours.trace.json")] if a.bitwise_vs_whole or a.bitwise_vs_early else []
    run([w("train"), "--data", data, "--steps", str(a.steps), "--log-json", w("ours.jsonl"),
         "--dump-grads", w("ours_grads.safetensors"), "--log-every", "5", "--save", w("ckpt")] + hp + scaling + trace)
    def same_bits(binary, tag, what, extra=()):
        """Trains again with `binary` and `extra` flags: losses and weights must match bit for bit."""
        run([binary, "--data", data, "--steps", str(a.steps), "--log-json", w(tag + ".jsonl"),
             "--log-every", str(a.steps), "--save", w("ckpt_" + tag)] + list(extra) + hp)
        ours = [json.loads(l)["loss"] for l in open(w("ours.jsonl"))]
        other = [json.loads(l)["loss"] for l in open(w(tag + ".jsonl"))]
        if ours != other:
            sys.exit(f"e2e: FAIL: losses with {what} differ: {ours} vs {other}")
        weights = lambda d: open(os.path.join(d, "model.safetensors"), "rb").read()
        if weights(w("ckpt")) != weights(w("ckpt_" + tag)):
            sys.exit(f"e2e: FAIL: weights trained with {what} differ")
        print(f"e2e: {what}: bit-identical over {a.steps} steps")

    if a.bitwise_vs_loss_scale:
        run([a.compiler, w("model.onnx"), "-o", w("train_scaled"), "--loss-scale", "dynamic"] + freeze)
        same_bits(w("train_scaled"), "scaled", "dynamic loss scaling",
                  ["--loss-scale-init", "1024", "--loss-scale-growth-interval", "3"])
    if a.bitwise_vs_placed:
        run([a.compiler, w("model.onnx"), "-o", w("train_placed"), *prec,
             "--activations", "recompute", "--params", "stream"] + freeze)
        same_bits(w("train_placed"), "placed", "activations recomputed and weights streamed", scaling)
    if a.bitwise_vs_sync:
        run([a.compiler, w("model.onnx"), "-o", w("train_sync"), "--sync-optimizer"] + freeze)
        same_bits(w("train_sync"), "sync", "the synchronous optimizer")
    if a.bitwise_vs_device_optimizer:
        run([a.compiler, w("model.onnx"), "-o", w("train_devopt"), "--device-optimizer", "3"] + freeze)
        same_bits(w("train_devopt"), "devopt", "the last three groups' AdamW inline (--device-optimizer 3)")
    if a.bitwise_vs_whole:
        events = json.load(open(w("ours.trace.json")))["traceEvents"]
        first = sum(1 for e in events if e.get("name", "").startswith("adamw rows first"))
        missed = sum(1 for e in events if "rows first missed" in e.get("name", ""))
        if first != a.steps - 1 or missed:
            sys.exit(f"e2e: FAIL: the embedding's rows went first in {first} updates, not {a.steps - 1}, "
                     f"and {missed} forwards found other rows than those")
        run([a.compiler, w("model.onnx"), "-o", w("train_whole"), *prec, "--rows-first", "no"]
            + freeze)
        same_bits(w("train_whole"), "whole", "the embedding's update done whole (--rows-first no)")
    if a.bitwise_vs_early:
        events = json.load(open(w("ours.trace.json")))["traceEvents"]
        early = sum(1 for e in events if e.get("name", "").startswith("adamw early rows first"))
        if early != a.steps - 1:
            sys.exit(f"e2e: FAIL: the embedding's rows went early in {early} updates, not {a.steps - 1}")
        run([a.compiler, w("model.onnx"), "-o", w("train_not_early"), *prec, "--early-rows", "no"]
            + freeze)
        same_bits(w("train_not_early"), "not_early", "the embedding's rows all updated at the end (--early-rows no)")
    if a.bitwise_vs_external:
        # Every tensor outside the model file; the importer reads the small
        # ones for shape inference and the weights straight into place.
        resave = ("import onnx, sys; m = onnx.load(sys.argv[1]); "
                  "onnx.save_model(m, sys.argv[2], save_as_external_data=True, "
                  "all_tensors_to_one_file=sys.argv[3] == 'one', location='weights.bin', size_threshold=0)")
        for layout in ("one", "each"):
            d = w("external_" + layout)
            subprocess.run(["rm", "-rf", d])
            os.makedirs(d)
            run([PY, "-c", resave, w("model.onnx"), os.path.join(d, "model.onnx"), layout])
            if os.path.getsize(os.path.join(d, "model.onnx")) * 10 > os.path.getsize(w("model.onnx")):
                sys.exit("e2e: FAIL: the external-data model still holds its weights")
            run([a.compiler, os.path.join(d, "model.onnx"), "-o", w("train_external_" + layout),
                 *prec] + freeze)
            same_bits(w("train_external_" + layout), "external_" + layout,
                      f"the weights as ONNX external data ({'one file' if layout == 'one' else 'a file per tensor'})",
                      scaling)
    if a.roundtrip_onnx:
        # The trained model's loss on batch `steps` (from 0) is what the
        # program logs at step steps + 1, whose weights are those trained.
        sys.path.insert(0, HERE)
        import numpy as np
        import oracle
        import onnx
        import onnx_eval
        run([w("train"), "--data", data, "--steps", str(a.steps + 1), "--log-json", w("next.jsonl"),
             "--log-every", "1000"] + hp + scaling)
        ours = [json.loads(l)["loss"] for l in open(w("next.jsonl"))][-1]
        idx, tgt = oracle.Batches(oracle.load_tokens(data), a.batch, a.seq).get(a.steps)
        feed = {"idx": idx.numpy(), "targets": tgt.numpy()}
        sources = [w("model.onnx")] + ([w("external_one/model.onnx")] if a.bitwise_vs_external else [])
        for k, src in enumerate(sources):
            out = w(f"trained{k}.onnx")
            run([PY, os.path.join(ROOT, "examples/onnx_weights.py"), "--onnx", src, "--weights",
                 os.path.join(w("ckpt"), "model.safetensors"), "--out", out])
            (loss,) = onnx_eval.evaluate(onnx.load(out), feed)
            (before,) = onnx_eval.evaluate(onnx.load(src), feed)
            err = abs(float(loss) - ours) / abs(ours)
            if not err <= 1e-4 or abs(float(before) - ours) / abs(ours) <= 1e-3:
                sys.exit(f"e2e: FAIL: {out}: loss {float(loss):.8g} on batch {a.steps}, ours {ours:.8g} "
                         f"(rel {err:.2e}); untrained {float(before):.8g}")
            print(f"e2e: the trained weights in {os.path.basename(out)}: loss {float(loss):.8g} on the next batch, "
                  f"ours {ours:.8g} (rel {err:.1e}; untrained {float(before):.8g})")
    if a.bitwise_vs_ssd:
        dirs = [w("ssd0"), w("ssd1")]
        for d in dirs:
            os.makedirs(d, exist_ok=True)
        same_bits(w("train"), "ssd", "AdamW's state on SSD", ["--ssd", ",".join(dirs)])
    oracle = [PY, os.path.join(HERE, "oracle.py"), "--onnx", w("model.onnx"), "--data", data,
              "--batch", str(a.batch), "--seq", str(a.seq), "--steps", str(a.steps),
              "--out-losses", w("ref.jsonl"), "--out-grads", w("ref_grads.safetensors")] + hp + freeze
    if a.precision != "fp32" and not a.autocast:
        oracle += ["--operands", a.precision]
    if a.loss_scale_init:
        oracle += ["--loss-scale-init", a.loss_scale_init]
    if a.autocast:
        # Autocast's own gradients are off torch fp32's by a few percent, so
        # ours are held to fp32's too, at the tolerance losses have.
        run(oracle + ["--out-losses", w("ref32.jsonl"), "--out-grads", w("ref32_grads.safetensors")])
        run([PY, os.path.join(HERE, "compare.py"), "--quiet", "--ours", w("ours.jsonl"), "--ref", w("ref32.jsonl"),
             "--rtol", str(a.rtol), "--ours-grads", w("ours_grads.safetensors"),
             "--ref-grads", w("ref32_grads.safetensors")])
        oracle += ["--autocast", "bf16"]
    run(oracle)
    compare = [PY, os.path.join(HERE, "compare.py"), "--ours", w("ours.jsonl"), "--ref", w("ref.jsonl"),
               "--rtol", str(a.rtol)]
    if a.loss_scale_init:
        # Step 1 overflows on purpose: its gradients are inf on both sides.
        ours = [json.loads(l)["skipped"] for l in open(w("ours.jsonl"))]
        ref = [json.loads(l)["skipped"] for l in open(w("ref.jsonl"))]
        if ours != ref or not any(ours) or all(ours):
            sys.exit(f"e2e: FAIL: skipped steps differ or show nothing: ours {ours}, torch {ref}")
        print(f"e2e: the same {sum(ours)} steps skipped as torch's: {[i + 1 for i, x in enumerate(ours) if x]}")
    else:
        compare += ["--ours-grads", w("ours_grads.safetensors"), "--ref-grads", w("ref_grads.safetensors")]
        if a.grad_rtol is not None:
            compare += ["--grad-rtol", str(a.grad_rtol)]
    run(compare)
    if a.lr_schedule:
        # Each step's rate, ours against torch's LambdaLR, and a schedule that moves.
        ours = [json.loads(l)["lr"] for l in open(w("ours.jsonl"))]
        ref = [json.loads(l)["lr"] for l in open(w("ref.jsonl"))]
        bad = [(i + 1, o, r) for i, (o, r) in enumerate(zip(ours, ref)) if abs(o - r) > 1e-12 * r]
        if len(ours) != len(ref) or bad or len(set(ours)) < 3:
            sys.exit(f"e2e: FAIL: learning rates differ from torch's or do not change: ours {ours}, torch {ref}")
        print(f"e2e: {a.lr_schedule} rates agree with torch's LambdaLR: {ours[0]:.3g} .. {max(ours):.3g} .. {ours[-1]:.3g}")
    print("e2e: PASS")


if __name__ == "__main__":
    main()
