// Where a program's kernels run. The CPU target has no Device: kernels read
// and write host memory and the step runs as called. A GPU target's runtime
// library provides one (exec's make_device): parameters' working copies and
// temporaries live in device memory, while the host keeps the fp32 master
// weights, the optimizer and its state, exactly as on the CPU target.
//
// A device knows the runtime only through DeviceHost, which exec implements:
// what the program declared and the host memory that stays the runtime's.
// What the optimizer does, and in which order the step waits for it, is
// exec's; a device offers the streams, events and copies it is done with.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "core/tensor.h"

namespace fy {

// Counters of a buffer pool. mallocs only grows when no free buffer of the
// size asked is available, so a steady-state step leaves it unchanged.
struct PoolStats {
  int64_t live_buffers = 0;  // alloc'ed and not yet dealloc'ed
  int64_t live_bytes = 0;
  int64_t peak_bytes = 0;    // max live_bytes (temporaries only)
  int64_t reserved_bytes = 0;
  int64_t mallocs = 0;
  void add(int64_t bytes) {  // a buffer of `bytes` comes alive
    live_buffers++;
    live_bytes += bytes;
    if (live_bytes > peak_bytes) peak_bytes = live_bytes;
  }
  void remove(int64_t bytes) {
    live_buffers--;
    live_bytes -= bytes;
  }
};

// What a device reads of the runtime that owns it, and the host-side calls
// it makes back. Everything here is known once the program declared itself.
class DeviceHost {
 public:
  virtual ~DeviceHost() = default;
  // --gpu-mem: the device's budget in bytes (0 or less: none).
  virtual int64_t gpu_mem() const = 0;
  // The step's token ids (targets have the same shape).
  virtual Shape input_shape() const = 0;
  // The parameters' host copies: the fp32 master and AdamW's moments (null
  // data where the state is elsewhere: 8-bit, or on SSD).
  struct Param {
    View value, m, v;
  };
  virtual int64_t num_params() const = 0;
  virtual Param param(int64_t index) const = 0;
  virtual const std::string& param_name(int64_t index) const = 0;
  // declare_streamed_params: no resident device copies.
  virtual bool streamed_params() const = 0;
  // The memory plan's device arena (0: the program places nothing there)
  // and gather_up's most bytes of rows (declare_gather_up).
  virtual int64_t planned_arena_bytes() const = 0;
  virtual int64_t gather_up_bytes() const = 0;
  // Host buffers the program frees through the device's dealloc: whether
  // `p` lies in one of the runtime's arenas, and the runtime's own dealloc.
  virtual bool in_host_arenas(const void* p) const = 0;
  virtual void dealloc_host(View v) = 0;
  // --trace: null clock when off; slices go to the named track.
  virtual bool tracing() const = 0;
  virtual double trace_now_us() const = 0;
  virtual void trace_slice(const char* track, const char* name, double start_us, double end_us,
                           int64_t bytes) = 0;
};

class Device {
 public:
  // The program's step, run by run_step once the inputs are on the device.
  using Step = std::function<void(View /*token ids*/, View /*target ids*/, View /*loss*/)>;

  virtual ~Device() = default;
  virtual const char* name() const = 0;
  // Once the master weights are final for the first step (loaded, or
  // restored from a checkpoint): working copies up, budgets checked.
  virtual void prepare() = 0;
  // One step: the host's token ids in, the program run, the loss back in
  // `loss` (host) when this returns. `training` false: an evaluation
  // (fy_eval_step), not counted as a step.
  virtual void run_step(const Step& step, View idx, View tgt, View loss, bool training = true) = 0;
  // Device memory taken beyond the parameters and the plan's temporaries
  // (libraries' scratch), counted in --gpu-mem; known once the program
  // declared itself.
  virtual int64_t fixed_bytes() const { return 0; }
  // Host memory the device holds for its own copies (gather_up's staging),
  // counted in --cpu-mem; known once the program declared itself.
  virtual int64_t fixed_host_bytes() const { return 0; }
  // The device's temporaries (the memory plan is checked against these).
  virtual const PoolStats& pool_stats() const = 0;
  // Waits until the transfers the device queued into host memory have
  // landed, so the CPU may read it.
  virtual void finish_host_transfers() {}
  // Waits until no transfer the device queued reads or writes host memory
  // in [data, data + bytes): before the CPU reads it (a host buffer goes on
  // to SSD) or writes it (a read from SSD lands where a buffer was).
  virtual void settle_host(const void* /*data*/, size_t /*bytes*/) {}
  // A line for the end of the run (what the device did), or "".
  virtual std::string summary() const { return ""; }
  // Brings back to the host the master weights and AdamW moments of the
  // parameters the device updates itself (device_adamw), before the host
  // reads them (a checkpoint).
  virtual void settle_masters() {}
};

}  // namespace fy
