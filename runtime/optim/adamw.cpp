// AdamW entry points: the step scalars, the choice of instruction set, and
// the worker pool. The loops themselves are in adamw_{scalar,avx2,avx512}.cpp.
//
// Mirrors torch 1.13 _single_tensor_adamw so fp32 results are bit-identical
// to PyTorch's (checked by adamw_test's torch oracle). Hyper-parameters are
// Python floats there, so scalar expressions are formed in double and rounded
// to float once, as PyTorch does when it applies a double scalar to a float
// tensor; every instruction set gets the very same float scalars.
#include "optim/adamw.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/tensor.h"
#include "optim/adamw8bit.h"
#include "optim/adamw8bit_kernels.h"
#include "optim/adamw_kernels.h"

namespace fy {

namespace ad = adamw_detail;

ad::Scalars ad::make_scalars(const AdamWConfig& cfg, int64_t step) {
  const double lr = cfg.lr, b1 = cfg.beta1, b2 = cfg.beta2, wd = cfg.weight_decay;
  const double bc1 = 1.0 - std::pow(b1, double(step));
  const double bc2 = 1.0 - std::pow(b2, double(step));
  return ad::Scalars{float(1.0 - lr * wd), float(b1),          float(1.0 - b1),       float(b2),
                     float(1.0 - b2),      float(-(lr / bc1)), float(std::sqrt(bc2)), cfg.eps,
                     cfg.grad_unscale,     cfg.grad_coef};
}

ad::Kernel ad::kernel_of(AdamWIsa isa) {
  switch (isa) {
    case AdamWIsa::Avx512: return ad::kernel_avx512;
    case AdamWIsa::Avx2: return ad::kernel_avx2;
    case AdamWIsa::Scalar: break;
  }
  return ad::kernel_scalar;
}

namespace {

using ad::kernel_of;
using ad::make_scalars;

void check_args(const char* who, int64_t n, int64_t step) {
  if (step < 1) fail(std::string(who) + ": step must start at 1, got " + std::to_string(step));
  if (n < 0) fail(std::string(who) + ": negative element count " + std::to_string(n));
}

}  // namespace

const char* adamw_isa_name(AdamWIsa isa) {
  switch (isa) {
    case AdamWIsa::Avx512: return "avx512";
    case AdamWIsa::Avx2: return "avx2";
    case AdamWIsa::Scalar: break;
  }
  return "scalar";
}

bool adamw_isa_supported(AdamWIsa isa) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();  // idempotent; needed if we run before libgcc's constructor
#endif
  switch (isa) {
    case AdamWIsa::Scalar: return true;
#if defined(__x86_64__) || defined(__i386__)
    case AdamWIsa::Avx2: return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case AdamWIsa::Avx512: return __builtin_cpu_supports("avx512f");
#else
    default: return false;
#endif
  }
  return false;
}

AdamWIsa adamw_best_isa() {
  static const AdamWIsa best = adamw_isa_supported(AdamWIsa::Avx512) ? AdamWIsa::Avx512
                               : adamw_isa_supported(AdamWIsa::Avx2) ? AdamWIsa::Avx2
                                                                     : AdamWIsa::Scalar;
  return best;
}

void adamw_step_isa(AdamWIsa isa, float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                    int64_t step) {
  check_args("fy::adamw_step", n, step);
  if (!adamw_isa_supported(isa)) fail(std::string("fy::adamw_step: this CPU lacks ") + adamw_isa_name(isa));
  kernel_of(isa)(make_scalars(cfg, step), p, g, m, v, n);
}

void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg, int64_t step) {
  check_args("fy::adamw_step", n, step);
  static const ad::Kernel best = kernel_of(adamw_best_isa());
  best(make_scalars(cfg, step), p, g, m, v, n);
}

int available_cpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? int(hc) : 1;
}

// ---------------------------------------------------------------- the pool

struct AdamWPool::Handle::Job {
  ad::Kernel kernel;
  ad::Scalars s;
  float* p;
  const float* g;
  float* m;
  float* v;
  int64_t block = 0;  // 8-bit moments (m, v point at their states) when > 0
  std::function<void(int64_t, int64_t)> body;  // a for_chunks pass instead of an update
  int64_t n, nchunks;
  std::atomic<int64_t> next{0};       // next chunk to claim
  std::atomic<int64_t> remaining{0};  // chunks not yet finished
  bool done = false;                  // guarded by the pool's mutex
};

AdamWPool::AdamWPool(int threads) : AdamWPool(threads, adamw_best_isa()) {}

