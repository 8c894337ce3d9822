// The CUDA target's entry points: the same API as api.cpp, with buffers in
// device memory (device/cuda) and the kernels of kernels/cuda. The
// optimizer's entry points order its calls around the device's waits.
#include "abi/api.h"
#include "exec/cuda_target.h"
#include "exec/runtime.h"
#include "kernels/cuda/kernels.h"
// The step's AdamW scalars as the CPU computes them, for device_adamw.
#include "optim/adamw_kernels.h"
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
  cuda::CudaTarget* dev_ = nullptr;
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

void cpu_adamw(Runtime* rt, int64_t index, View grad) {
  cuda::CudaTarget& d = device_of(rt);
  View host;
  {
    TraceSpan span(rt->trace(), "device", "gradient out ", index, int64_t(grad.nbytes()));
    host = d.gradient_to_host(grad);
  }
  // As in grad_offload: a started upload of this master reads it first.
  d.settle_master(index);
  rt->adamw(index, host);
  if (!rt->streamed_params()) d.param_up(index);
}

void device_adamw(Runtime* rt, int64_t index, View grad) {
  FY_KERNEL_SPAN(rt, "adamw", grad, grad, grad, grad, grad, grad, grad);  // p, m, v read and written, g read
  cuda::CudaTarget& d = device_of(rt);
  const Runtime::Param& p = rt->param(index);
  if (!p.trainable) fail("device_adamw: parameter '" + p.name + "' is not trainable");
  if (grad.dtype != DType::F32 || grad.numel() != p.value.numel())
    fail("device_adamw: gradient of '" + p.name + "' is " + dtype_name(grad.dtype) + " " + grad.shape.str() +
         ", parameter is F32 " + p.value.shape.str());
  const int64_t step = rt->step();
  if (step < 1) fail("device_adamw: step number must start at 1, got " + std::to_string(step));
  // The working copy is the master while the device updates it; its moments
  // start from the host's (zeros, or a checkpoint's).
  if (rt->streamed_params() || p.q8_block || !p.m.data)
    fail("device_adamw: '" + p.name + "' is updated on the device (fuyou-compile --device-optimizer), which needs "
         "resident parameters and fp32 moments in memory: run without --ssd, --params stream and 8-bit state");
  if (rt->recording_grads()) {  // --dump-grads: step 1's gradient, as cpu_adamw records it
    std::vector<float> host(size_t(grad.numel()));
    d.download(grad, host.data());
    rt->record_grad(index, View{host.data(), grad.shape, DType::F32});
  }
  const adamw_detail::Scalars s = adamw_detail::make_scalars(rt->param_config(rt->adamw_config(step), index), step);
  d.device_adamw(index, grad,
                 {s.decay, s.beta1, s.one_m_b1, s.beta2, s.one_m_b2, s.neg_step_size, s.bc2_sqrt, s.eps, s.unscale,
                  s.coef});
}

int64_t grad_offload_impl(Runtime* rt, int64_t group, std::initializer_list<View> grads) {
  TraceSpan span(rt->trace(), "device", "gradients out, group ", group);
  cuda::CudaTarget& d = device_of(rt);
  AsyncOptimizer& opt = rt->async_optimizer();
  d.gradients_ready();
  // The update this lets go rewrites the group's masters: an upload of them
  // started before must have read them (no compiled program waits that late).
  for (int64_t p : opt.group_params(group)) d.settle_master(p);
  const int64_t token = opt.offload(group, grads.begin(), grads.size());
  d.gradients_offloaded(group);
  return token;
}
void grad_landed(Runtime* rt, int64_t group) { device_of(rt).grad_landed(group); }
void group_wait(Runtime* rt, int64_t group) {
  TraceSpan span(rt->trace(), "compute", "wait for group ", group);
  rt->async_optimizer().wait(group);
  device_of(rt).wait_group_upload(group);
}
void group_wait_param(Runtime* rt, int64_t group, int64_t param) {
  TraceSpan span(rt->trace(), "compute", "wait for parameter ", param);
  rt->async_optimizer().wait_param(group, param);
  // Streamed parameters are copied up by the program itself.
  if (!rt->streamed_params()) device_of(rt).wait_param_upload(param);
}
void gather_up(Runtime* rt, View table, View idx, View out) {
  FY_KERNEL_SPAN(rt, "gather_up", table, idx, out);
  device_of(rt).gather_up(table, idx, out);
}
void group_wait_rows(Runtime* rt, int64_t group, int64_t param, View ids) {
  TraceSpan span(rt->trace(), "compute", "wait for rows of group ", group);
  cuda::CudaTarget& d = device_of(rt);
  // The optimizer compares the host copy of the step's tokens; other ids wait for everything.
  const int64_t* host_ids = d.step_ids(ids);
  if (!host_ids) {
    rt->async_optimizer().wait(group);
    return d.wait_group_upload(group);
  }
  d.wait_rows_upload(group, rt->async_optimizer().wait_rows(group, param, host_ids, ids.numel()));
}
void grad_offload_early(Runtime* rt, int64_t group, int64_t param, View grad, View ids) {
  TraceSpan span(rt->trace(), "compute", "early rows out, group ", group);
  cuda::CudaTarget& d = device_of(rt);
  // The optimizer needs the step's tokens on the host; other ids: the whole update later.
  const int64_t* host_ids = d.step_ids(ids);
  if (!host_ids) return;
  // Behind the kernels that wrote the gradient (and, unless the part is
  // held for early_release, read the table last).
  d.gradients_ready();
  d.settle_master(param);
  if (rt->async_optimizer().offload_early(group, param, grad, host_ids, ids.numel())) d.early_offloaded(group);
}
void early_release(Runtime* rt, int64_t group, int64_t param) {
  cuda::CudaTarget& d = device_of(rt);
  if (!d.early_held(group)) return;  // declined: the group's update brings it all
  d.early_read(param);
  d.settle_master(param);
  rt->async_optimizer().release_early(group, param);
}

}  // namespace fy::rt
