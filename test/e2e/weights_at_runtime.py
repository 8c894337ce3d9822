#!/usr/bin/env python3
"""The compiler never reads the weights; the program does, when it starts.

A Hugging Face model (tiny Llama with grouped-query heads, and tied GPT-2) exported by
examples/export_hf.py with its weights as ONNX external data is compiled while that file
is absent: --emit=plan and the full compile succeed and write nothing the size of the
weights. The program then trains 10 AdamW steps with its weights from
  (a) the ONNX external data, where the compile found it;
  (b) a single safetensors file written by transformers' save_pretrained;
  (c) a sharded checkpoint written by save_pretrained(max_shard_size=...), by its
      directory and by its model.safetensors.index.json;
and from a copy of the model (--onnx), and as a program copied with its model;
each run's losses bit-identical to the same model exported with its weights inside the
ONNX file, and within 1e-4 of torch; so is the graph exported from the meta device (no
weight made or written) trained from the checkpoint. A bf16 checkpoint becomes the fp32 masters (losses
within 1e-4 of torch trained from the same bf16-rounded weights); a missing file, a
missing or misshaped tensor and a changed model file are each one error line.

    FUYOU_TORCH2/bin/python test/e2e/weights_at_runtime.py --compiler build/bin/fuyou-compile --work DIR
"""
import argparse
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "examples"))
B, T, STEPS, LR = 4, 32, 10, 1e-3


def fail(msg):
    sys.exit("weights_at_runtime: FAIL: " + msg)


