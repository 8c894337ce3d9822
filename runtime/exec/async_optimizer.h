// Fuyou's overlapped CPU optimizer: the AdamW update of a layer group runs on
// a background thread as soon as backward has produced the group's last
// gradient, while backward goes on for the earlier groups. The next step
// waits for a group's update only before it reads that group's parameters,
// so the result is that of a plain synchronous AdamW.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"

namespace fy {

class Runtime;

class AsyncOptimizer {
 public:
  explicit AsyncOptimizer(Runtime& rt);
  ~AsyncOptimizer();
  AsyncOptimizer(const AsyncOptimizer&) = delete;
  AsyncOptimizer& operator=(const AsyncOptimizer&) = delete;

  // A group of trainable parameters (indices into the Runtime); returns its id.
  int64_t declare_group(std::vector<int64_t> params);
  int64_t num_groups() const { return int64_t(groups_.size()); }

  // Copies the group's gradients (one per parameter, in declaration order)
  // to host buffers owned here, so the caller may free them at once, and
  // queues the update at the Runtime's current step.
  void start(int64_t group, const View* grads, size_t count);
  // Returns once the group's queued update is done; rethrows its failure.
  void wait(int64_t group);
  void wait_all();

  // Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_):
  // every gradient must be in before any update, so updates are held until
  // the step's last group has started, then released in forward order (the
  // reverse of backward's) so that the next forward waits as little as
  // possible. They still overlap the next step's forward, not the backward.
  void set_clip_norm(double max_norm) { clip_norm_ = max_norm; }
  double last_grad_norm() const { return last_norm_; }

  double busy_seconds() const;  // time the worker spent updating
  double wait_seconds() const { return wait_seconds_; }  // time callers blocked in wait

 private:
  struct Group {
    std::vector<int64_t> params;
    std::vector<std::vector<float>> grads;  // host copies, reused every step
    std::vector<double> sq_norms;  // per parameter, of this step's gradients
    int64_t step = 0;
    float scale = 1.f;             // clipping coefficient applied before AdamW
    bool pending = false;
    bool held = false;             // started, waiting for the global norm
  };
  void worker();

  Runtime& rt_;
  std::vector<Group> groups_;
  std::deque<int64_t> queue_;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::exception_ptr error_;
  bool stop_ = false;
  double clip_norm_ = 0;
  double last_norm_ = 0;
  double busy_seconds_ = 0;
  double wait_seconds_ = 0;
  std::thread thread_;
};

}  // namespace fy