AdamWPool::AdamWPool(int threads, AdamWIsa isa) : isa_(isa) {
  if (!adamw_isa_supported(isa)) fail(std::string("fy::AdamWPool: this CPU lacks ") + adamw_isa_name(isa));
  const int n = threads > 0 ? threads : available_cpus();
  workers_.reserve(size_t(n));
  try {
    for (int i = 0; i < n; ++i) workers_.emplace_back([this] { worker_loop(); });
  } catch (const std::exception& e) {  // system_error, or bad_alloc for a thread's state
    // The ones started must be joined, or their destructors terminate us.
    const size_t started = workers_.size();
    stop_workers();
    fail("fy::AdamWPool: could start only " + std::to_string(started) + " of " + std::to_string(n) +
         " optimizer threads (" + e.what() + ")");
  }
}

AdamWPool::~AdamWPool() { stop_workers(); }

void AdamWPool::stop_workers() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;  // workers drain the queue before they leave
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
  workers_.clear();
}

void AdamWPool::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    work_cv_.wait(lk, [this] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) return;  // stopping and nothing left
    std::shared_ptr<Handle::Job> job = queue_.front();
    lk.unlock();
    for (;;) {
      const int64_t c = job->next.fetch_add(1, std::memory_order_relaxed);
      if (c >= job->nchunks) break;
      const int64_t lo = c * kChunk, len = std::min(kChunk, job->n - lo);
      if (job->body)
        job->body(lo, len);
      else if (job->block > 0)
        ad::q8_range(isa_, job->s, job->p, job->g, reinterpret_cast<uint8_t*>(job->m),
                     reinterpret_cast<uint8_t*>(job->v), job->n, lo, len, job->block);
      else
        job->kernel(job->s, job->p + lo, job->g + lo, job->m + lo, job->v + lo, len);
      // acq_rel: the finisher sees every other chunk's stores before it
      // reports the job done (and the waiter synchronises through mu_).
      if (job->remaining.fetch_sub(1, std::memory_order_acq_rel) == 1) {
        std::lock_guard<std::mutex> g(mu_);
        job->done = true;
        --pending_;
        done_cv_.notify_all();
      }
    }
    lk.lock();
    // Every chunk of this job is claimed: the first worker back retires it.
    if (!queue_.empty() && queue_.front() == job) queue_.pop_front();
  }
}

AdamWPool::Handle AdamWPool::submit(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                                    int64_t step) {
  check_args("fy::AdamWPool", n, step);
  Handle h;
  h.job_ = std::make_shared<Handle::Job>();
  Handle::Job& j = *h.job_;
  j.kernel = kernel_of(isa_);
  j.s = make_scalars(cfg, step);
  j.p = p, j.g = g, j.m = m, j.v = v, j.n = n;
  enqueue(h);
  return h;
}

AdamWPool::Handle AdamWPool::submit_8bit(float* p, const float* g, void* m_state, void* v_state, int64_t n,
                                         int64_t block, const AdamWConfig& cfg, int64_t step) {
  check_args("fy::AdamWPool", n, step);
  if (!q8_block_ok(block) || kChunk % block != 0)
    fail("fy::AdamWPool: 8-bit block size " + std::to_string(block) + " is not a power of two in [32, 4096]");
  Handle h;
  h.job_ = std::make_shared<Handle::Job>();
  Handle::Job& j = *h.job_;
  j.s = make_scalars(cfg, step);
  j.p = p, j.g = g, j.m = static_cast<float*>(m_state), j.v = static_cast<float*>(v_state), j.n = n;
  j.block = block;
  enqueue(h);
  return h;
}

AdamWPool::Handle AdamWPool::for_chunks(int64_t n, std::function<void(int64_t, int64_t)> body) {
  if (n < 0) fail("fy::AdamWPool::for_chunks: negative length " + std::to_string(n));
  Handle h;
  h.job_ = std::make_shared<Handle::Job>();
  h.job_->body = std::move(body);
  h.job_->n = n;
  enqueue(h);
  return h;
}

void AdamWPool::enqueue(const Handle& h) {
  Handle::Job& j = *h.job_;
  j.nchunks = (j.n + kChunk - 1) / kChunk;
  j.remaining.store(j.nchunks, std::memory_order_relaxed);
  if (j.nchunks == 0) {
    j.done = true;
    return;
  }
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(h.job_);
    ++pending_;
  }
  if (j.nchunks == 1)
    work_cv_.notify_one();
  else
    work_cv_.notify_all();
}

void AdamWPool::wait(const Handle& h) {
  if (!h.job_) return;
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [&] { return h.job_->done; });
}

bool AdamWPool::done(const Handle& h) const {
  if (!h.job_) return true;
  std::lock_guard<std::mutex> lk(mu_);
  return h.job_->done;
}

void AdamWPool::wait_all() {
  std::unique_lock<std::mutex> lk(mu_);
  done_cv_.wait(lk, [this] { return pending_ == 0; });
}

void AdamWPool::update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                       int64_t step) {
  if (n <= kChunk) {
    check_args("fy::AdamWPool", n, step);
    kernel_of(isa_)(make_scalars(cfg, step), p, g, m, v, n);
    return;
  }
  wait(submit(p, g, m, v, n, cfg, step));
}

}  // namespace fy
