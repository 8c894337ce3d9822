// fuyou-bench-attention-cuda: fused causal attention's forward and backward
// at the shapes of the models we train, timed on the tensor cores (bf16
// operands, as --half-activations stores them) and on the CUDA cores (fp32
// operands at fp32 products), side by side in one process, with the
// relative difference of the two outputs. One line of JSON a shape, which
// bench/gpu/attention.py sets beside PyTorch's scaled_dot_product_attention.
//
// usage: fuyou-bench-attention-cuda [--reps N]   (on a GPU machine)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/half.h"
#include "core/tensor.h"
#include "kernels/cuda/bench_common.h"
#include "kernels/cuda/kernels.h"

namespace {

using fy::bench::check;

// A device buffer of shape s and dtype dt holding a fixed pseudo-random
// pattern in [lo, hi), and the same values as fp32 in `f32` when given.
fy::View device_random(fy::Shape s, fy::DType dt, uint32_t seed, float lo, float hi, fy::View* f32 = nullptr) {
  std::vector<float> host(size_t(s.numel()));
  for (float& x : host) {
    seed = seed * 1664525u + 1013904223u;
    x = lo + (hi - lo) * float(seed >> 8) / float(1 << 24);
  }
  fy::View v{nullptr, s, dt};
  check(cudaMalloc(&v.data, std::max<size_t>(v.nbytes(), 1)), "cudaMalloc");
  if (dt == fy::DType::BF16) {
    std::vector<uint16_t> h(host.size());
    for (size_t i = 0; i < h.size(); ++i) {
      h[i] = fy::bf16_bits(host[i]);
      host[i] = fy::bf16_value(h[i]);  // the fp32 copy holds the rounded values
    }
    check(cudaMemcpy(v.data, h.data(), v.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  } else {
    check(cudaMemcpy(v.data, host.data(), v.nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  if (f32) {
    *f32 = fy::View{nullptr, s, fy::DType::F32};
    check(cudaMalloc(&f32->data, std::max<size_t>(f32->nbytes(), 1)), "cudaMalloc");
    check(cudaMemcpy(f32->data, host.data(), f32->nbytes(), cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  return v;
}

fy::View device_empty(fy::Shape s, fy::DType dt) {
  fy::View v{nullptr, s, dt};
  check(cudaMalloc(&v.data, std::max<size_t>(v.nbytes(), 1)), "cudaMalloc");
  return v;
}

std::vector<float> to_host_f32(const fy::View& v) {
  std::vector<float> h(size_t(v.numel()));
  if (v.dtype == fy::DType::F32) {
    check(cudaMemcpy(h.data(), v.data, v.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
    return h;
  }
  std::vector<uint16_t> b(h.size());
  check(cudaMemcpy(b.data(), v.data, v.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  for (size_t i = 0; i < h.size(); ++i) h[i] = fy::bf16_value(b[i]);
  return h;
}

double rel_diff(const fy::View& a, const fy::View& b) {
  const std::vector<float> x = to_host_f32(a), y = to_host_f32(b);
  double num = 0, den = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    num += double(x[i] - y[i]) * double(x[i] - y[i]);
    den += double(y[i]) * double(y[i]);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct Shape4 {
  const char* model;
  int64_t B, H, Hkv, T, D;
};

int run(int reps) {
  using fy::DType;
  // [B, T, heads, D] (seq_major), as the compiler lays out a Linear's q, k, v.
  for (const Shape4& s : {Shape4{"gpt124", 8, 12, 12, 1024, 64}, Shape4{"xl", 8, 25, 25, 1024, 64},
                          Shape4{"llama-gqa-d128", 2, 32, 8, 4096, 128}}) {
    const fy::Shape qs{s.B, s.T, s.H, s.D}, ks{s.B, s.T, s.Hkv, s.D}, ls{s.B, s.H, s.T};
    fy::View qf, kf, vf, dof;
    fy::View q = device_random(qs, DType::BF16, 1, -2, 2, &qf), k = device_random(ks, DType::BF16, 2, -2, 2, &kf),
             v = device_random(ks, DType::BF16, 3, -1, 1, &vf), dout = device_random(qs, DType::BF16, 4, -1, 1, &dof);
    fy::View out = device_empty(qs, DType::BF16), dq = device_empty(qs, DType::BF16), dk = device_empty(ks, DType::BF16),
             dv = device_empty(ks, DType::BF16), lse = device_empty(ls, DType::F32);
    fy::View outf = device_empty(qs, DType::F32), dqf = device_empty(qs, DType::F32), dkf = device_empty(ks, DType::F32),
             dvf = device_empty(ks, DType::F32), lsef = device_empty(ls, DType::F32);
    const double scale = 1.0 / std::sqrt(double(s.D));
    // The products' flops over the scores a row sees: 2 forward, 5 backward
    // (the cost model's measure), and the usual 2 + 2.5 x 2 that
    // FlashAttention's figures count.
    const double pairs = double(s.B) * double(s.H) * double(s.T) * double(s.T + 1) / 2;
    const double fwd_flops = 2 * 2 * pairs * double(s.D);

    fy::cuda::set_matmul_precision(fy::cuda::MatmulPrecision::BF16);
    const size_t calls = fy::cuda::attention_tensor_core_calls();
    const double tc_fwd = fy::bench::median_ms([&] { fy::cuda::attention(q, k, v, out, lse, scale, 0, true); }, reps);
    const double tc_bwd =
        fy::bench::median_ms([&] { fy::cuda::attention_grad(q, k, v, out, lse, dout, dq, dk, dv, scale, 0, true); }, reps);
    const bool on_tc = fy::cuda::attention_tensor_core_calls() - calls == size_t(2 * (reps + 1));
    fy::cuda::set_matmul_precision(fy::cuda::MatmulPrecision::FP32);
    const double cc_fwd = fy::bench::median_ms([&] { fy::cuda::attention(qf, kf, vf, outf, lsef, scale, 0, true); }, reps);
    const double cc_bwd = fy::bench::median_ms(
        [&] { fy::cuda::attention_grad(qf, kf, vf, outf, lsef, dof, dqf, dkf, dvf, scale, 0, true); }, reps);
    std::printf(
        "{\"model\": \"%s\", \"B\": %lld, \"H\": %lld, \"Hkv\": %lld, \"T\": %lld, \"D\": %lld, \"tensor_cores\": %s, "
        "\"tc_fwd_ms\": %.4f, \"tc_bwd_ms\": %.4f, \"cuda_cores_fwd_ms\": %.4f, \"cuda_cores_bwd_ms\": %.4f, "
        "\"fwd_tflops\": %.2f, \"bwd_tflops\": %.2f, \"rel_diff_out\": %.3e, \"rel_diff_dq\": %.3e, "
        "\"rel_diff_dk\": %.3e, \"rel_diff_dv\": %.3e}\n",
        s.model, (long long)s.B, (long long)s.H, (long long)s.Hkv, (long long)s.T, (long long)s.D,
        on_tc ? "true" : "false", tc_fwd, tc_bwd, cc_fwd, cc_bwd, fwd_flops / (tc_fwd * 1e9),
        2.5 * fwd_flops / (tc_bwd * 1e9), rel_diff(out, outf), rel_diff(dq, dqf), rel_diff(dk, dkf), rel_diff(dv, dvf));
    std::fflush(stdout);
    for (fy::View x : {q, k, v, dout, qf, kf, vf, dof, out, dq, dk, dv, lse, outf, dqf, dkf, dvf, lsef})
      cudaFree(x.data);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return fy::bench::bench_main("fuyou-bench-attention-cuda", argc, argv, 10, run);
}
