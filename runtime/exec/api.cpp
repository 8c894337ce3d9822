#include "abi/api.h"
#include "device/device.h"
#include "exec/runtime.h"

#include "abi/entry_points.h"

#include <cstring>
#include <unordered_map>

#include "kernels/cpu/kernels.h"
#include "trace/trace.h"

namespace fy {
// The CPU target runs its kernels where the data is: no device.
std::unique_ptr<Device> make_device(Runtime&) { return nullptr; }
}  // namespace fy

namespace fy::rt {

// A slice on the compute track for each kernel when the run is traced, with
// its operands' bytes (counted only when tracing).
#define FY_KERNEL_SPAN(rt, name, ...) \
  TraceSpan fy_span_((rt)->trace(), "compute", name, -1, (rt)->trace() ? nbytes_of({__VA_ARGS__}) : -1)

// Everything in fp32; at bf16 or fp16 the matrix products round their
// operands first, as the CUDA target's tensor cores do.
void declare_precision(Runtime*, const char* precision) {
  std::string p = precision;
  if (p == "fp32") cpu::set_matmul_operands(cpu::MatmulOperands::FP32);
  else if (p == "bf16") cpu::set_matmul_operands(cpu::MatmulOperands::BF16);
  else if (p == "fp16") cpu::set_matmul_operands(cpu::MatmulOperands::FP16);
  else fail("the program asks for precision '" + p + "', which the CPU target does not have (fp32, bf16, fp16)");
}

View param(Runtime* rt, int64_t index) { return rt->param(index).value; }
View alloc(Runtime* rt, Shape shape, DType dtype) { return rt->alloc(shape, dtype); }
View alloc_at(Runtime* rt, int64_t offset, Shape shape, DType dtype) { return rt->alloc_at(offset, shape, dtype); }
// The device is host memory: a transfer is a copy.
View alloc_host(Runtime* rt, Shape shape, DType dtype) { return rt->alloc(shape, dtype); }
void copy_to_host(Runtime* rt, View device, View host) {
  FY_KERNEL_SPAN(rt, "copy to host", device, host);
  cpu::copy(device, host);
}
void copy_to_device(Runtime* rt, View host, View device) {
  FY_KERNEL_SPAN(rt, "copy to device", host, device);
  if (rt->ssd()) rt->ssd()->settle(host.data);
  cpu::copy(host, device);
}

// Started copies run at once: the kernels on the CPU use every core, so a
// copy thread would only take time from them. With the option defer_copies
// they run at their copy_wait instead, the latest the program allows: a wait
// placed after a read of the target, or after a write of the source, then
// changes the results (tests run placements so).
namespace {
struct Started {
  View from, to;
  bool to_device;
  bool done = false;  // run ahead of its wait (run_uploads_of_group)
};
std::unordered_map<int64_t, Started>& started() {
  static std::unordered_map<int64_t, Started> m;
  return m;
}
int64_t start_copy(Runtime* rt, View from, View to, bool to_device) {
  static int64_t next = 0;
  if (!rt->options().defer_copies) {
    (to_device ? copy_to_device : copy_to_host)(rt, from, to);
    return -1;
  }
  if (from.nbytes() != to.nbytes())
    fail("copy: " + from.shape.str() + " and " + to.shape.str() + " differ in size");
  started()[next] = {from, to, to_device, false};
  return next++;
}
// Deferred uploads that read a master run before its update rewrites it
// (grad_offload lets a group's go; cpu_adamw runs one at once): a copy
// started before must see the values of when it started. No compiled
// program waits that late; a hand-written one may.
void run_uploads_reading(Runtime* rt, int64_t param) {
  const View& m = rt->param(param).value;
  const char* lo = static_cast<const char*>(m.data);
  for (auto& entry : started()) {
    Started& c = entry.second;
    const char* from = static_cast<const char*>(c.from.data);
    if (c.to_device && !c.done && from < lo + m.nbytes() && lo < from + c.from.nbytes()) {
      copy_to_device(rt, c.from, c.to);
      c.done = true;
    }
  }
}
void run_uploads_of_group(Runtime* rt, int64_t group) {
  if (started().empty() || !rt->has_async_optimizer()) return;
  for (int64_t p : rt->async_optimizer().group_params(group)) run_uploads_reading(rt, p);
}
}  // namespace

int64_t copy_to_host_start(Runtime* rt, View device, View host) { return start_copy(rt, device, host, false); }
int64_t copy_to_device_start(Runtime* rt, View host, View device) { return start_copy(rt, host, device, true); }
void copy_wait(Runtime* rt, int64_t ticket) {
  if (ticket < 0) return;
  auto it = started().find(ticket);
  if (it == started().end()) fail("copy_wait: no copy started with ticket " + std::to_string(ticket));
  Started c = it->second;
  started().erase(it);
  if (!c.done) (c.to_device ? copy_to_device : copy_to_host)(rt, c.from, c.to);
}

void dealloc(Runtime* rt, View v) { rt->dealloc(v); }

namespace {
View temp(Runtime* rt, int64_t offset, Shape shape, DType dtype) {
  return offset < 0 ? rt->alloc(shape, dtype) : rt->alloc_at(offset, shape, dtype);
}
}  // namespace

View constant_splat(Runtime* rt, int64_t offset, Shape shape, DType dtype, double value) {
  View v = temp(rt, offset, shape, dtype);
  cpu::fill(v, value);
  return v;
}

namespace {
template <class T> View constant_of(Runtime* rt, int64_t offset, Shape shape, std::initializer_list<T> values) {
  if (int64_t(values.size()) != shape.numel())
    fail("constant: " + std::to_string(values.size()) + " values for shape " + shape.str());
  View v = temp(rt, offset, shape, DTypeOf<T>::value);
  if (values.size()) std::memcpy(v.data, values.begin(), values.size() * sizeof(T));
  return v;
}
}  // namespace

namespace K = ::fy::cpu;
#include "exec/api_kernels.inc"

// Host memory is the device's: the plain gather.
void gather_up(Runtime* rt, View table, View idx, View out) {
  FY_KERNEL_SPAN(rt, "gather_up", table, idx, out);
  K::gather(table, idx, out);
}

void cpu_adamw(Runtime* rt, int64_t index, View grad) {
  if (!started().empty()) run_uploads_reading(rt, index);
  rt->adamw(index, grad);
}

void device_adamw(Runtime* rt, int64_t index, View grad) { cpu_adamw(rt, index, grad); }

int64_t grad_offload_impl(Runtime* rt, int64_t group, std::initializer_list<View> grads) {
  TraceSpan span(rt->trace(), "compute", "gradients out, group ", group);
  run_uploads_of_group(rt, group);
  return rt->async_optimizer().offload(group, grads.begin(), grads.size());
}
// grad_offload copied them on this thread.
void grad_landed(Runtime*, int64_t) {}
void group_wait(Runtime* rt, int64_t group) {
  TraceSpan span(rt->trace(), "compute", "wait for group ", group);
  rt->async_optimizer().wait(group);
}
void group_wait_param(Runtime* rt, int64_t group, int64_t param) {
  TraceSpan span(rt->trace(), "compute", "wait for parameter ", param);
  rt->async_optimizer().wait_param(group, param);
}
void group_wait_rows(Runtime* rt, int64_t group, int64_t param, View ids) {
  TraceSpan span(rt->trace(), "compute", "wait for rows of group ", group);
  rt->async_optimizer().wait_rows(group, param, ids.as<int64_t>(), ids.numel());
}
namespace {
void hand_over_early(Runtime* rt, int64_t group, int64_t param, View grad, View ids) {
  TraceSpan span(rt->trace(), "compute", "early rows out, group ", group);
  if (!started().empty()) run_uploads_reading(rt, param);
  rt->async_optimizer().offload_early(group, param, grad, ids.as<int64_t>(), ids.numel());
}
}  // namespace
void grad_offload_early(Runtime* rt, int64_t group, int64_t param, View grad, View ids) {
  hand_over_early(rt, group, param, grad, ids);
}
void early_release(Runtime* rt, int64_t group, int64_t param) {
  // The kernels are done (they run on this thread); copies started from
  // the table since the hand-over still read it.
  if (!started().empty()) run_uploads_reading(rt, param);
  rt->async_optimizer().release_early(group, param);
}

}  // namespace fy::rt

// Every entry point the compiler may call (abi/entry_points.h) is declared
// in abi/api.h: a name missing here fails this build.
namespace fy::rt::entry_points_declared {
#define FY_DECLARED(name) using fy::rt::name;
FY_RT_ENTRY_POINTS(FY_DECLARED)
#undef FY_DECLARED
}  // namespace fy::rt::entry_points_declared
