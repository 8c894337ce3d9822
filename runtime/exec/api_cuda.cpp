// The CUDA target's entry points: the same API as api.cpp, with buffers in
// device memory (device/cuda) and the kernels of kernels/cuda.
#include "device/cuda/device.h"
#include "abi/api.h"
#include "exec/device.h"
#include "exec/runtime.h"
#include "kernels/cuda/kernels.h"
#include "trace/trace.h"

namespace fy::rt {

namespace {
// When tracing: the kernel's launch on the "compute" track (host time) and,
// through events around it, its run on the "gpu" track.
class KernelSpan {
 public:
  KernelSpan(Runtime* rt, const char* name, int64_t bytes) : host_(rt->trace(), "compute", name, -1, bytes) {
    if (rt->trace()) {
      dev_ = &cuda::device_of(rt);
      dev_->kernel_start(name, bytes);
    }
  }
  ~KernelSpan() {
    if (dev_) dev_->kernel_end();
  }
  KernelSpan(const KernelSpan&) = delete;
  KernelSpan& operator=(const KernelSpan&) = delete;

 private:
  TraceSpan host_;
  cuda::CudaDevice* dev_ = nullptr;
};
}  // namespace
#define FY_KERNEL_SPAN(rt, name, ...) KernelSpan fy_span_((rt), name, (rt)->trace() ? nbytes_of({__VA_ARGS__}) : -1)

using cuda::device_of;

void declare_precision(Runtime*, const char* precision) {
  std::string p = precision;
  if (p == "bf16") cuda::set_matmul_precision(cuda::MatmulPrecision::BF16);
  else if (p == "fp16") cuda::set_matmul_precision(cuda::MatmulPrecision::FP16);
  else if (p == "tf32") cuda::set_matmul_precision(cuda::MatmulPrecision::TF32);
  else if (p == "fp32") cuda::set_matmul_precision(cuda::MatmulPrecision::FP32);
  else fail("the program asks for precision '" + p + "', which the CUDA runtime does not have (bf16, fp16, tf32, fp32)");
}

View param(Runtime* rt, int64_t index) { return device_of(rt).param(index); }
View alloc(Runtime* rt, Shape shape, DType dtype) { return device_of(rt).alloc(shape, dtype); }
View alloc_at(Runtime* rt, int64_t offset, Shape shape, DType dtype) {
  return device_of(rt).alloc_at(offset, shape, dtype);
}
View alloc_host(Runtime* rt, Shape shape, DType dtype) { return rt->alloc(shape, dtype); }
void dealloc(Runtime* rt, View v) { device_of(rt).dealloc(v); }
void copy_to_host(Runtime* rt, View device, View host) {
  FY_KERNEL_SPAN(rt, "copy to host", device, host);
  device_of(rt).transfer(device, host, cudaMemcpyDeviceToHost);
}
void copy_to_device(Runtime* rt, View host, View device) {
  FY_KERNEL_SPAN(rt, "copy to device", host, device);
  if (rt->ssd()) rt->ssd()->settle(host.data);
  device_of(rt).transfer(host, device, cudaMemcpyHostToDevice);
}
int64_t copy_to_host_start(Runtime* rt, View device, View host) {
  TraceSpan span(rt->trace(), "compute", "start copy to host", -1, int64_t(host.nbytes()));
  return device_of(rt).copy_start(device, host, cudaMemcpyDeviceToHost);
}
int64_t copy_to_device_start(Runtime* rt, View host, View device) {
  TraceSpan span(rt->trace(), "compute", "start copy to device", -1, int64_t(host.nbytes()));
  if (rt->ssd()) rt->ssd()->settle(host.data);
  return device_of(rt).copy_start(host, device, cudaMemcpyHostToDevice);
}
void copy_wait(Runtime* rt, int64_t ticket) { device_of(rt).copy_wait(ticket); }

View constant_splat(Runtime* rt, int64_t offset, Shape shape, DType dtype, double value) {
  View v = offset < 0 ? device_of(rt).alloc(shape, dtype) : device_of(rt).alloc_at(offset, shape, dtype);
  cuda::fill(v, value);
  return v;
}

namespace {
template <class T> View constant_of(Runtime* rt, int64_t offset, Shape shape, std::initializer_list<T> values) {
  if (int64_t(values.size()) != shape.numel())
    fail("constant: " + std::to_string(values.size()) + " values for shape " + shape.str());
  return device_of(rt).upload_temp(offset, shape, DTypeOf<T>::value, values.begin());
}
}  // namespace


namespace K = ::fy::cuda;
#include "exec/api_kernels.inc"

void cpu_adamw(Runtime* rt, int64_t index, View grad) { device_of(rt).adamw(index, grad); }
void device_adamw(Runtime* rt, int64_t index, View grad) {
  FY_KERNEL_SPAN(rt, "adamw", grad, grad, grad, grad, grad, grad, grad);  // p, m, v read and written, g read
  device_of(rt).device_adamw(index, grad);
}

int64_t grad_offload_impl(Runtime* rt, int64_t group, std::initializer_list<View> grads) {
  return device_of(rt).grad_offload(group, grads.begin(), grads.size());
}
void grad_landed(Runtime* rt, int64_t group) { device_of(rt).grad_landed(group); }
void group_wait(Runtime* rt, int64_t group) {
  TraceSpan span(rt->trace(), "compute", "wait for group ", group);
  device_of(rt).group_wait(group);
}
void group_wait_param(Runtime* rt, int64_t group, int64_t param) {
  TraceSpan span(rt->trace(), "compute", "wait for parameter ", param);
  device_of(rt).group_wait_param(group, param);
}
void gather_up(Runtime* rt, View table, View idx, View out) {
  FY_KERNEL_SPAN(rt, "gather_up", table, idx, out);
  device_of(rt).gather_up(table, idx, out);
}
void group_wait_rows(Runtime* rt, int64_t group, int64_t param, View ids) {
  TraceSpan span(rt->trace(), "compute", "wait for rows of group ", group);
  device_of(rt).group_wait_rows(group, param, ids);
}
void grad_offload_early(Runtime* rt, int64_t group, int64_t param, View grad, View ids) {
  TraceSpan span(rt->trace(), "compute", "early rows out, group ", group);
  device_of(rt).grad_offload_early(group, param, grad, ids);
}
void early_release(Runtime* rt, int64_t group, int64_t param) {
  device_of(rt).early_release(group, param);
}

}  // namespace fy::rt
