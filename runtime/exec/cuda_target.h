// The CUDA target as exec runs it: the GPU (device/cuda) reading the Runtime
// through RuntimeDeviceHost, with the layer-group optimizer's copies and
// uploads wired to the device's streams. The program's entry points
// (api_cuda.cpp) order the optimizer's calls around the device's waits.
#pragma once

#include "device/cuda/device.h"
#include "exec/device_host.h"

namespace fy::cuda {

namespace detail {
// Constructed before the device, which keeps a reference to it.
struct WithHost {
  explicit WithHost(Runtime& rt) : host(rt) {}
  RuntimeDeviceHost host;
};
}  // namespace detail

class CudaTarget final : private detail::WithHost, public CudaDevice {
 public:
  // Makes the Runtime's long-lived host storage page-locked: call it before
  // the program declares anything.
  explicit CudaTarget(Runtime& rt);
  // Stops the optimizer's thread, which calls into the device, first.
  ~CudaTarget() override;
  // The first time: the optimizer's callbacks, then the device's buffers.
  void prepare() override;
  Runtime& runtime() { return host.runtime(); }

 private:
  void wire(AsyncOptimizer& opt);
  bool wired_ = false;
};

// The Runtime's device (fails if the program runs without one).
CudaTarget& device_of(Runtime* rt);

}  // namespace fy::cuda
