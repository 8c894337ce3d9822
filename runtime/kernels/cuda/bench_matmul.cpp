// fuyou-bench-matmul-cuda: the tied logits' products of GPT-2 sized models at
// bf16, their gradient ones too large for the 16-bit scratch, timed both ways
// the runtime can run those (fy::cuda::set_matmul_blocks): in blocks on
// 16-bit copies, or on fp32 operands at FAST_16BF. Side by side in one
// process; the forward product, which fits, is the reference rate. (The
// input gradient's, whose table copy leaves no room for row blocks, runs on
// fp32 operands both ways since blocks of K lost to them on the H100 run of
// 2026-11-27, commit ca5437b.)
//
// usage: fuyou-bench-matmul-cuda [--reps N]   (on a GPU machine)
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/bench_common.h"
#include "kernels/cuda/kernels.h"

namespace {

using fy::bench::check;

// Median milliseconds of one product.
double time_ms(const fy::View& a, const fy::View& b, const fy::View& c, bool ta, bool tb, int reps) {
  return fy::bench::median_ms([&] { fy::cuda::matmul(a, b, c, ta, tb); }, reps);
}

// Device memory of `s`, filled with a fixed pseudo-random pattern in [-1, 1).
fy::View device_random(fy::Shape s, uint32_t seed) {
  fy::View v;
  v.shape = s;
  check(cudaMalloc(&v.data, v.nbytes()), "cudaMalloc");
  const size_t chunk = size_t(16) << 20;  // floats
  std::vector<float> host(std::min<size_t>(chunk, size_t(v.numel())));
  for (float& x : host) {
    seed = seed * 1664525u + 1013904223u;
    x = float(seed >> 8) / float(1 << 23) - 1.f;
  }
  for (size_t off = 0; off < size_t(v.numel()); off += host.size()) {
    const size_t n = std::min(host.size(), size_t(v.numel()) - off);
    check(cudaMemcpy(static_cast<float*>(v.data) + off, host.data(), n * 4, cudaMemcpyHostToDevice), "cudaMemcpy");
  }
  return v;
}

std::vector<float> to_host(const fy::View& v) {
  std::vector<float> h(size_t(v.numel()));
  check(cudaMemcpy(h.data(), v.data, v.nbytes(), cudaMemcpyDeviceToHost), "cudaMemcpy");
  return h;
}

int run(int reps) {
  fy::cuda::set_matmul_precision(fy::cuda::MatmulPrecision::BF16);
  const int64_t tokens = 8192, vocab = 50304;
  std::printf("%-34s %9s %9s %9s %8s %10s\n", "product (bf16)", "TFLOP", "blocks ms", "fp32-op ms", "ratio",
              "rel. diff");
  for (int64_t d : {768, 1024}) {
    fy::View x = device_random(fy::Shape{tokens, d}, 1), w = device_random(fy::Shape{vocab, d}, 2);
    fy::View g = device_random(fy::Shape{tokens, vocab}, 3);
    fy::View logits = device_random(fy::Shape{tokens, vocab}, 4), dx = device_random(fy::Shape{tokens, d}, 5),
             dw = device_random(fy::Shape{vocab, d}, 6);
    struct Case {
      std::string name;
      fy::View a, b, c;
      bool ta, tb;
    } cases[] = {{"logits = x W^T, d " + std::to_string(d), x, w, logits, false, true},
                 {"dx = dlogits W, d " + std::to_string(d), g, w, dx, false, false},
                 {"dW = dlogits^T x, d " + std::to_string(d), g, x, dw, true, false}};
    for (const Case& k : cases) {
      const double tflop = 2.0 * double(tokens) * double(vocab) * double(d) * 1e-12;
      fy::cuda::set_matmul_blocks(true);
      const double on = time_ms(k.a, k.b, k.c, k.ta, k.tb, reps);
      const std::vector<float> ref = to_host(k.c);
      fy::cuda::set_matmul_blocks(false);
      const double off = time_ms(k.a, k.b, k.c, k.ta, k.tb, reps);
      const std::vector<float> alt = to_host(k.c);
      double num = 0, den = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        num += double(ref[i] - alt[i]) * double(ref[i] - alt[i]);
        den += double(ref[i]) * double(ref[i]);
      }
      std::printf("%-34s %9.3f %9.3f %9.3f %8.3f %10.2e\n", k.name.c_str(), tflop, on, off, off / on,
                  std::sqrt(num / std::max(den, 1e-30)));
    }
    for (fy::View v : {x, w, g, logits, dx, dw}) cudaFree(v.data);
  }
  fy::cuda::set_matmul_blocks(true);
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return fy::bench::bench_main("fuyou-bench-matmul-cuda", argc, argv, 20, run); }
