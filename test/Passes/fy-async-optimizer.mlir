// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-async-optimizer | FileCheck %s
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-async-optimizer --fy-insert-dealloc --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC

// A group's updates become, where its last update was, the pipeline
// grad_offload (the gradients in the group's order) → state_read →
// group_adamw → state_write chained by tokens; the group's parameters are
// waited for before their first read (the next step's forward).
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: fysched.group_wait @g1
// CHECK-NEXT: %[[E:.*]] = fysched.get_param @wte.weight
// CHECK: fysched.group_wait @g0
// CHECK-NEXT: %[[W:.*]] = fysched.get_param @h.0.w
// CHECK: fysched.launch "matmul"
// CHECK-NOT: fysched.cpu_adamw
// CHECK: %[[GW:.*]] = fysched.alloc : <device, tensor<4x4xf32>>
// CHECK: fysched.launch "matmul" {{.*}} outs(%[[GW]]
// CHECK-NEXT: %[[O0:.*]] = fysched.grad_offload @g0(%[[GW]], %[[GB:.*]] : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4xf32>>)
// CHECK-NEXT: %[[R0:.*]] = fysched.state_read @g0
// CHECK-NEXT: %[[U0:.*]] = fysched.group_adamw @g0 after(%[[O0]], %[[R0]])
// CHECK-NEXT: fysched.state_write @g0 after(%[[U0]])
// CHECK-NEXT: fysched.launch "gather_grad"
// CHECK-NEXT: %[[O1:.*]] = fysched.grad_offload @g1(%{{.*}} : !fysched.buffer<device, tensor<8x4xf32>>)
// CHECK-NEXT: %[[R1:.*]] = fysched.state_read @g1
// CHECK-NEXT: %[[U1:.*]] = fysched.group_adamw @g1 after(%[[O1]], %[[R1]])
// CHECK-NEXT: fysched.state_write @g1 after(%[[U1]])
// CHECK-NOT: fysched.cpu_adamw
// CHECK: return

// The program declares the groups (ids in declaration order, members by
// parameter index) and calls the runtime's background optimizer, tokens as
// int64_t values.
// EMITC-LABEL: emitc.func @fy_declare
// EMITC: emitc.call_opaque "fy::rt::declare_group"(%{{.*}}) {args = [0 : index, #emitc.opaque<"{1, 2}">]}
// EMITC: emitc.call_opaque "fy::rt::declare_group"(%{{.*}}) {args = [0 : index, #emitc.opaque<"{0}">]}
// EMITC-LABEL: emitc.func @fy_train_step
// EMITC: emitc.call_opaque "fy::rt::group_wait"(%{{.*}}) {args = [0 : index, #emitc.opaque<"1LL">]}
// EMITC: emitc.call_opaque "fy::rt::group_wait"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">]}
// EMITC: %[[O:.*]] = emitc.call_opaque "fy::rt::grad_offload"(%{{.*}}, %{{.*}}, %{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, 1 : index, 2 : index]} : {{.*}} -> i64
// EMITC: %[[R:.*]] = emitc.call_opaque "fy::rt::state_read"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">]} : {{.*}} -> i64
// EMITC: %[[U:.*]] = emitc.call_opaque "fy::rt::group_adamw"(%{{.*}}, %[[O]], %[[R]]) {args = [0 : index, #emitc.opaque<"0LL">, 1 : index, 2 : index]} : {{.*}} -> i64
// EMITC: emitc.call_opaque "fy::rt::state_write"(%{{.*}}, %[[U]]) {args = [0 : index, #emitc.opaque<"0LL">, 1 : index]}
// EMITC: emitc.call_opaque "fy::rt::grad_offload"(%{{.*}}, %{{.*}}) {args = [0 : index, #emitc.opaque<"1LL">, 1 : index]}

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

fygraph.param @w trainable : tensor<4xf32>
// expected-error @+1 {{has 1 parameters but 0 updates in @train_step}}
fysched.group @g0 [@w] bytes 16
func.func @train_step(%g: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
  return %g : !fysched.buffer<device, tensor<4xf32>>
}

// -----

// As many updates as parameters, but not theirs: refused, not a crash (found
// by mutating this file's symbols).
fygraph.param @w trainable : tensor<4xf32>
fygraph.param @v trainable : tensor<4xf32>
// expected-error @+1 {{parameter @v has no update of the group in @train_step}}
fysched.group @g0 [@v] bytes 16
func.func @train_step(%g: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
  fysched.cpu_adamw @w, %g group @g0 : !fysched.buffer<device, tensor<4xf32>>
  return %g : !fysched.buffer<device, tensor<4xf32>>
}
