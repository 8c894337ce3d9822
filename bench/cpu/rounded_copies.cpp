// The CPU kernels whose products round their operands at bf16, at GPT-2 124M's sizes: the fused
// attention (B 8, T 1024, 12 heads of 64, packed qkv; forward and backward) or the loss of the
// logits (1024 rows of d 768 against the 50,257-row head, with its gradients). Best of 3; run under
// /usr/bin/time -f %M for the peak memory, whose excess over the program's own buffers is the
// kernel's scratch (attention's buffers ~200 MB; the loss's ~440 MB: w, dw and its block of logits).
// Build (one line): g++ -std=c++17 -O2 -fopenmp -I runtime bench/cpu/rounded_copies.cpp build/lib/libfuyou_rt.a
//   -L/usr/lib/x86_64-linux-gnu/openblas-pthread -lopenblas -luring -lpthread -o rounded_copies
// Run:   ./rounded_copies attention | loss
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <functional>
#include <vector>
#include "kernels/cpu/kernels.h"
using namespace fy;

static double best_of_3(const std::function<void()>& f) {
  double best = 1e9;
  for (int r = 0; r < 3; ++r) {
    auto t0 = std::chrono::steady_clock::now();
    f();
    best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

int main(int argc, char** argv) {
  const bool loss = argc > 1 && std::strcmp(argv[1], "loss") == 0;
  cpu::set_matmul_operands(cpu::MatmulOperands::BF16);
  if (!loss) {
    const int64_t B = 8, T = 1024, H = 12, D = 64, Hrow = 3 * H;
    std::vector<float> qkv(size_t(B * T * Hrow * D)), out(size_t(B * T * H * D)), lse(size_t(B * H * T)),
        dout(out.size(), 0.02f), dqkv(qkv.size());
    for (size_t i = 0; i < qkv.size(); ++i) qkv[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    View P{qkv.data(), Shape{B, T, Hrow, D}, DType::F32}, O{out.data(), Shape{B, T, H, D}, DType::F32},
        L{lse.data(), Shape{B, H, T}, DType::F32};
    std::printf("attention forward + backward: best of 3 %.3f s\n", best_of_3([&] {
                  cpu::attention_qkv(P, O, L, H, 0.125, 0);
                  cpu::attention_qkv_grad(P, O, L, View{dout.data(), O.shape, DType::F32},
                                          View{dqkv.data(), P.shape, DType::F32}, H, 0.125, 0);
                }));
    return 0;
  }
  const int64_t N = 1024, D = 768, V = 50257, R = 640;
  std::vector<float> x(size_t(N * D)), w(size_t(V * D)), dx(x.size()), dw(w.size()), block(size_t(R * V)), l(1);
  std::vector<int64_t> labels(static_cast<size_t>(N));
  for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
  for (size_t i = 0; i < w.size(); ++i) w[i] = float((i * 40503u) % 1000) / 10000.0f - 0.05f;
  for (size_t i = 0; i < labels.size(); ++i) labels[i] = int64_t((i * 7919) % size_t(V));
  std::printf("loss with its gradients: best of 3 %.3f s\n", best_of_3([&] {
                cpu::linear_cross_entropy(View{x.data(), Shape{N, D}, DType::F32}, View{w.data(), Shape{V, D}, DType::F32},
                                          View{labels.data(), Shape{N}, DType::I64}, View{l.data(), Shape{}, DType::F32},
                                          View{dx.data(), Shape{N, D}, DType::F32},
                                          View{dw.data(), Shape{V, D}, DType::F32},
                                          View{block.data(), Shape{R, V}, DType::F32}, -100, true, true);
              }));
}
