// RUN: fuyou-opt %s --fy-choose-device-optimizer="rest=builtin.module(fy-async-optimizer,fy-insert-dealloc,fy-plan-memory) target=cuda profile=%S/Inputs/profile-slow-adamw-cuda.json" | FileCheck %s
// RUN: fuyou-opt %s --fy-choose-device-optimizer="rest=builtin.module(fy-async-optimizer,fy-insert-dealloc,fy-plan-memory) target=cuda profile=%S/Inputs/profile-slow-adamw-cuda.json most=1" | FileCheck %s --check-prefix=ONE
// RUN: fuyou-opt %s --fy-choose-device-optimizer="rest=builtin.module(fy-async-optimizer,fy-insert-dealloc,fy-plan-memory) target=cuda" | FileCheck %s --check-prefix=FAST

// With AdamW slow on the CPU (the test profile), every group on the device is
// fastest: both groups tried beside none and one, and the step carried out
// with both (no grad_offload left); the choice and its prediction recorded.
// CHECK: module attributes {fysched.plan = #fysched.plan<activations = "", device_groups = 2, device_step_s = {{.*}} : f64, device_none_step_s = {{.*}} : f64>}
// CHECK: fysched.group @g0 [@h.0.w, @h.0.b] bytes 80 on_device
// CHECK: fysched.group @g1 [@wte.weight] bytes 128 on_device
// CHECK-NOT: fysched.grad_offload

// At most one: the table (the group backward completes last).
// ONE: device_groups = 1,
// ONE: fysched.group @g0 [@h.0.w, @h.0.b] bytes 80{{$}}
// ONE: fysched.group @g1 [@wte.weight] bytes 128 on_device

// With the built-in H100 figures the CPU's AdamW overlaps backward: none.
// FAST: device_groups = 0,
// FAST-NOT: on_device

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fygraph.param @h.0.b trainable : tensor<4xf32>
fysched.group @g0 [@h.0.w, @h.0.b] bytes 80
fysched.group @g1 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>,
                      %x: !fysched.buffer<device, tensor<3x4xf32>>)
    -> !fysched.buffer<device, tensor<3x4xf32>> {
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %rows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%rows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %w = fysched.get_param @h.0.w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<3x4xf32>>) {args = [false, false]}
  %gb = fysched.alloc : <device, tensor<4xf32>>
  %gw = fysched.alloc : <device, tensor<4x4xf32>>
  %ge = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "reduce_sum" ins(%y : !fysched.buffer<device, tensor<3x4xf32>>) outs(%gb : !fysched.buffer<device, tensor<4xf32>>)
  fysched.cpu_adamw @h.0.b, %gb group @g0 : !fysched.buffer<device, tensor<4xf32>>
  fysched.launch "matmul" ins(%x, %y : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<3x4xf32>>) outs(%gw : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  fysched.cpu_adamw @h.0.w, %gw group @g0 : !fysched.buffer<device, tensor<4x4xf32>>
  fysched.launch "gather_grad" ins(%rows, %idx : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%ge : !fysched.buffer<device, tensor<8x4xf32>>)
  fysched.cpu_adamw @wte.weight, %ge group @g1 : !fysched.buffer<device, tensor<8x4xf32>>
  return %y : !fysched.buffer<device, tensor<3x4xf32>>
}
