// Where a program's kernels run. The CPU target has no Device: kernels read
// and write host memory and the step runs as called. A GPU target's runtime
// library provides one (make_device): parameters' working copies and
// temporaries live in device memory, while the host keeps the fp32 master
// weights, the optimizer and its state, exactly as on the CPU target.
#pragma once

#include <memory>

#include "abi/api.h"
#include "core/tensor.h"
#include "exec/runtime.h"

namespace fy {

class Device {
 public:
  virtual ~Device() = default;
  virtual const char* name() const = 0;
  // Once the master weights are final for the first step (loaded, or
  // restored from a checkpoint): working copies up, budgets checked.
  virtual void prepare() = 0;
  // One step: the host's token ids in, the program run, the loss back in
  // `loss` (host) when this returns. `training` false: an evaluation
  // (fy_eval_step), not counted as a step.
  virtual void run_step(TrainStepFn step, View idx, View tgt, View loss, bool training = true) = 0;
  // Device memory taken beyond the parameters and the plan's temporaries
  // (libraries' scratch), counted in --gpu-mem; known once the program
  // declared itself.
  virtual int64_t fixed_bytes() const { return 0; }
  // Host memory the device holds for its own copies (gather_up's staging),
  // counted in --cpu-mem; known once the program declared itself.
  virtual int64_t fixed_host_bytes() const { return 0; }
  // The device's temporaries (the memory plan is checked against these).
  virtual const Runtime::PoolStats& pool_stats() const = 0;
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

// Defined by each target's runtime library: null on the CPU target. Called
// before the program declares anything, so a device can make the Runtime's
// long-lived host storage page-locked for fast copies.
std::unique_ptr<Device> make_device(Runtime& rt);

}  // namespace fy
