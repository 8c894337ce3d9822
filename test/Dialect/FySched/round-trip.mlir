// Every fysched op and the buffer type in each memory space, printed in the
// custom form and in the generic form, both re-parsed.
// RUN: fuyou-opt %s | fuyou-opt | FileCheck %s
// RUN: fuyou-opt %s --mlir-print-op-generic | fuyou-opt | FileCheck %s

fygraph.param @w trainable : tensor<4x8xf32>

// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IN:.*]]: !fysched.buffer<device, tensor<2x4xf32>>) -> !fysched.buffer<device, tensor<f32>>
func.func @train_step(%in: !fysched.buffer<device, tensor<2x4xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  // CHECK: %[[W:.*]] = fysched.get_param @w : <device, tensor<4x8xf32>>
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<4x8xf32>>
  // CHECK: %[[C:.*]] = fysched.constant dense<[1, 2, 3]> : tensor<3xi64> : <device, tensor<3xi64>>
  %c = fysched.constant dense<[1, 2, 3]> : tensor<3xi64> : !fysched.buffer<device, tensor<3xi64>>
  // CHECK: %[[Y:.*]] = fysched.alloc : <device, tensor<2x8xf32>>
  %y = fysched.alloc : !fysched.buffer<device, tensor<2x8xf32>>
  // CHECK: fysched.launch "matmul" ins(%[[IN]], %[[W]] : !fysched.buffer<device, tensor<2x4xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%[[Y]] : !fysched.buffer<device, tensor<2x8xf32>>) {args = [false, false]}
  fysched.launch "matmul" ins(%in, %w : !fysched.buffer<device, tensor<2x4xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%y : !fysched.buffer<device, tensor<2x8xf32>>) {args = [false, false]}
  // A launch with no inputs and no static arguments.
  // CHECK: fysched.launch "zero" outs(%[[Y]] : !fysched.buffer<device, tensor<2x8xf32>>){{$}}
  fysched.launch "zero" outs(%y : !fysched.buffer<device, tensor<2x8xf32>>)
  // CHECK: %[[V:.*]] = fysched.view %[[Y]] : <device, tensor<2x8xf32>> -> <device, tensor<16xf32>>
  %v = fysched.view %y : !fysched.buffer<device, tensor<2x8xf32>> -> !fysched.buffer<device, tensor<16xf32>>
  // CHECK: %[[H:.*]] = fysched.alloc : <host, tensor<16xf32>>
  %h = fysched.alloc : !fysched.buffer<host, tensor<16xf32>>
  // CHECK: fysched.copy %[[V]], %[[H]] : <device, tensor<16xf32>>, <host, tensor<16xf32>>
  fysched.copy %v, %h : !fysched.buffer<device, tensor<16xf32>>, !fysched.buffer<host, tensor<16xf32>>
  // An asynchronous copy and the wait for it.
  // CHECK: %[[D:.*]] = fysched.alloc : <device, tensor<16xf32>>
  %d = fysched.alloc : !fysched.buffer<device, tensor<16xf32>>
  // CHECK: %[[T:.*]] = fysched.copy %[[H]], %[[D]] : <host, tensor<16xf32>>, <device, tensor<16xf32>> -> !fysched.token
  %t = fysched.copy %h, %d : !fysched.buffer<host, tensor<16xf32>>, !fysched.buffer<device, tensor<16xf32>> -> !fysched.token
  // CHECK: fysched.wait %[[T]]
  fysched.wait %t
  // CHECK: fysched.dealloc %[[D]] : <device, tensor<16xf32>>
  fysched.dealloc %d : !fysched.buffer<device, tensor<16xf32>>
  // CHECK: %[[S:.*]] = fysched.alloc : <ssd, tensor<4x4xf32>>
  %s = fysched.alloc : !fysched.buffer<ssd, tensor<4x4xf32>>
  // Copies need equal element counts, not equal shapes.
  // CHECK: fysched.copy %[[H]], %[[S]] : <host, tensor<16xf32>>, <ssd, tensor<4x4xf32>>
  fysched.copy %h, %s : !fysched.buffer<host, tensor<16xf32>>, !fysched.buffer<ssd, tensor<4x4xf32>>
  // CHECK: %[[G:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
  %g = fysched.alloc : !fysched.buffer<host, tensor<4x8xf32>>
  // CHECK: fysched.cpu_adamw @w, %[[G]] : <host, tensor<4x8xf32>>
  fysched.cpu_adamw @w, %g : !fysched.buffer<host, tensor<4x8xf32>>
  // CHECK: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  // CHECK: fysched.launch "reduce_mean" ins(%[[V]] : {{.*}}) outs(%[[L]] : !fysched.buffer<device, tensor<f32>>) {args = [array<i64: 0>, 9.99999974E-6 : f32, -1]}
  fysched.launch "reduce_mean" ins(%v : !fysched.buffer<device, tensor<16xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>) {args = [array<i64: 0>, 1.0e-5 : f32, -1 : i64]}
  // CHECK: fysched.dealloc %[[S]] : <ssd, tensor<4x4xf32>>
  fysched.dealloc %s : !fysched.buffer<ssd, tensor<4x4xf32>>
  // CHECK: fysched.dealloc %[[H]] : <host, tensor<16xf32>>
  fysched.dealloc %h : !fysched.buffer<host, tensor<16xf32>>
  // CHECK: fysched.dealloc %[[Y]] : <device, tensor<2x8xf32>>
  fysched.dealloc %y : !fysched.buffer<device, tensor<2x8xf32>>
  // CHECK: return %[[L]] : !fysched.buffer<device, tensor<f32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}

// The memory space may also be written as a string.
// CHECK-LABEL: func.func @quoted_space
// CHECK-SAME: !fysched.buffer<host, tensor<2xi1>>
func.func @quoted_space(%b: !fysched.buffer<"host", tensor<2xi1>>) {
  return
}

// A group and its update pipeline, tokens naming each op's dependencies.
// CHECK: fysched.group @g0 [@w] bytes 128
fysched.group @g0 [@w] bytes 128
// CHECK-LABEL: func.func @pipeline
// CHECK-SAME: (%[[GR:.*]]: !fysched.buffer<device, tensor<4x8xf32>>)
func.func @pipeline(%g: !fysched.buffer<device, tensor<4x8xf32>>) {
  // CHECK: %[[R:.*]] = fysched.state_read @g0
  %r = fysched.state_read @g0
  // CHECK: fysched.group_wait @g0
  fysched.group_wait @g0
  // CHECK: fysched.group_wait @g0, @w
  fysched.group_wait @g0, @w
  // CHECK: %[[O:.*]] = fysched.grad_offload @g0(%[[GR]] : !fysched.buffer<device, tensor<4x8xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<4x8xf32>>)
  // CHECK: %[[U:.*]] = fysched.group_adamw @g0 after(%[[O]], %[[R]])
  %u = fysched.group_adamw @g0 after(%o, %r)
  // CHECK: fysched.state_write @g0 after(%[[U]])
  fysched.state_write @g0 after(%u)
  // CHECK: fysched.grad_landed @g0(%[[O]])
  fysched.grad_landed @g0(%o)
  return
}

// The wait for the rows of a group's table that some token ids gather.
// CHECK-LABEL: func.func @rows_first
// CHECK-SAME: (%[[IDS:.*]]: !fysched.buffer<device, tensor<2x3xi64>>)
func.func @rows_first(%ids: !fysched.buffer<device, tensor<2x3xi64>>) {
  // CHECK: fysched.group_wait_rows @g0, @w[%[[IDS]] : <device, tensor<2x3xi64>>]
  fysched.group_wait_rows @g0, @w[%ids : !fysched.buffer<device, tensor<2x3xi64>>]
  return
}

// A table's gradient final in every row but those the ids name.
// CHECK-LABEL: func.func @early_rows
// CHECK-SAME: (%[[IDS:.*]]: !fysched.buffer<device, tensor<2x3xi64>>, %[[G:.*]]: !fysched.buffer<device, tensor<8x4xf32>>)
func.func @early_rows(%ids: !fysched.buffer<device, tensor<2x3xi64>>, %g: !fysched.buffer<device, tensor<8x4xf32>>) {
  // CHECK: fysched.grad_offload_early @g0, @w(%[[G]] : <device, tensor<8x4xf32>>) except(%[[IDS]] : <device, tensor<2x3xi64>>)
  fysched.grad_offload_early @g0, @w(%g : !fysched.buffer<device, tensor<8x4xf32>>) except(%ids : !fysched.buffer<device, tensor<2x3xi64>>)
  return
}

// Held: its update writes the table only after the release.
// CHECK-LABEL: func.func @early_rows_held
// CHECK: fysched.grad_offload_early @g0, @w(%{{.*}} : <device, tensor<8x4xf32>>) except(%{{.*}} : <device, tensor<2x3xi64>>) all_chunks held
// CHECK-NEXT: fysched.early_release @g0, @w
func.func @early_rows_held(%ids: !fysched.buffer<device, tensor<2x3xi64>>, %g: !fysched.buffer<device, tensor<8x4xf32>>) {
  fysched.grad_offload_early @g0, @w(%g : !fysched.buffer<device, tensor<8x4xf32>>) except(%ids : !fysched.buffer<device, tensor<2x3xi64>>) all_chunks held
  fysched.early_release @g0, @w
  return
}
