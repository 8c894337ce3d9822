// The runtime API that compiler-generated training programs call, the one
// runtime header they include: part of the declared compiler-runtime
// interface (runtime/abi/), in the core's tensors (views, shapes, dtypes)
// and an opaque Runtime. A program
// defines fy_declare (parameters and inputs), fy_train_step (one forward,
// backward and optimiser step) and fy_eval_step (the forward's loss alone:
// --val-data) and hands them to fy::train_main.
//
// Kernel entry points take inputs, then outputs, then static arguments, and
// forward to the target's kernels (fy::cpu or fy::cuda, whose argument
// order differs in a few places).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <string>

#include "core/tensor.h"

namespace fy {

class Runtime;
using DeclareFn = void (*)(Runtime*);
using TrainStepFn = void (*)(Runtime*, View /*token ids*/, View /*target ids*/, View /*loss, F32 scalar*/);

// The executable's main: parses flags, loads weights and data, runs the
// steps, logs, saves. Returns the process exit code; errors print one line
// "train: error: ..." on stderr and return 1.
// `eval` (null in programs compiled before it) has the step's signature.
int train_main(int argc, char** argv, DeclareFn declare, TrainStepFn step, TrainStepFn eval = nullptr);

// The generated program's main: train_main, after settling the threading
// environment (a short OpenMP spin) by re-executing itself once if needed.
int program_main(int argc, char** argv, DeclareFn declare, TrainStepFn step, TrainStepFn eval = nullptr);

}  // namespace fy

