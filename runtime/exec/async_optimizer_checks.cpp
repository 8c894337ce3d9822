// AsyncOptimizer's step-wide checks: gradient accumulation over micro-batches,
// the global gradient norm (clipping) and the loss scaler's verdict, which
// hold every update of the step until all gradients are in.
#include "exec/async_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "exec/runtime.h"
#include "optim/adamw.h"

namespace fy {

using Clock = std::chrono::steady_clock;

void AsyncOptimizer::set_accumulation(int64_t k) {
  if (k < 1) fail("gradient accumulation needs at least 1 micro-batch a step, got " + std::to_string(k));
  if (!slots_.empty()) fail("gradient accumulation is set before the first step");
  accum_ = k;
}

bool AsyncOptimizer::accumulating() const { return rt_.micro_step() + 1 < accum_; }

void AsyncOptimizer::accumulate(Group& g, bool first) {
  float* acc = g.acc;
  const float* src = slots_[size_t(g.slot)];
  // As torch accumulates .grad: the first micro-batch's gradient, then += each next one.
  pool_->wait(pool_->for_chunks(int64_t(g.grad_elems), [=](int64_t lo, int64_t n) {
    if (first)
      std::memcpy(acc + lo, src + lo, size_t(n) * sizeof(float));
    else
      for (int64_t i = lo; i < lo + n; ++i) acc[i] += src[i];
  }));
}

void AsyncOptimizer::combine(Group& g) {
  const float* acc = g.acc;
  float* dst = slots_[size_t(g.slot)];
  // The mean over micro-batches: exactly torch's sum of (loss / k)'s
  // gradients when k is a power of two. A scaled backward started from
  // scale / k already (backward_scale), as torch's does: only the sum.
  const float inv = scaler_ ? 1.f : float(1.0 / double(accum_));
  pool_->wait(pool_->for_chunks(int64_t(g.grad_elems), [=](int64_t lo, int64_t n) {
    for (int64_t i = lo; i < lo + n; ++i) dst[i] = (acc[i] + dst[i]) * inv;
  }));
  g.combine = false;
}

AsyncOptimizer::Verdict AsyncOptimizer::wait_verdict() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return !awaiting_ || error_; });
  if (error_) std::rethrow_exception(error_);
  return verdict_;
}

void AsyncOptimizer::restore_loss_scaler(float scale, int64_t growth_tracker, int64_t skipped) {
  if (!scaler_) fail("restore_loss_scaler: the run has no loss scaling");
  std::lock_guard<std::mutex> lock(mu_);
  scaler_->restore(scale, growth_tracker, skipped);
  verdict_ = Verdict{false, scale, scale};
}

void AsyncOptimizer::check_norms(Group& g) {
  // torch takes the norm of each gradient in fp32, then the norm of those.
  // Each chunk's sum of squares goes in its own place and the places are added
  // in order, so the norm does not depend on the pool's thread count.
  constexpr int64_t C = AdamWPool::kChunk;
  std::vector<std::vector<double>> parts(g.params.size());
  {
    // The jobs write into `parts`: all are over when this scope ends, error or not.
    struct Jobs {
      AdamWPool& pool;
      std::vector<AdamWPool::Handle> handles;
      ~Jobs() {
        for (const AdamWPool::Handle& h : handles) pool.wait(h);
      }
    } jobs{*pool_, {}};
    for (size_t i = 0; i < g.params.size(); ++i) {
      const float* x = grad(g, i);
      const int64_t n = rt_.param(g.params[i]).value.numel();
      std::vector<double>& part = parts[i];
      part.assign(size_t((n + C - 1) / C), 0.0);
      jobs.handles.push_back(pool_->for_chunks(n, [x, &part](int64_t lo, int64_t len) {
        double acc[4] = {0, 0, 0, 0};  // four chains: the loop is latency-bound otherwise
        const float* y = x + lo;
        int64_t k = 0;
        for (; k + 4 <= len; k += 4)
          for (int j = 0; j < 4; ++j) acc[j] += double(y[k + j]) * double(y[k + j]);
        for (; k < len; ++k) acc[0] += double(y[k]) * double(y[k]);
        part[size_t(lo / C)] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }));
    }
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    double sum = 0;
    for (double p : parts[i]) sum += p;
    float norm = float(std::sqrt(sum));
    g.sq_norms[i] = double(norm) * double(norm);
  }
}

}  // namespace fy
