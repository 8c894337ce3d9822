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
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "core/tensor.h"
#include "optim/adamw.h"
#include "store/store.h"

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
  const std::vector<int64_t>& group_params(int64_t group) const { return groups_[size_t(group)].params; }

  // How a gradient leaves the device for its host slot (default: memcpy, the
  // CPU target's gradients are host memory). Returns once dst holds it.
  void set_gradient_copy(std::function<void(const View& src, float* dst)> f) { copy_out_ = std::move(f); }
  // Called on the optimizer's thread after a group's update, before wait()
  // lets anyone read the group's parameters: a device queues the upload of
  // the new values here.
  void set_on_updated(std::function<void(int64_t group)> f) { on_updated_ = std::move(f); }

  // Copies the group's gradients (one per parameter, in declaration order)
  // to host buffers owned here, so the caller may free them at once, and
  // queues the update at the Runtime's current step.
  void start(int64_t group, const View* grads, size_t count);
  // Returns once the group's queued update is done; rethrows its failure.
  void wait(int64_t group);
  void wait_all();
  // For an owner going away, also after a failure: drops the updates still
  // queued or held for clipping and waits for the one running, so that no
  // hook is called afterwards. Never throws; leaves the state mid-step.
  void quiesce() noexcept;

  // Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_):
  // every gradient must be in before any update, so updates are held until
  // the step's last group has started, then released in forward order (the
  // reverse of backward's) so that the next forward waits as little as
  // possible. They still overlap the next step's forward, not the backward.
  void set_clip_norm(double max_norm) { clip_norm_ = max_norm; }
  double last_grad_norm() const { return last_norm_; }

  // Out of core (--ssd): AdamW's moments live in the store, one region each,
  // and only two groups' worth sit in host memory: the group being updated
  // and the next one, whose read is issued ahead (reads go before writes).
  bool on_ssd() const { return store_ != nullptr; }
  // The moments of one parameter, wherever they live (checkpoints), in their
  // format (Runtime::state_bytes each); either pointer may be null.
  void read_state(int64_t param, void* m, void* v);
  void write_state(int64_t param, const void* m, const void* v);
  const store::TensorStore* store() const { return store_.get(); }
  size_t staging_bytes() const { return staging_bytes_; }
  // Staging buffers for the moments out of core (at least 2); set before the first step.
  void set_staging(size_t n) { staging_count_ = n < 2 ? 2 : n; }
  size_t staging() const { return staging_count_; }

  // Host memory: what the optimizer holds besides its gradient slots, the
  // size of one slot, and the fewest slots it can run with (clipping needs
  // every group's gradients at once).
  size_t fixed_host_bytes() const;
  size_t slot_bytes() const { return slot_elems_ * sizeof(float); }
  size_t min_slots() const { return clip_norm_ > 0 ? groups_.size() : 1; }
  size_t min_fixed_host_bytes() const { return store_ ? 2 * staging_bytes_ : fixed_host_bytes(); }
  // How many slots to use (default: one per group, never waiting).
  void set_slots(size_t n) { wanted_slots_ = n; }
  size_t slots() const { return slots_.size(); }

  double busy_seconds() const;  // time the worker spent updating
  double wait_seconds() const { return wait_seconds_; }  // time callers blocked in wait

 private:
  struct Group {
    std::vector<int64_t> params;
    std::vector<size_t> grad_offsets;       // where each gradient sits in a slot
    size_t grad_elems = 0;
    int slot = -1;                          // the host slot holding its gradients
    std::vector<double> sq_norms;  // per parameter, of this step's gradients
    int64_t step = 0;
    float scale = 1.f;             // clipping coefficient applied before AdamW
    bool pending = false;
    bool held = false;             // started, waiting for the global norm
    // Out of core: the moments' regions, and where each sits in a staging buffer.
    std::vector<store::Region> m_regions, v_regions;
    std::vector<size_t> m_offsets, v_offsets;
    size_t staging_bytes = 0;
  };
  // Host room for one group's moments, filled by reads issued ahead.
  struct Staging {
    store::AlignedBuffer buffer;
    int64_t group = -1;
    bool consumed = true;   // its group's update ran (or it holds nothing): reusable
    uint64_t last_use = 0;  // least recently used goes first
    std::vector<store::Ticket> reads, writes;
  };
  void worker();
  void update(Group& g);
  // Queues parameter `param`'s AdamW on the pool, in its moments' format.
  void submit(int64_t param, const float* g, void* m, void* v, int64_t step);
  void update_out_of_core(int64_t group);
  // The buffer holding (or now reading) `group`'s moments; null when it is
  // not staged and `force` is false and every buffer holds a read-ahead
  // still to be used.
  Staging* stage(int64_t group, bool force);
  void drain(std::vector<store::Ticket>& tickets);
  float* grad(const Group& g, size_t i) { return slots_[size_t(g.slot)] + g.grad_offsets[i]; }
  void make_slots();

  Runtime& rt_;
  std::vector<Group> groups_;
  std::deque<int64_t> queue_;
  size_t started_ = 0;  // groups started in this step
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::exception_ptr error_;
  bool stop_ = false;
  double clip_norm_ = 0;
  double last_norm_ = 0;
  double busy_seconds_ = 0;
  double wait_seconds_ = 0;
  // Host slots for gradients that left the device, each as big as the
  // largest group; start() waits for a free one (backpressure), so their
  // number bounds host memory.
  std::vector<float*> slots_;  // Runtime::alloc_pinned storage
  std::vector<int> free_slots_;
  size_t slot_elems_ = 0;
  size_t wanted_slots_ = 0;
  std::unique_ptr<AdamWPool> pool_;  // the update itself, on every core it may use
  std::unique_ptr<store::TensorStore> store_;
  std::vector<Staging> staging_;  // allocated at the first update
  size_t staging_count_ = 4;      // read-ahead is staging_count_ - 1 groups
  size_t staging_bytes_ = 0;
  uint64_t clock_ = 0;
  std::function<void(const View&, float*)> copy_out_;
  std::function<void(int64_t)> on_updated_;
  std::thread thread_;
};

}  // namespace fy
