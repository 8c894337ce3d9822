// The entry points of the background optimizer's pipeline that are the same
// on every target; grad_offload and group_wait touch the device, so each
// target's api file has its own.
#include "abi/api.h"
#include "device/device.h"
#include "trace/trace.h"
#include "exec/runtime.h"

namespace fy::rt {

int64_t declare_group(Runtime* rt, std::initializer_list<int64_t> params) {
  return rt->async_optimizer().declare_group(std::vector<int64_t>(params));
}
void declare_rows_first(Runtime* rt, int64_t group, int64_t param, int64_t ids) {
  rt->async_optimizer().declare_rows(group, param, ids);
}
void declare_early_rows(Runtime* rt, int64_t group, int64_t param, bool all_chunks, bool held) {
  rt->async_optimizer().declare_early(group, param, all_chunks, held);
}
void declare_device_optimizer(Runtime* rt, std::initializer_list<int64_t> params) {
  rt->set_inline_updates(std::vector<int64_t>(params));
}
int64_t state_read(Runtime* rt, int64_t group) { return rt->async_optimizer().read(group); }
int64_t group_adamw_impl(Runtime* rt, int64_t group, std::initializer_list<int64_t> deps) {
  return rt->async_optimizer().update(group, deps.begin(), deps.size());
}
void state_write(Runtime* rt, int64_t group, int64_t update) { rt->async_optimizer().write(group, update); }

}  // namespace fy::rt
