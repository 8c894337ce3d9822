// The Runtime as a device sees it (device/device.h's DeviceHost): what the
// program declared, the parameters' host copies, and the host buffers and
// trace that stay the runtime's.
#pragma once

#include "device/device.h"
#include "exec/runtime.h"

namespace fy {

class RuntimeDeviceHost : public DeviceHost {
 public:
  explicit RuntimeDeviceHost(Runtime& rt) : rt_(rt) {}
  Runtime& runtime() const { return rt_; }

  int64_t gpu_mem() const override { return rt_.options().gpu_mem; }
  Shape input_shape() const override { return rt_.input_shape(); }
  int64_t num_params() const override { return rt_.num_params(); }
  Param param(int64_t index) const override {
    const Runtime::Param& p = rt_.param(index);
    return Param{p.value, p.m, p.v};
  }
  const std::string& param_name(int64_t index) const override { return rt_.param(index).name; }
  bool streamed_params() const override { return rt_.streamed_params(); }
  int64_t planned_arena_bytes() const override { return rt_.planned_arena_bytes(); }
  int64_t gather_up_bytes() const override { return rt_.gather_up_bytes(); }
  bool in_host_arenas(const void* p) const override { return rt_.in_arenas(p); }
  void dealloc_host(View v) override { rt_.dealloc(v); }
  bool tracing() const override { return rt_.trace() != nullptr; }
  double trace_now_us() const override { return rt_.trace() ? rt_.trace()->now_us() : 0; }
  void trace_slice(const char* track, const char* name, double start_us, double end_us, int64_t bytes) override {
    if (Trace* t = rt_.trace()) t->slice(track, name, start_us, end_us, bytes);
  }

 private:
  Runtime& rt_;
};

}  // namespace fy
