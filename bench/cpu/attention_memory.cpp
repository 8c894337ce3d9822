// The CPU attention at GPT-2 124M's heads, B 8, T 1024 (12 heads of 64, packed qkv), bf16
// operands: forward and backward, best of 3; run under /usr/bin/time -f %M for its peak memory.
// Build: g++ -std=c++17 -O2 -fopenmp -I runtime bench/cpu/attention_memory.cpp build/lib/libfuyou_rt.a \
//   -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas -luring -lpthread -o attention_memory
#include <chrono>
#include <cstdio>
#include <vector>
#include "kernels/cpu/kernels.h"
using namespace fy;
int main() {
  cpu::set_matmul_operands(cpu::MatmulOperands::BF16);
  const int64_t B = 8, T = 1024, H = 12, D = 64, Hrow = 3 * H;
  std::vector<float> qkv(size_t(B * T * Hrow * D), 0.01f), out(size_t(B * T * H * D)), lse(size_t(B * H * T)),
      dout(out.size(), 0.02f), dqkv(qkv.size());
  for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  View P{qkv.data(), Shape{B, T, Hrow, D}, DType::F32}, O{out.data(), Shape{B, T, H, D}, DType::F32},
      L{lse.data(), Shape{B, H, T}, DType::F32};
  double best = 1e9;
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    cpu::attention_qkv(P, O, L, H, 0.125, 0);
    cpu::attention_qkv_grad(P, O, L, View{dout.data(), O.shape, DType::F32}, View{dqkv.data(), P.shape, DType::F32}, H,
                            0.125, 0);
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  std::printf("forward + backward: best of 3 %.3f s\n", best);
}
