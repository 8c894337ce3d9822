// AdamW with PyTorch semantics (torch.optim.AdamW, foreach=False), fp32.
//
// One fused pass over p, g, m, v per element, in the instruction set the CPU
// offers (AVX-512, AVX2+FMA or scalar, chosen once at run time). Every path
// performs the same IEEE operations in the same order on every element, so
// they all give the same bits, which are torch's bits (adamw_test checks
// both). Threads only split the index range, so results never depend on the
// thread count either.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace fy {

struct AdamWConfig {
  double lr = 1e-3;  // double, as torch's: a schedule's rates are not rounded to float
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 1e-2f;
  // The gradient is first multiplied by these, in this order, each product
  // rounded: torch's GradScaler.unscale_ (1 / loss scale), then
  // clip_grad_norm_'s coefficient. At 1 they change no bit.
  float grad_unscale = 1.f;
  float grad_coef = 1.f;
};

// One step over n parameters, in place on p, m (exp_avg), v (exp_avg_sq),
// on the calling thread. step counts from 1. The arrays must not overlap.
void adamw_step(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg, int64_t step);

// Instruction sets of the update loop. adamw_step and AdamWPool use
// adamw_best_isa(); the others are there for tests and benchmarks.
enum class AdamWIsa { Scalar, Avx2, Avx512 };
const char* adamw_isa_name(AdamWIsa isa);           // "scalar", "avx2", "avx512"
bool adamw_isa_supported(AdamWIsa isa);             // by this CPU (cpuid)
AdamWIsa adamw_best_isa();                          // widest supported, decided once
// adamw_step in a given instruction set; fails (fy::Error) if the CPU lacks it.
void adamw_step_isa(AdamWIsa isa, float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg,
                    int64_t step);

// CPUs this process may run on (sched_getaffinity; hardware_concurrency as a
// fallback), at least 1.
int available_cpus();

// A persistent pool of worker threads (std::thread, not OpenMP, so that it can
// run beside compute threads without sharing their team) that runs AdamW
// updates, and the passes over gradients that come with them (for_chunks).
// Each update is cut into contiguous chunks of kChunk elements that
// the workers claim in order, so each worker streams through memory and a
// slow worker only delays the chunks it holds. Updates submitted together run
// in submission order (a worker starts on the next one when the previous one
// has no chunk left to claim). All methods may be called from any thread.
class AdamWPool {
 public:
  // 64 Ki elements: 256 KiB of each of p, g, m, v, i.e. 1 MiB of state per
  // chunk, which stays in L2 between the loads and the write-back.
  static constexpr int64_t kChunk = int64_t(1) << 16;

  class Handle {
   public:
    Handle() = default;
    bool valid() const { return job_ != nullptr; }

   private:
    friend class AdamWPool;
    struct Job;
    std::shared_ptr<Job> job_;
  };

  // threads <= 0: available_cpus(). isa: defaults to adamw_best_isa(); fails
  // if the CPU lacks the one asked for.
  explicit AdamWPool(int threads = 0);
  AdamWPool(int threads, AdamWIsa isa);
  ~AdamWPool();  // finishes every submitted update, then joins the workers
  AdamWPool(const AdamWPool&) = delete;
  AdamWPool& operator=(const AdamWPool&) = delete;

  int threads() const { return int(workers_.size()); }
  AdamWIsa isa() const { return isa_; }

  // Queues one update and returns at once. The arrays must stay alive and
  // untouched by the caller until wait() on the handle returns. Argument
  // errors (step < 1, n < 0) throw here, before anything is queued.
  Handle submit(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg, int64_t step);
  // The same with 8-bit moments (adamw8bit.h): states of q8_state_bytes(n,
  // block) each; chunks split on block boundaries.
  Handle submit_8bit(float* p, const float* g, void* m_state, void* v_state, int64_t n, int64_t block,
                     const AdamWConfig& cfg, int64_t step);
  // Queues body(lo, len) for every chunk [lo, lo + len) of [0, n), chunks of
  // kChunk elements, in the same queue as the updates. Chunk boundaries do not
  // depend on the thread count, so a body writing one result per chunk gives
  // the same results with any number of threads. body must not throw.
  Handle for_chunks(int64_t n, std::function<void(int64_t lo, int64_t len)> body);
  // Blocks until the job (an update or a for_chunks pass) is complete
  // (immediately for an empty handle).
  void wait(const Handle& h);
  // Whether the job is complete, without blocking.
  bool done(const Handle& h) const;
  // Blocks until every job submitted so far is complete.
  void wait_all();

  // submit + wait. An update of at most kChunk elements runs on the calling
  // thread instead (waking a worker would cost more than it saves).
  void update(float* p, const float* g, float* m, float* v, int64_t n, const AdamWConfig& cfg, int64_t step);

 private:
  void worker_loop();
  void stop_workers();  // drains the queue and joins every worker
  void enqueue(const Handle& h);  // counts the job's chunks and queues it

  AdamWIsa isa_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_;  // workers: queue non-empty or stopping
  std::condition_variable done_cv_;  // waiters: some job finished
  std::deque<std::shared_ptr<Handle::Job>> queue_;
  int64_t pending_ = 0;  // submitted jobs not yet complete
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

}  // namespace fy
