// The runtime API for activations on SSD, the same on every target: the
// host arena is host memory on each.
#include "abi/api.h"
#include "device/device.h"
#include "exec/runtime.h"
#include "trace/trace.h"

namespace fy::rt {

namespace {
SsdSpill& spill(Runtime* rt) {
  if (!rt->ssd()) fail("an SSD transfer in a program that declared no SSD arena (declare_ssd_arena)");
  return *rt->ssd();
}
}  // namespace

void declare_ssd_arena(Runtime* rt, int64_t bytes) { rt->set_ssd_arena(bytes); }

View alloc_ssd_at(Runtime* rt, int64_t offset, Shape shape, DType dtype) {
  return spill(rt).place(offset, shape, dtype);
}

int64_t copy_to_ssd_start(Runtime* rt, View host, View ssd) {
  TraceSpan span(rt->trace(), "compute", "copy to ssd", -1, int64_t(host.nbytes()));
  // The device's copy into `host` must have landed before the write reads it.
  if (Device* d = rt->device()) d->settle_host(host.data, host.nbytes());
  return spill(rt).write(host, ssd);
}

void copy_to_ssd(Runtime* rt, View host, View ssd) { copy_to_ssd_start(rt, host, ssd); }

void ssd_wait(Runtime* rt, int64_t ticket) { spill(rt).wait(ticket); }

void copy_from_ssd(Runtime* rt, View ssd, View host) {
  TraceSpan span(rt->trace(), "compute", "copy from ssd", -1, int64_t(host.nbytes()));
  // A copy to the device may still read a buffer that was here before.
  if (Device* d = rt->device()) d->settle_host(host.data, host.nbytes());
  spill(rt).read(ssd, host);
}

}  // namespace fy::rt
