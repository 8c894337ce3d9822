// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-program-attrs | FileCheck %s --check-prefix=CPU
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-program-attrs="target=cuda precision=bf16 gpu-mem=1073741824 loss-scale=true" | FileCheck %s --check-prefix=CUDA
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-program-attrs="activations=recompute,keep params=stream early-rows=no early-chunks=all grad-landing=2" | FileCheck %s --check-prefix=GIVEN
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-program-attrs="rows-first=false param-waits=false early-hold=false" | FileCheck %s --check-prefix=RULES
// RUN: echo 'func.func @forward(%%ids: tensor<?x256xi64>, %%loss: tensor<f32>) -> tensor<f32> { return %%loss : tensor<f32> }' | not fuyou-opt --fy-program-attrs=target=cuda 2>&1 | FileCheck %s --check-prefix=ERR
// ERR: error: fy-program-attrs: @forward's first argument is not a token tensor of a known shape

// The CPU target's defaults: the arithmetic and the optimizer, nothing the
// GPU keeps, no plan (activations=auto: the planner's).
// CPU: module attributes {fy.optimizer = "adamw", fy.precision = "fp32"}
// On CUDA at bf16, 4 x 256 token ids: the matmul workspace (32 MiB) and
// operand copies (128 MiB), and the ids, targets (8 KiB each) and loss (64 B):
// 33554432 + 134217728 + 2 * 8192 + 64 = 167788608.
// CUDA: module attributes {fy.budget.gpu_mem = 1073741824 : i64, fy.loss_scale = "dynamic", fy.optimizer = "adamw", fy.precision = "bf16", fysched.reserved_device_bytes = 167788608 : i64}
// The schedule's rules a compile turns off.
// RULES: module attributes {fy.optimizer = "adamw", fy.precision = "fp32", fy.schedule.early_hold = false, fy.schedule.param_waits = false, fy.schedule.rows_first = false}
// A placement given is the plan.
// GIVEN: module attributes {fy.optimizer = "adamw", fy.precision = "fp32", fysched.plan = #fysched.plan<activations = "recompute,keep", params = "stream", early_rows = "no", early_chunks = "all", grad_landing = 2>}
module {
  func.func @forward(%ids: tensor<4x256xi64>, %targets: tensor<4x256xi64>, %loss: tensor<f32>) -> tensor<f32> {
    return %loss : tensor<f32>
  }
}

