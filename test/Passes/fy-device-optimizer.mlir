// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-device-optimizer=last=1 --fy-async-optimizer | FileCheck %s
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-device-optimizer=last=1 --fy-async-optimizer --fy-insert-dealloc --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-device-optimizer=last=5 --fy-async-optimizer | FileCheck %s --check-prefix=ALL
// RUN: fuyou-opt %s -split-input-file --fy-device-optimizer --fy-async-optimizer | FileCheck %s --check-prefix=NONE

// The group backward completes last (@g1, the table: the next forward reads
// it first) is marked on_device and keeps its update inline where its
// gradient is final, with no wait before its read; @g0 goes to the
// background optimizer as without the pass.
// CHECK: fysched.group @g0 [@h.0.w, @h.0.b] bytes 80{{$}}
// CHECK: fysched.group @g1 [@wte.weight] bytes 128 on_device
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: fysched.group_wait @g1
// CHECK: fysched.group_wait @g0
// CHECK: fysched.grad_offload @g0
// CHECK: fysched.group_adamw @g0
// CHECK: fysched.launch "gather_grad"
// CHECK-NEXT: fysched.cpu_adamw @wte.weight, %{{.*}} group @g1 on_device
// CHECK-NOT: fysched.grad_offload @g1
// CHECK: return

// The program declares only the background group; the table's update is
// the runtime's device_adamw (the GPU's, or on the CPU target cpu_adamw's).
// EMITC-LABEL: emitc.func @fy_declare
// EMITC: emitc.call_opaque "fy::rt::declare_device_optimizer"(%{{.*}}) {args = [0 : index, #emitc.opaque<"{0}">]}
// EMITC: emitc.call_opaque "fy::rt::declare_group"(%{{.*}}) {args = [0 : index, #emitc.opaque<"{1, 2}">]}
// EMITC-NOT: declare_group
// EMITC-LABEL: emitc.func @fy_train_step
// EMITC: emitc.call_opaque "fy::rt::grad_offload"
// EMITC: emitc.call_opaque "fy::rt::device_adamw"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, 1 : index]}

// More than there are: every group, no background optimizer left.
// ALL: fysched.group @g0 [@h.0.w, @h.0.b] bytes 80 on_device
// ALL: fysched.group @g1 [@wte.weight] bytes 128 on_device
// ALL-NOT: fysched.grad_offload
// ALL: fysched.cpu_adamw @h.0.b, %{{.*}} group @g0 on_device
// ALL: fysched.cpu_adamw @h.0.w, %{{.*}} group @g0 on_device
// ALL: fysched.cpu_adamw @wte.weight, %{{.*}} group @g1 on_device

// None (last=0, the default): the pass changes nothing.
// NONE-NOT: on_device
// NONE: fysched.grad_offload @g0
// NONE: fysched.grad_offload @g1

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

// -----

// The device's update is the plain step: not with a loss scale's skipped steps.
// expected-error @+1 {{fy-device-optimizer: not with dynamic loss scaling}}
module attributes {fy.loss_scale = "dynamic"} {
  fygraph.param @w trainable : tensor<4xf32>
  fysched.group @g0 [@w] bytes 16
  func.func @train_step(%g: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
    fysched.cpu_adamw @w, %g group @g0 : !fysched.buffer<device, tensor<4xf32>>
    return %g : !fysched.buffer<device, tensor<4xf32>>
  }
}

// -----

// Nor with 8-bit moments.
// expected-error @+1 {{fy-device-optimizer: only with the adamw optimizer, not adamw8bit}}
module attributes {fy.optimizer = "adamw8bit"} {
  fygraph.param @w trainable : tensor<4xf32>
  fysched.group @g0 [@w] bytes 16
  func.func @train_step(%g: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
    fysched.cpu_adamw @w, %g group @g0 : !fysched.buffer<device, tensor<4xf32>>
    return %g : !fysched.buffer<device, tensor<4xf32>>
  }
}