def run(cmd, what, expect_ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if expect_ok and r.returncode != 0:
        fail(f"{what}: {r.stderr.strip()[-2000:]}")
    return r


def one_error_line(r, what, must_say):
    lines = r.stderr.strip().splitlines()
    if r.returncode == 0 or len(lines) != 1 or "error:" not in lines[0] or must_say not in lines[0]:
        fail(f"{what}: expected one error line saying '{must_say}', got exit {r.returncode}: {r.stderr.strip()}")
    print(f"weights_at_runtime: {what}: {lines[0]}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--compiler", required=True)
    ap.add_argument("--work", required=True)
    a = ap.parse_args()
    import torch
    import export_hf
    import oracle
    import runs
    from safetensors.torch import load_file as load_file_st

    data = runs.tokens(a.work, 100000)
    w = lambda name: os.path.join(a.work, name)
    batches = oracle.Batches(oracle.load_tokens(data), B, T)
    export = lambda config, out, *extra: run(
        [sys.executable, os.path.join(ROOT, "examples/export_hf.py"), "--config", config, "--out", out,
         "--batch", str(B), "--seq", str(T), *extra], "export " + out)

    def train(program, tag, *extra, steps=STEPS):
        try:
            return runs.program_losses(program, data, steps, LR, w(tag + ".jsonl"), extra)
        except RuntimeError as e:
            fail(f"train {tag}: {e}")

    def torch_losses(model):
        return runs.torch_losses(model, batches, STEPS, LR)

    torch.set_num_threads(1)
    for config in ("llama_gqa", "gpt2"):
        d = w(config)
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)
        p = lambda name: os.path.join(d, name)
        # The same module (seed 0) three ways: ONNX with external data, ONNX
        # with its weights inside, and transformers' own checkpoints.
        export(config, p("ext.onnx"), "--external-data")
        export(config, p("inside.onnx"))
        module = export_hf.load_exported(p("ext.onnx"))
        module.m.save_pretrained(p("single"))
        module.m.save_pretrained(p("sharded"), max_shard_size="40KB")
        shards = [f for f in os.listdir(p("sharded")) if f.endswith(".safetensors")]
        if len(shards) < 3 or not os.path.exists(p("sharded/model.safetensors.index.json")):
            fail(f"{config}: save_pretrained wrote {shards}: not a sharded checkpoint")

        # Compiled while the weights are not there.
        os.rename(p("ext.onnx.data"), p("away.data"))
        run([a.compiler, p("ext.onnx"), "--emit=plan", "-o", p("plan.txt")], "--emit=plan without the weights")
        run([a.compiler, p("ext.onnx"), "-o", p("train")], "compile without the weights")
        limit = max(os.path.getsize(p("train")), os.path.getsize(p("train.cpp")))
        big = [f for f in os.listdir(d) if f.startswith("train") and os.path.getsize(p(f)) > limit]
        if big:
            fail(f"{config}: the compile wrote {big}, larger than the program and its C++")
        one_error_line(run([p("train"), "--data", data, "--steps", "1"], "", expect_ok=False),
                       f"{config}: a run without its external data", "ext.onnx.data")
        os.rename(p("away.data"), p("ext.onnx.data"))

        run([a.compiler, p("inside.onnx"), "-o", p("train_inside")], "compile with the weights inside")
        inside, _ = train(p("train_inside"), config + "_inside")
        sources = {"(a) ONNX external data": train(p("train"), config + "_a"),
                "(b) one safetensors file": train(p("train"), config + "_b", "--weights", p("single")),
                "(c) sharded, by directory": train(p("train"), config + "_c", "--weights", p("sharded")),
                "(c) sharded, by index": train(p("train"), config + "_c2", "--weights",
                                               p("sharded/model.safetensors.index.json"))}
        # The model elsewhere: --onnx names it; a program copied with its model
        # finds it beside itself.
        shutil.rmtree(p("moved"), ignore_errors=True)
        os.makedirs(p("moved"))
        for f in ("ext.onnx", "ext.onnx.data", "train"):
            shutil.copy(p(f), p("moved/" + f))
        sources["--onnx, a copy of the model"] = train(p("train"), config + "_onnx", "--onnx", p("moved/ext.onnx"))
        os.rename(p("ext.onnx.data"), p("away.data"))  # (not read from its old place)
        sources["a program copied with its model"] = train(p("moved/train"), config + "_moved")
        os.rename(p("away.data"), p("ext.onnx.data"))
        for what, (losses, stderr) in sources.items():
            if losses != inside:
                fail(f"{config}: {what}: losses {losses} differ from the weights-inside run's {inside}")
        print(f"weights_at_runtime: {config}: (a), (b), (c), --onnx and a moved program bit-identical to the "
              f"weights inside the ONNX file; "
              f"{sources['(c) sharded, by directory'][1].strip().splitlines()[0]}")
        ref = torch_losses(export_hf.load_exported(p("ext.onnx")))
        worst = max(abs(o - r) / abs(r) for o, r in zip(inside, ref))
        if not worst <= 1e-4:
            fail(f"{config}: losses {inside} against torch's {ref} (worst rel {worst:.2e})")
        print(f"weights_at_runtime: {config}: within {worst:.1e} of torch, {inside[0]:.4f} -> {inside[-1]:.4f}")

        # The graph alone, exported from the meta device (no weight made), trains
        # from the checkpoint the same.
        export(config, p("meta.onnx"), "--meta")
        if os.stat(p("meta.onnx.data")).st_blocks:
            fail(f"{config}: the meta export wrote weights ({os.stat(p('meta.onnx.data')).st_blocks} blocks)")
        run([a.compiler, p("meta.onnx"), "-o", p("train_meta")], "compile the meta export")
        meta, _ = train(p("train_meta"), config + "_meta", "--weights", p("sharded"))
        if meta != inside:
            fail(f"{config}: the meta export trained from the checkpoint: {meta} against {inside}")
        print(f"weights_at_runtime: {config}: exported from the meta device, trained from the sharded checkpoint: "
              "bit-identical")

        # A run from the sharded checkpoint saves under the checkpoint's names:
        # transformers loads them, and a resumed run is bit-identical. The
        # interrupted run saves its weights sharded (--save-shard-size), as
        # Hugging Face's shards with their index.
        for ck in ("ck_full", "ck_half"):
            shutil.rmtree(p(ck), ignore_errors=True)
        full, _ = train(p("train"), config + "_full", "--weights", p("sharded"), "--save", p("ck_full"))
        shard = ("--save-shard-size", "40K")
        train(p("train"), config + "_half", "--weights", p("sharded"), "--save", p("ck_half"), *shard, steps=5)
        half, _ = train(p("train"), config + "_resumed", "--resume", p("ck_half"), "--save", p("ck_half"), *shard)
        shards = sorted(f for f in os.listdir(p("ck_half")) if f.startswith("model"))
        if len(shards) < 3 or shards[-1] != "model.safetensors.index.json" or "model.safetensors" in shards:
            fail(f"{config}: --save-shard-size 40K wrote {shards}: not Hugging Face's shards and index")
        if full != inside or half != full[5:]:
            fail(f"{config}: resumed from a run started from the sharded checkpoint: {half} against {full[5:]}")
        import transformers
        for ck in ("ck_full", "ck_half"):
            shutil.copy(p("sharded/config.json"), p(ck))
            loaded, info = transformers.AutoModelForCausalLM.from_pretrained(p(ck), output_loading_info=True)
            if info["missing_keys"] or info["unexpected_keys"] or info["mismatched_keys"]:
                fail(f"{config}: transformers loading {ck}: {info}")
        saved = load_file_st(os.path.join(p("ck_full"), "model.safetensors"))
        resumed = {k: v for f in shards[:-1] for k, v in load_file_st(os.path.join(p("ck_half"), f)).items()}
        if sorted(saved) != sorted(resumed) or any(not torch.equal(saved[k], resumed[k]) for k in saved):
            fail(f"{config}: the resumed run's saved weights differ from the uninterrupted run's")
        # Its weights are the run's: its loss on the next batch is the program's step 11.
        nxt, _ = train(p("train"), config + "_next", "--weights", p("sharded"), steps=STEPS + 1)
        wrapped = export_hf.WithLoss(loaded.float(), "cross_entropy").eval()
        with torch.no_grad():
            after = wrapped(*batches.get(STEPS)).item()
        if abs(after - nxt[-1]) / abs(nxt[-1]) > 1e-4:
            fail(f"{config}: transformers' loss under the saved weights {after} against the program's {nxt[-1]}")
        print(f"weights_at_runtime: {config}: --save under the checkpoint's names, whole and in {len(shards) - 1} "
              f"shards: transformers loads both (loss {after:.6f} on the next batch, ours {nxt[-1]:.6f}); "
              "resumed run bit-identical")

        # bf16, as checkpoints ship: widened to the fp32 masters.
        bf16 = export_hf.load_exported(p("ext.onnx"))
        bf16.m.to(torch.bfloat16).save_pretrained(p("bf16"))
        ours, _ = train(p("train"), config + "_bf16", "--weights", p("bf16"))
        rounded = export_hf.load_exported(p("ext.onnx"))
        with torch.no_grad():
            for t in rounded.parameters():
                t.copy_(t.to(torch.bfloat16).float())
        ref = torch_losses(rounded)
        worst = max(abs(o - r) / abs(r) for o, r in zip(ours, ref))
        if not worst <= 1e-4 or ours == inside:
            fail(f"{config}: bf16 checkpoint: losses {ours} against torch's {ref} (worst rel {worst:.2e})")
        print(f"weights_at_runtime: {config}: a bf16 checkpoint trains within {worst:.1e} of torch from the same weights")

    # One line each for what a user gets wrong (on the last model).
    os.remove(os.path.join(p("single"), "model.safetensors"))
    one_error_line(run([p("train"), "--data", data, "--steps", "1", "--weights", p("single")], "", False),
                   "a checkpoint directory without weights", "neither")
    from safetensors.torch import load_file, save_file
    tensors = load_file(os.path.join(p("bf16"), "model.safetensors"))
    name = sorted(tensors)[0]
    broken = dict(tensors)
    del broken[name]
    save_file(broken, p("missing.safetensors"))
    one_error_line(run([p("train"), "--data", data, "--steps", "1", "--weights", p("missing.safetensors")], "", False),
                   "a missing tensor", "no tensor for parameter")
    broken = dict(tensors)
    broken[name] = broken[name][..., :1].contiguous()
    save_file(broken, p("shape.safetensors"))
    one_error_line(run([p("train"), "--data", data, "--steps", "1", "--weights", p("shape.safetensors")], "", False),
                   "a misshaped tensor", name)
    broken = dict(tensors)
    broken["extra.weight"] = torch.zeros(3)
    save_file(broken, p("extra.safetensors"))
    one_error_line(run([p("train"), "--data", data, "--steps", "1", "--weights", p("extra.safetensors")], "", False),
                   "an extra tensor", "extra.weight")
    export(config, p("ext.onnx"), "--external-data")  # a new export over the compiled one
    with open(p("ext.onnx"), "ab") as f:
        f.write(b"\0")
    one_error_line(run([p("train"), "--data", data, "--steps", "1"], "", False),
                   "a model file changed since the compile", "changed since the compile")
    print("weights_at_runtime: PASS")


if __name__ == "__main__":
    main()
