// AdamW with PyTorch semantics (torch.optim.AdamW, foreach=False), fp32.
#pragma once

#include <cstdint>

namespace fy {

struct AdamWConfig {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
};

// One step over n parameters, in place on p, m (exp_avg), v (exp_avg_sq).
// step counts from 1. Elementwise, so the result is independent of threads.
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg, int64_t step);

}  // namespace fy
