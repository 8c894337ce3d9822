// RUN: fuyou-opt %s --fy-partition-groups | FileCheck %s
// RUN: fuyou-opt %s --fy-partition-groups=max-bytes=70 | FileCheck %s --check-prefix=BOUND
// RUN: fuyou-opt %s --fy-partition-groups --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC

// A block per group, the embedding and the final norm apart, in the order
// backward completes them (the last update of each group).
// CHECK: fysched.group @g0 [@ln_f.weight] bytes 16
// CHECK: fysched.group @g1 [@h.1.b, @h.1.w] bytes 80
// CHECK: fysched.group @g2 [@h.0.b, @h.0.w] bytes 80
// CHECK: fysched.group @g3 [@wte.weight] bytes 128
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.cpu_adamw @ln_f.weight, %{{.*}} group @g0
// CHECK: fysched.cpu_adamw @h.1.b, %{{.*}} group @g1
// CHECK: fysched.cpu_adamw @h.1.w, %{{.*}} group @g1
// CHECK: fysched.cpu_adamw @h.0.b, %{{.*}} group @g2
// CHECK: fysched.cpu_adamw @wte.weight, %{{.*}} group @g3

// A bound on group bytes splits a block in update order.
// BOUND: fysched.group @g0 [@ln_f.weight] bytes 16
// BOUND: fysched.group @g1 [@h.1.b] bytes 16
// BOUND: fysched.group @g2 [@h.1.w] bytes 64
// BOUND: fysched.group @g3 [@h.0.b] bytes 16
// BOUND: fysched.group @g4 [@h.0.w] bytes 64
// BOUND: fysched.group @g5 [@wte.weight] bytes 128

// The resident program does not need them.
// EMITC-NOT: fysched.group
// EMITC: emitc.call_opaque "fy::rt::cpu_adamw"

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fygraph.param @h.0.b trainable : tensor<4xf32>
fygraph.param @h.1.w trainable : tensor<4x4xf32>
fygraph.param @h.1.b trainable : tensor<4xf32>
fygraph.param @ln_f.weight trainable : tensor<4xf32>
fygraph.param @mask : tensor<4xf32>

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>,
                      %gw: !fysched.buffer<device, tensor<4x4xf32>>,
                      %gb: !fysched.buffer<device, tensor<4xf32>>,
                      %ge: !fysched.buffer<device, tensor<8x4xf32>>)
    -> !fysched.buffer<device, tensor<4xf32>> {
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %x = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%x : !fysched.buffer<device, tensor<2x3x4xf32>>)
  fysched.dealloc %x : !fysched.buffer<device, tensor<2x3x4xf32>>
  fysched.cpu_adamw @ln_f.weight, %gb : !fysched.buffer<device, tensor<4xf32>>
  fysched.cpu_adamw @h.1.b, %gb : !fysched.buffer<device, tensor<4xf32>>
  fysched.cpu_adamw @h.1.w, %gw : !fysched.buffer<device, tensor<4x4xf32>>
  fysched.cpu_adamw @h.0.b, %gb : !fysched.buffer<device, tensor<4xf32>>
  fysched.cpu_adamw @h.0.w, %gw : !fysched.buffer<device, tensor<4x4xf32>>
  fysched.cpu_adamw @wte.weight, %ge : !fysched.buffer<device, tensor<8x4xf32>>
  return %gb : !fysched.buffer<device, tensor<4xf32>>
}
