// Where AdamW's moments live between a group's updates, behind one interface:
// in host memory (each parameter's m and v in the Runtime), or on SSD (one
// store region each), staged through a few host buffers that are read ahead
// of a group's update and written back after it. The optimizer's queue
// decides when (its state_read and state_write items, which only a staged
// store has); the store knows where. Not thread-safe: the optimizer's worker
// alone calls it, and the program's thread only once the worker is idle.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace fy {

class Runtime;
namespace store {
class TensorStore;
}

class MomentStore {
 public:
  virtual ~MomentStore() = default;

  // `group`'s parameters (Runtime indices), in the group's order; groups
  // are declared 0, 1, ... once every parameter is.
  virtual void declare_group(int64_t group, const std::vector<int64_t>& params) = 0;
  // Whether the moments cross to and from host memory around each update
  // (state_read and state_write are queue items).
  virtual bool staged() const = 0;

  // Where parameter i (in the group's order) keeps m and v during an update.
  using Where = std::function<std::pair<void*, void*>(size_t)>;
  // `group`'s moments for its update: staged, and an earlier write-back of
  // the same bytes landed.
  virtual Where begin_update(int64_t group) = 0;
  // The update has changed them (a staged copy is not evicted before its write-back).
  virtual void end_update(int64_t /*group*/) {}
  // Whether a read ahead of `group`'s moments can start now (a buffer is
  // free, or holds them already).
  virtual bool can_read_ahead(int64_t /*group*/) const { return true; }
  virtual void read_ahead(int64_t /*group*/) {}
  virtual void write_back(int64_t /*group*/) {}

  // One parameter's moments in their format (checkpoints), once no update
  // runs; either pointer may be null.
  virtual void read(int64_t param, void* m, void* v) = 0;
  virtual void write(int64_t param, const void* m, const void* v) = 0;
  // Waits for the I/O in flight (an owner going away: errors are dropped).
  virtual void settle() noexcept {}

  // Host memory: the moments themselves, or `buffers` staging buffers.
  virtual size_t host_bytes(size_t buffers) const = 0;
  // One staging buffer (the largest group's moments); 0 in memory.
  virtual size_t buffer_bytes() const { return 0; }
  virtual const store::TensorStore* tensor_store() const { return nullptr; }
  // Staging buffers to use (at least 2), before the first update.
  virtual void set_buffers(size_t /*n*/) {}
  virtual size_t buffers() const { return 0; }
};

// In host memory: the Runtime's m and v of each parameter.
std::unique_ptr<MomentStore> moments_in_memory(Runtime& rt);
// On SSD: the run's store ("fuyou.store" in --ssd), regions never written
// reading as zeros (AdamW's initial moments).
std::unique_ptr<MomentStore> moments_on_ssd(Runtime& rt);

}  // namespace fy