namespace fy::rt {

// ---- declarations ----
// Where the compile found each parameter (exec/weights.h); the generated
// program hands it over at static initialisation.
bool set_weight_sources(const char* manifest);
int64_t declare_param(Runtime* rt, const std::string& name, Shape shape, DType dtype, bool trainable);
void declare_inputs(Runtime* rt, Shape shape, int64_t vocab);
// The compiler's memory plan: the most bytes of temporaries alive at once,
// the size of the arena it places them in (0: they come from the pool), and
// of the host arena for activations kept in host memory.
void declare_memory_plan(Runtime* rt, int64_t peak_temp_bytes, int64_t arena_bytes = 0,
                         int64_t host_arena_bytes = 0);
// Activations wait on SSD (fuyou-compile --activations ssd): the SSD arena of
// the memory plan, a region of the store the run opens in --ssd.
void declare_ssd_arena(Runtime* rt, int64_t bytes);
// The program reads every parameter from its host master and copies what
// each phase needs to the device itself (fuyou-compile --params stream): a
// device keeps no resident working copies, and --gpu-mem does not count them.
void declare_streamed_params(Runtime* rt);
// The most bytes of rows one gather_up brings up (fy-rows-first): a device
// gathers them into a page-locked buffer of that size, which --cpu-mem counts.
void declare_gather_up(Runtime* rt, int64_t bytes);
// The arithmetic the program was compiled for: "fp32" (every target), "bf16"
// or "tf32" (matrix products on the CUDA target's tensor cores).
void declare_precision(Runtime* rt, const char* precision);
// The program's backward starts from loss_scale() instead of 1 (fuyou-compile
// --loss-scale dynamic): the run scales, checks and unscales its gradients.
void declare_loss_scaling(Runtime* rt);
// The device budget the program was planned for (fuyou-compile --gpu-mem):
// the run's --gpu-mem unless it names another. (The compiler's --cpu-mem
// bounds only the host arena it plans; the run's bounds all the optimizer
// holds besides, so it is no default.)
void declare_gpu_budget(Runtime* rt, int64_t bytes);
// The optimizer the program was compiled for: "adamw" or "adamw8bit" (the
// executable's --optimizer overrides it).
void declare_optimizer(Runtime* rt, const char* name);

// ---- buffers ----
View param(Runtime* rt, int64_t index);           // the parameter's storage
View param_host(Runtime* rt, int64_t index);      // its master in host memory (streamed programs)
View alloc(Runtime* rt, Shape shape, DType dtype);  // uninitialised temporary
// An uninitialised temporary at the place the memory plan gave it in the arena.
View alloc_at(Runtime* rt, int64_t offset, Shape shape, DType dtype);
// The same in host memory (page-locked on a device): activations waiting
// there for backward.
View alloc_host(Runtime* rt, Shape shape, DType dtype);
View alloc_host_at(Runtime* rt, int64_t offset, Shape shape, DType dtype);
void dealloc(Runtime* rt, View v);                // for alloc* / constant_* results
View view(Runtime* rt, View v, Shape shape);      // same storage, new shape
View constant_splat(Runtime* rt, Shape shape, DType dtype, double value);
View constant_f32(Runtime* rt, Shape shape, std::initializer_list<float> values);
View constant_i64(Runtime* rt, Shape shape, std::initializer_list<int64_t> values);
View constant_u8(Runtime* rt, Shape shape, std::initializer_list<uint8_t> values);
// The same, placed in the arena at `offset`.
View constant_splat(Runtime* rt, int64_t offset, Shape shape, DType dtype, double value);
View constant_f32(Runtime* rt, int64_t offset, Shape shape, std::initializer_list<float> values);
View constant_i64(Runtime* rt, int64_t offset, Shape shape, std::initializer_list<int64_t> values);
View constant_u8(Runtime* rt, int64_t offset, Shape shape, std::initializer_list<uint8_t> values);
void copy(Runtime* rt, View x, View y);
// Copies between the device and host memory, in program order.
void copy_to_host(Runtime* rt, View device, View host);
void copy_to_device(Runtime* rt, View host, View device);
// The same, started (fysched.copy with a token): the calls after it go on
// while it runs, and copy_wait(ticket) is where later work waits for it (on
// a GPU the compute stream waits; the calling thread does not block).
int64_t copy_to_host_start(Runtime* rt, View device, View host);
int64_t copy_to_device_start(Runtime* rt, View host, View device);
void copy_wait(Runtime* rt, int64_t ticket);
// A buffer of the SSD arena, and transfers between it and host-arena
// buffers. Both only start the I/O: the host buffer is settled before it is
// copied to the device or deallocated (exec/ssd_spill.h). A write started
// with a ticket (fysched.copy with a token) is waited for at ssd_wait, the
// calling thread blocking there if it is still in flight.
View alloc_ssd_at(Runtime* rt, int64_t offset, Shape shape, DType dtype);
void copy_to_ssd(Runtime* rt, View host, View ssd);
int64_t copy_to_ssd_start(Runtime* rt, View host, View ssd);
void ssd_wait(Runtime* rt, int64_t ticket);
void copy_from_ssd(Runtime* rt, View ssd, View host);

// ---- elementwise ----
void add(Runtime* rt, View a, View b, View out);
void sub(Runtime* rt, View a, View b, View out);
void mul(Runtime* rt, View a, View b, View out);
void div(Runtime* rt, View a, View b, View out);
void pow(Runtime* rt, View a, View b, View out);
void equal(Runtime* rt, View a, View b, View out);

void neg(Runtime* rt, View x, View y);
void sqrt(Runtime* rt, View x, View y);
void reciprocal(Runtime* rt, View x, View y);
void exp(Runtime* rt, View x, View y);
void tanh(Runtime* rt, View x, View y);
void erf(Runtime* rt, View x, View y);
void sigmoid(Runtime* rt, View x, View y);
void silu(Runtime* rt, View x, View y);
void gelu(Runtime* rt, View x, View y);
void gelu_tanh(Runtime* rt, View x, View y);

// dx = dy * f'(x); y = f(x) may be an empty View (then recomputed).
void unary_grad_neg(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_sqrt(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_reciprocal(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_exp(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_tanh(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_erf(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_sigmoid(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_silu(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_gelu(Runtime* rt, View x, View y, View dy, View dx);
void unary_grad_gelu_tanh(Runtime* rt, View x, View y, View dy, View dx);

// y = gelu(x + b), b along x's last dim (the sum rounded first, as add's);
// dx = dy * gelu'(x + b), y = bias_gelu's result.
void bias_gelu(Runtime* rt, View x, View b, View y);
void bias_gelu_tanh(Runtime* rt, View x, View b, View y);
void bias_gelu_grad(Runtime* rt, View x, View b, View y, View dy, View dx);
void bias_gelu_tanh_grad(Runtime* rt, View x, View b, View y, View dy, View dx);
// Their dx never stored in fp32: its sum over all but the last dim into db
// (b's gradient) and its 16-bit copy dx16, the bits of *_grad then
// reduce_sum_cast.
void bias_gelu_grad_sum(Runtime* rt, View x, View b, View y, View dy, View db, View dx16);
void bias_gelu_tanh_grad_sum(Runtime* rt, View x, View b, View y, View dy, View db, View dx16);

// y = silu(gate) * up (a SwiGLU MLP's product); its gradients from gate, up
// and dy, silu(gate) computed again rather than kept.
void swiglu(Runtime* rt, View gate, View up, View y);
void swiglu_grad(Runtime* rt, View gate, View up, View dy, View dgate, View dup);
// The same of the halves of x's last dim: gate, then up.
void swiglu_packed(Runtime* rt, View x, View y);
void swiglu_packed_grad(Runtime* rt, View x, View dy, View dx);

// RoPE's rotation of the halves (fygraph.rope): y = x cos + rotate_half(x)
// sin, cos and sin [T, D] indexed by x's dim seq_axis; with `transposed` the
// rotation's transpose (its gradient).
void rope(Runtime* rt, View x, View cos, View sin, View y, int64_t seq_axis, bool transposed);

void where(Runtime* rt, View cond, View a, View b, View out);
void cast(Runtime* rt, View x, View y);
void broadcast_to(Runtime* rt, View x, View y);

// ---- reductions (y keepdims-shaped) and linear algebra ----
void reduce_sum(Runtime* rt, View x, View y);
void reduce_sum_cast(Runtime* rt, View x, View y, View x16);
void reduce_mean(Runtime* rt, View x, View y);
void matmul(Runtime* rt, View a, View b, View c, bool trans_a, bool trans_b);
void matmul_bias(Runtime* rt, View a, View b, View bias, View c, bool trans_a, bool trans_b);

// ---- data movement ----
void transpose(Runtime* rt, View x, View y, std::initializer_list<int64_t> perm);
void slice(Runtime* rt, View x, View y, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps);
void slice_grad(Runtime* rt, View dy, View dx, std::initializer_list<int64_t> starts,
                std::initializer_list<int64_t> steps);
void concat_impl(Runtime* rt, int64_t axis, View out, std::initializer_list<View> ins);
template <class... Views>
void concat(Runtime* rt, int64_t axis, View out, Views... ins) {
  concat_impl(rt, axis, out, {View(ins)...});
}
void gather(Runtime* rt, View table, View idx, View out);
// The same from a table in host memory (a streamed master, fy-rows-first)
// into `out` on the device: only the rows idx names cross.
void gather_up(Runtime* rt, View table, View idx, View out);
void gather_grad(Runtime* rt, View dy, View idx, View dtable);
void gather_grad_add(Runtime* rt, View base, View dy, View idx, View dtable);

// ---- normalisation ----
void layer_norm(Runtime* rt, View x, View scale, View bias, View y, View mean, View inv_std, int64_t axis, double eps);
void layer_norm_nobias(Runtime* rt, View x, View scale, View y, View mean, View inv_std, int64_t axis, double eps);
// dbias / dscale may be empty Views when not wanted.
void layer_norm_grad(Runtime* rt, View dy, View x, View scale, View mean, View inv_std, View dx, View dscale,
                     View dbias, int64_t axis);
void rms_norm(Runtime* rt, View x, View scale, View y, View inv_rms, int64_t axis, double eps);
void rms_norm_grad(Runtime* rt, View dy, View x, View scale, View inv_rms, View dx, View dscale, int64_t axis);
void layer_norm_grad_add(Runtime* rt, View dy, View x, View scale, View mean, View inv_std, View addend, View dx,
                         View dscale, View dbias, int64_t axis);
void rms_norm_grad_add(Runtime* rt, View dy, View x, View scale, View inv_rms, View addend, View dx, View dscale,
                       int64_t axis);

// ---- softmax / loss ----
void softmax(Runtime* rt, View x, View y, int64_t axis);
void softmax_grad(Runtime* rt, View dy, View y, View dx, int64_t axis, double scale);
void masked_softmax(Runtime* rt, View x, View mask, View y, double scale);
// Fused causal attention (fygraph.attention), no T x T tensor: q [B, H, T, D],
// k and v [B, Hkv, T, D], out [B, H, T, D], lse [B, H, T]; window 0: causal;
// seq_major: q, k, v and out [B, T, heads, D].
void attention(Runtime* rt, View q, View k, View v, View out, View lse, double scale, int64_t window,
               bool seq_major);
void attention_grad(Runtime* rt, View q, View k, View v, View out, View lse, View dout, View dq, View dk, View dv,
                    double scale, int64_t window, bool seq_major);
// The same of q, k and v packed in one qkv [B, T, H + 2 Hkv, D]
// (fygraph.attention_qkv), its gradient into one dqkv.
void attention_qkv(Runtime* rt, View qkv, View out, View lse, int64_t kv_heads, double scale, int64_t window);
void attention_qkv_grad(Runtime* rt, View qkv, View out, View lse, View dout, View dqkv, int64_t kv_heads,
                        double scale, int64_t window);
// The loss of a Linear's logits x w^T (fygraph.linear_cross_entropy), never
// formed whole: x [..., D], w [V, D], labels [N]; with `grads`, dx and dw the
// loss's gradients for a gradient of 1 on it; block [R, V] holds R rows'
// logits at a time (R = linear_cross_entropy_rows(N, V, its element's
// bytes), abi/sizes.h): f32, or on the CUDA target at 16-bit precision bf16
// or fp16.
void linear_cross_entropy(Runtime* rt, View x, View w, View labels, View loss, View dx, View dw, View block,
                          int64_t ignore_index, bool mean, bool grads);
// ignore_index INT64_MIN means none.
void softmax_cross_entropy(Runtime* rt, View scores, View labels, View loss, View log_prob, int64_t ignore_index,
                           bool mean);
void softmax_cross_entropy_grad(Runtime* rt, View dloss, View log_prob, View labels, View dscores,
                                int64_t ignore_index, bool mean);

// ---- dropout ----
// The mask comes from Runtime::op_seed(seed): it depends on --seed, the step
// number and this op's seed.
void dropout(Runtime* rt, View x, View y, View mask, double ratio, int64_t seed);
void dropout_grad(Runtime* rt, View dy, View mask, View dx, double ratio);

// ---- loss scaling ----
// Fills the scalar `seed` with the loss's gradient for this step's backward:
// the current loss scale (after the previous step's verdict).
void loss_scale(Runtime* rt, View seed);

// ---- optimiser ----
// AdamW on parameter `index` with its gradient, at the current step.
void cpu_adamw(Runtime* rt, int64_t index, View grad);
// The same for a parameter of a group fy-device-optimizer put on the
// device: there, in stream order, its moments in device memory (the same
// bits). On the CPU target cpu_adamw itself.
void device_adamw(Runtime* rt, int64_t index, View grad);

// ---- layer groups updated in the background (AsyncOptimizer) ----
// Declared by fy_declare, in the order backward completes them; returns the id.
int64_t declare_group(Runtime* rt, std::initializer_list<int64_t> params);
// Declared by fy_declare after the groups, for each group_wait_rows of the
// step: the table it reads rows first and how many ids a step gathers, so
// that --cpu-mem counts the rows' buffers before the first step.
void declare_rows_first(Runtime* rt, int64_t group, int64_t param, int64_t ids);
// Declared by fy_declare after declare_rows_first, for each grad_offload_early
// of the step: the table handed over early (the buffers of the next batch's
// rows among its early ones count from the start), and whether a device
// sends its chunks down all at once (all_chunks) or one behind each other
// group's gradient, and whether the step reads the table after handing it
// over (held: the update writes it only after early_release).
void declare_early_rows(Runtime* rt, int64_t group, int64_t param, bool all_chunks = false, bool held = false);
// The parameters the program updates with device_adamw (fy-device-optimizer):
// the run may not ask for what only the layer-group optimizer does
// (clipping, accumulation), and the budgets count their moments.
void declare_device_optimizer(Runtime* rt, std::initializer_list<int64_t> params);
// A group's update as the program spells it (fysched grad_offload,
// state_read, group_adamw, state_write): each returns a token that the later
// ones take as their dependencies; all but grad_offload only queue work.
// The gradients start to leave the device in grad_offload: they may be freed
// after the group's grad_landed.
int64_t grad_offload_impl(Runtime* rt, int64_t group, std::initializer_list<View> grads);
template <class... Views>
int64_t grad_offload(Runtime* rt, int64_t group, Views... grads) {
  return grad_offload_impl(rt, group, {View(grads)...});
}
// fysched.grad_landed: the memory of the group's gradients may be used again
// from here (a device's kernels after it wait for their copy to the host).
void grad_landed(Runtime* rt, int64_t group);
int64_t state_read(Runtime* rt, int64_t group);
int64_t group_adamw_impl(Runtime* rt, int64_t group, std::initializer_list<int64_t> deps);
template <class... Tokens>
int64_t group_adamw(Runtime* rt, int64_t group, Tokens... deps) {
  return group_adamw_impl(rt, group, {int64_t(deps)...});
}
void state_write(Runtime* rt, int64_t group, int64_t update);
// Waits for the group's update before its parameters are read.
void group_wait(Runtime* rt, int64_t group);
// Waits only for parameter `param` of the group (fy-param-waits): the update
// of the group's later parameters may still be running.
void group_wait_param(Runtime* rt, int64_t group, int64_t param);
// Before a gather of the step's tokens `ids` from parameter `param` (a table
// of the group): waits only for the rows they name, which the group's update
// does first; a group_wait goes before the table's next read.
void group_wait_rows(Runtime* rt, int64_t group, int64_t param, View ids);
// fysched.grad_offload_early: `grad` is table `param`'s final gradient in
// every row the step's token ids do not name; the optimizer may update
// those rows now, while backward goes on (or decline: the group's
// grad_offload then brings them).
void grad_offload_early(Runtime* rt, int64_t group, int64_t param, View grad, View ids);
// fysched.early_release: the step's last read of table `param`, handed over
// held, is behind: its update may write the table (a device's uploads of it
// wait for the kernels issued so far).
void early_release(Runtime* rt, int64_t group, int64_t param);

}  // namespace fy::rt
