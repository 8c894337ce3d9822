// The program's entry points: every fy::rt function a generated program
// may call (runtime/abi/api.h declares them). The runtime's build checks
// that each is declared there (exec/api.cpp) and the EmitC conversion that
// each call it writes names one, so a name that changes on one side fails
// on the other before a program is built from it. Part of the declared
// compiler-runtime interface.
#pragma once

// X(name) for each entry point.
#define FY_RT_ENTRY_POINTS(X) \
  X(add) X(alloc) X(attention) X(attention_grad) X(attention_qkv) X(attention_qkv_grad) X(alloc_at) X(alloc_host) X(alloc_host_at) X(alloc_ssd_at) X(bias_gelu) \
  X(bias_gelu_grad) X(bias_gelu_grad_sum) X(bias_gelu_tanh) X(bias_gelu_tanh_grad) X(bias_gelu_tanh_grad_sum) X(broadcast_to) X(cast) X(concat) \
  X(constant_f32) X(constant_i64) X(constant_splat) X(constant_u8) X(copy) X(copy_from_ssd) \
  X(copy_to_device) X(copy_to_device_start) X(copy_to_host) X(copy_to_host_start) X(copy_to_ssd) \
  X(copy_to_ssd_start) X(copy_wait) X(cpu_adamw) X(dealloc) X(declare_device_optimizer) \
  X(declare_early_rows) X(declare_gather_up) X(declare_gpu_budget) X(declare_group) \
  X(declare_inputs) X(declare_loss_scaling) X(declare_memory_plan) X(declare_optimizer) \
  X(declare_param) X(declare_precision) X(declare_rows_first) X(declare_ssd_arena) \
  X(declare_streamed_params) X(device_adamw) X(div) X(dropout) X(dropout_grad) X(early_release) \
  X(equal) X(erf) X(exp) X(gather) X(gather_grad) X(gather_grad_add) X(gather_up) X(gelu) \
  X(gelu_tanh) X(grad_landed) X(grad_offload) X(grad_offload_early) X(group_adamw) X(group_wait) \
  X(group_wait_param) X(group_wait_rows) X(layer_norm) X(layer_norm_grad) X(layer_norm_grad_add) X(layer_norm_nobias) \
  X(linear_cross_entropy) \
  X(loss_scale) X(masked_softmax) X(matmul) X(matmul_bias) X(mul) X(neg) X(param) X(param_host) X(pow) \
  X(reciprocal) X(reduce_mean) X(reduce_sum) X(reduce_sum_cast) X(rms_norm) X(rms_norm_grad) X(rms_norm_grad_add) X(rope) X(set_weight_sources) \
  X(sigmoid) X(silu) X(slice) X(slice_grad) X(softmax) X(softmax_cross_entropy) \
  X(softmax_cross_entropy_grad) X(softmax_grad) X(sqrt) X(ssd_wait) X(state_read) X(state_write) \
  X(sub) X(swiglu) X(swiglu_grad) X(swiglu_packed) X(swiglu_packed_grad) X(tanh) X(transpose) X(unary_grad_erf) X(unary_grad_exp) X(unary_grad_gelu) \
  X(unary_grad_gelu_tanh) X(unary_grad_neg) X(unary_grad_reciprocal) X(unary_grad_sigmoid) \
  X(unary_grad_silu) X(unary_grad_sqrt) X(unary_grad_tanh) X(view) X(where)
