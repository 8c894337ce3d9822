#!/usr/bin/env python3
"""Our fused causal attention against PyTorch's scaled_dot_product_attention, same GPU, same shapes.

  run BIN   (GPU machine): BIN is fuyou-bench-attention-cuda, which times our forward and backward on
            the tensor cores (bf16) and on the CUDA cores (fp32) and prints a JSON line a shape; each
            shape is then timed in PyTorch (bf16, is_causal=True: FlashAttention's kernels on an
            H100/H200), forward and forward + backward. Prints "attention MODEL: ..." lines and
            writes $OUT/attention.json.

Shapes: GPT-2 124M's and GPT-2 XL's heads at B 8 x T 1024 (d 64), and grouped-query heads of d 128 at
T 4096 (Llama-3-8B's: 32 query heads over 8 key/value heads).
"""
import json
import os
import subprocess
import sys


def torch_ms(shape, reps=10):
    import torch
    import torch.nn.functional as F
    B, H, Hkv, T, D = (shape[k] for k in ("B", "H", "Hkv", "T", "D"))
    g = torch.Generator(device="cuda").manual_seed(0)
    mk = lambda h, lo, hi: (lo + (hi - lo) * torch.rand(B, h, T, D, generator=g, device="cuda")).bfloat16()
    q, k, v = mk(H, -2, 2).requires_grad_(), mk(Hkv, -2, 2).requires_grad_(), mk(Hkv, -1, 1).requires_grad_()
    dout = mk(H, -1, 1)
    gqa = {"enable_gqa": True} if H != Hkv else {}

    def timed(fn):
        fn()
        torch.cuda.synchronize()
        ms = []
        for _ in range(reps):
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
            fn()
            e1.record()
            torch.cuda.synchronize()
            ms.append(e0.elapsed_time(e1))
        return sorted(ms)[len(ms) // 2]

    with torch.no_grad():
        fwd = timed(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa))

    def both():
        out = F.scaled_dot_product_attention(q, k, v, is_causal=True, **gqa)
        out.backward(dout)

    return fwd, timed(both) - fwd


def run(binary):
    r = subprocess.run([binary], capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"attention: {binary} failed: {r.stderr.strip()[-800:]}")
    rows = []
    for line in r.stdout.splitlines():
        s = json.loads(line)
        s["torch_fwd_ms"], s["torch_bwd_ms"] = torch_ms(s)
        ours, theirs = s["tc_fwd_ms"] + s["tc_bwd_ms"], s["torch_fwd_ms"] + s["torch_bwd_ms"]
        s["torch_over_ours"] = theirs / ours
        rows.append(s)
        print(f"attention {s['model']} (B {s['B']}, heads {s['H']}/{s['Hkv']}, T {s['T']}, d {s['D']}): "
              f"ours fwd {s['tc_fwd_ms']:.3f} + bwd {s['tc_bwd_ms']:.3f} ms "
              f"({s['fwd_tflops']:.0f}/{s['bwd_tflops']:.0f} TFLOPS, tensor cores: {s['tensor_cores']}), "
              f"CUDA cores {s['cuda_cores_fwd_ms']:.3f} + {s['cuda_cores_bwd_ms']:.3f} ms, "
              f"torch fwd {s['torch_fwd_ms']:.3f} + bwd {s['torch_bwd_ms']:.3f} ms: "
              f"ours x{s['torch_over_ours']:.2f} of torch's speed; "
              f"bf16 vs fp32 kernel rel. diff out {s['rel_diff_out']:.1e}, dq {s['rel_diff_dq']:.1e}, "
              f"dk {s['rel_diff_dk']:.1e}, dv {s['rel_diff_dv']:.1e}", flush=True)
    out = os.environ.get("OUT", "/tmp")
    with open(os.path.join(out, "attention.json"), "w") as f:
        json.dump(rows, f, indent=1)


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "run":
        sys.exit(__doc__)
    run(sys.argv[2])
