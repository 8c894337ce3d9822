#include "exec/api.h"

#include <cstring>

#include "trace/trace.h"

namespace fy::rt {

// A slice on the compute track for each kernel when the run is traced.
#define FY_KERNEL_SPAN(rt, name) TraceSpan fy_span_((rt)->trace(), "compute", name)

using cpu::BinOp;
using cpu::UnOp;

int64_t declare_param(Runtime* rt, const std::string& name, Shape shape, DType dtype, bool trainable) {
  return rt->declare_param(name, shape, dtype, trainable);
}
void declare_inputs(Runtime* rt, Shape shape, int64_t vocab) { rt->declare_inputs(shape, vocab); }
void declare_memory_plan(Runtime* rt, int64_t peak_temp_bytes) { rt->set_planned_temp_bytes(peak_temp_bytes); }

View param(Runtime* rt, int64_t index) { return rt->param(index).value; }
View alloc(Runtime* rt, Shape shape, DType dtype) { return rt->alloc(shape, dtype); }
void dealloc(Runtime* rt, View v) { rt->dealloc(v); }
View view(Runtime* rt, View v, Shape shape) { return v.reshaped(shape); }

View constant_splat(Runtime* rt, Shape shape, DType dtype, double value) {
  View v = rt->alloc(shape, dtype);
  cpu::fill(v, value);
  return v;
}

namespace {
template <class T> View constant_of(Runtime* rt, Shape shape, std::initializer_list<T> values) {
  if (int64_t(values.size()) != shape.numel())
    fail("constant: " + std::to_string(values.size()) + " values for shape " + shape.str());
  View v = rt->alloc(shape, DTypeOf<T>::value);
  if (values.size()) std::memcpy(v.data, values.begin(), values.size() * sizeof(T));
  return v;
}
}  // namespace

View constant_f32(Runtime* rt, Shape shape, std::initializer_list<float> values) {
  return constant_of(rt, shape, values);
}
View constant_i64(Runtime* rt, Shape shape, std::initializer_list<int64_t> values) {
  return constant_of(rt, shape, values);
}
View constant_u8(Runtime* rt, Shape shape, std::initializer_list<uint8_t> values) {
  return constant_of(rt, shape, values);
}
void copy(Runtime* rt, View x, View y) { FY_KERNEL_SPAN(rt, "copy"); cpu::copy(x, y); }

void add(Runtime* rt, View a, View b, View out) { FY_KERNEL_SPAN(rt, "add"); cpu::binary(BinOp::Add, a, b, out); }
void sub(Runtime* rt, View a, View b, View out) { FY_KERNEL_SPAN(rt, "sub"); cpu::binary(BinOp::Sub, a, b, out); }
void mul(Runtime* rt, View a, View b, View out) { FY_KERNEL_SPAN(rt, "mul"); cpu::binary(BinOp::Mul, a, b, out); }
void div(Runtime* rt, View a, View b, View out) { FY_KERNEL_SPAN(rt, "div"); cpu::binary(BinOp::Div, a, b, out); }
void pow(Runtime* rt, View a, View b, View out) { FY_KERNEL_SPAN(rt, "pow"); cpu::binary(BinOp::Pow, a, b, out); }
void equal(Runtime* rt, View a, View b, View out) { FY_KERNEL_SPAN(rt, "equal"); cpu::equal(a, b, out); }

#define FY_UNARY(name, op)                                                               \
  void name(Runtime* rt, View x, View y) {                                              \
    FY_KERNEL_SPAN(rt, #name);                                                          \
    cpu::unary(UnOp::op, x, y);                                                         \
  }                                                                                     \
  void unary_grad_##name(Runtime* rt, View x, View y, View dy, View dx) {                  \
    FY_KERNEL_SPAN(rt, "unary_grad_" #name);                                            \
    cpu::unary_grad(UnOp::op, x, y, dy, dx);                                            \
  }
FY_UNARY(neg, Neg)
FY_UNARY(sqrt, Sqrt)
FY_UNARY(reciprocal, Reciprocal)
FY_UNARY(exp, Exp)
FY_UNARY(tanh, Tanh)
FY_UNARY(erf, Erf)
FY_UNARY(sigmoid, Sigmoid)
FY_UNARY(silu, Silu)
FY_UNARY(gelu, Gelu)
FY_UNARY(gelu_tanh, GeluTanh)
#undef FY_UNARY

void where(Runtime* rt, View cond, View a, View b, View out) { FY_KERNEL_SPAN(rt, "where"); cpu::where(cond, a, b, out); }
void cast(Runtime* rt, View x, View y) { FY_KERNEL_SPAN(rt, "cast"); cpu::cast(x, y); }
void broadcast_to(Runtime* rt, View x, View y) { FY_KERNEL_SPAN(rt, "broadcast_to"); cpu::broadcast_to(x, y); }

void reduce_sum(Runtime* rt, View x, View y) { FY_KERNEL_SPAN(rt, "reduce_sum"); cpu::reduce_to(x, y, false); }
void reduce_mean(Runtime* rt, View x, View y) { FY_KERNEL_SPAN(rt, "reduce_mean"); cpu::reduce_to(x, y, true); }
void matmul(Runtime* rt, View a, View b, View c, bool trans_a, bool trans_b) { FY_KERNEL_SPAN(rt, "matmul"); cpu::matmul(a, b, c, trans_a, trans_b); }

void transpose(Runtime* rt, View x, View y, std::initializer_list<int64_t> perm) { FY_KERNEL_SPAN(rt, "transpose"); cpu::transpose(x, y, perm); }
void slice(Runtime* rt, View x, View y, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps) { FY_KERNEL_SPAN(rt, "slice");
  cpu::slice(x, y, starts, steps);
}
void slice_grad(Runtime* rt, View dy, View dx, std::initializer_list<int64_t> starts,
                std::initializer_list<int64_t> steps) { FY_KERNEL_SPAN(rt, "slice_grad");
  cpu::slice_grad(dy, dx, starts, steps);
}
void gather(Runtime* rt, View table, View idx, View out) { FY_KERNEL_SPAN(rt, "gather"); cpu::gather(table, idx, out); }
void gather_grad(Runtime* rt, View dy, View idx, View dtable) { FY_KERNEL_SPAN(rt, "gather_grad"); cpu::gather_grad(idx, dy, dtable); }

void layer_norm(Runtime* rt, View x, View scale, View bias, View y, View mean, View inv_std, int64_t axis, double eps) { FY_KERNEL_SPAN(rt, "layer_norm");
  cpu::layer_norm(x, scale, bias, y, mean, inv_std, axis, eps);
}
void layer_norm_nobias(Runtime* rt, View x, View scale, View y, View mean, View inv_std, int64_t axis, double eps) { FY_KERNEL_SPAN(rt, "layer_norm_nobias");
  cpu::layer_norm(x, scale, View{}, y, mean, inv_std, axis, eps);
}
void layer_norm_grad(Runtime* rt, View dy, View x, View scale, View mean, View inv_std, View dx, View dscale,
                     View dbias, int64_t axis) { FY_KERNEL_SPAN(rt, "layer_norm_grad");
  cpu::layer_norm_grad(dy, x, scale, mean, inv_std, dx, dscale, dbias, axis);
}
void rms_norm(Runtime* rt, View x, View scale, View y, View inv_rms, int64_t axis, double eps) { FY_KERNEL_SPAN(rt, "rms_norm");
  cpu::rms_norm(x, scale, y, inv_rms, axis, eps);
}
void rms_norm_grad(Runtime* rt, View dy, View x, View scale, View inv_rms, View dx, View dscale, int64_t axis) { FY_KERNEL_SPAN(rt, "rms_norm_grad");
  cpu::rms_norm_grad(dy, x, scale, inv_rms, dx, dscale, axis);
}

void softmax(Runtime* rt, View x, View y, int64_t axis) { FY_KERNEL_SPAN(rt, "softmax"); cpu::softmax(x, y, axis); }
void softmax_grad(Runtime* rt, View dy, View y, View dx, int64_t axis) { FY_KERNEL_SPAN(rt, "softmax_grad"); cpu::softmax_grad(y, dy, dx, axis); }
void softmax_cross_entropy(Runtime* rt, View scores, View labels, View loss, View log_prob, int64_t ignore_index,
                           bool mean) { FY_KERNEL_SPAN(rt, "softmax_cross_entropy");
  cpu::softmax_cross_entropy(scores, labels, loss, log_prob, ignore_index, mean);
}
void softmax_cross_entropy_grad(Runtime* rt, View dloss, View log_prob, View labels, View dscores, int64_t ignore_index,
                                bool mean) { FY_KERNEL_SPAN(rt, "softmax_cross_entropy_grad");
  cpu::softmax_cross_entropy_grad(dloss, log_prob, labels, dscores, ignore_index, mean);
}

void dropout(Runtime* rt, View x, View y, View mask, double ratio, int64_t seed) { FY_KERNEL_SPAN(rt, "dropout");
  cpu::dropout(x, y, mask, ratio, rt->op_seed(seed));
}
void dropout_grad(Runtime* rt, View dy, View mask, View dx, double ratio) { FY_KERNEL_SPAN(rt, "dropout_grad"); cpu::dropout_grad(dy, mask, dx, ratio); }

void cpu_adamw(Runtime* rt, int64_t index, View grad) { rt->adamw(index, grad); }

int64_t declare_group(Runtime* rt, std::initializer_list<int64_t> params) {
  return rt->async_optimizer().declare_group(std::vector<int64_t>(params));
}
void group_update_impl(Runtime* rt, int64_t group, std::initializer_list<View> grads) {
  TraceSpan span(rt->trace(), "compute", "gradients out, group ", group);
  rt->async_optimizer().start(group, grads.begin(), grads.size());
}
void group_wait(Runtime* rt, int64_t group) {
  TraceSpan span(rt->trace(), "compute", "wait for group ", group);
  rt->async_optimizer().wait(group);
}

}  // namespace fy::rt
