// RUN: fuyou-opt %s -split-input-file --fy-early-offload | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-early-offload --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC
// RUN: fuyou-opt %s -split-input-file --fy-early-offload=hold=false | FileCheck %s --check-prefix=AFTER
// The same where the compile turned the held hand-over off (fy-program-attrs):
// RUN: fuyou-opt %s -split-input-file --fy-program-attrs=early-hold=false --fy-early-offload | FileCheck %s --check-prefix=AFTER

// A tied embedding: its gradient is the logits part %dw plus the gather's
// rows. The logits part goes to the optimizer right after %dw is written,
// held: the input gradient's product still reads the table, and the update
// writes it only after the release behind that read.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDX:[^:]*]]: !fysched.buffer<device, tensor<2x3xi64>>
// CHECK: fysched.launch "matmul" ins(%[[DL:.*]], %[[Y:.*]] : {{.*}}) outs(%[[DW:.*]] : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
// CHECK-NEXT: fysched.grad_offload_early @g0, @wte.weight(%[[DW]] : <device, tensor<8x4xf32>>) except(%[[IDX]] : <device, tensor<2x3xi64>>) held
// CHECK-NEXT: %[[DX:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "matmul" ins(%[[DL]], %[[E:.*]] : {{.*}}) outs(%[[DX]]
// CHECK-NEXT: fysched.early_release @g0, @wte.weight
// CHECK-NEXT: %[[G:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "gather_grad_add" ins(%[[DW]], %{{.*}}, %[[IDX]]
// CHECK-NEXT: fysched.grad_offload @g0(%[[G]]
// CHECK-NOT: grad_offload_early

// The program declares the table (so that its buffers count from the start)
// and hands the runtime the group's and the table's indices.
// EMITC: emitc.call_opaque "fy::rt::declare_rows_first"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"0LL">, #emitc.opaque<"6LL">]}
// EMITC-NEXT: emitc.call_opaque "fy::rt::declare_early_rows"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"0LL">, false, true]}
// EMITC-LABEL: emitc.func @fy_train_step
// EMITC: emitc.call_opaque "fy::rt::grad_offload_early"(%{{.*}}, %{{.*}}, %{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"0LL">, 1 : index, 2 : index]}
// EMITC: emitc.call_opaque "fy::rt::matmul"
// EMITC-NEXT: emitc.call_opaque "fy::rt::early_release"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"0LL">]}

// hold=false: handed over after the table's last read, nothing to release.
// AFTER-LABEL: func.func @train_step
// AFTER: fysched.launch "matmul" ins(%{{.*}}, %[[E:.*]] : {{.*}}) outs(%[[DX:.*]] : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
// AFTER-NEXT: fysched.grad_offload_early @g0, @wte.weight(%{{.*}} : <device, tensor<8x4xf32>>) except(%{{.*}} : <device, tensor<2x3xi64>>){{$}}
// AFTER-NOT: early_release

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dl: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>) {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dl, %e : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %u = fysched.group_adamw @g0 after(%o)
  return
}

// -----

// Autodiff's order: the input gradient's product (a read of the table)
// first. The table's own product goes up above it, with its alloc, so that
// its gradient goes down while that read runs; not above the launch that
// writes what it reads, nor into forward (the loss is written by the
// reduce_sum).
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.launch "mul" ins(%[[Z:.*]], %[[Z]] : {{.*}}) outs(%[[DL:.*]] : !fysched.buffer<device, tensor<6x8xf32>>)
// CHECK-NEXT: %[[DX:.*]] = fysched.alloc : <device, tensor<6x4xf32>>
// CHECK-NEXT: %[[DW:.*]] = fysched.alloc : <device, tensor<8x4xf32>>
// CHECK-NEXT: fysched.launch "matmul" ins(%[[DL]], %{{.*}} : {{.*}}) outs(%[[DW]] : {{.*}}) {args = [true, false]}
// CHECK-NEXT: fysched.grad_offload_early @g0, @wte.weight(%[[DW]] : {{.*}}) held
// CHECK-NEXT: fysched.launch "matmul" ins(%[[DL]], %{{.*}} : {{.*}}) outs(%[[DX]] : {{.*}}) {args = [false, false]}
// CHECK-NEXT: fysched.early_release @g0, @wte.weight
// CHECK-NEXT: %[[G:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "gather_grad_add" ins(%[[DW]],
// hold=false: the order as it was, the hand-over after the last read.
// AFTER-LABEL: func.func @train_step
// AFTER: fysched.launch "matmul" {{.*}} {args = [false, false]}
// AFTER: fysched.launch "matmul" {{.*}} {args = [true, false]}
// AFTER-NEXT: fysched.grad_offload_early @g0, @wte.weight({{.*}}){{$}}

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %z: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %dl = fysched.alloc : <device, tensor<6x8xf32>>
  fysched.launch "mul" ins(%z, %z : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x8xf32>>) outs(%dl : !fysched.buffer<device, tensor<6x8xf32>>)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dl, %e : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// Not into forward: the logits product (forward's read of the table) and
// the loss stay above, the table's product goes up above the input
// gradient's only.
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.launch "matmul" {{.*}} {args = [false, true]}
// CHECK-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK-NEXT: fysched.launch "reduce_sum"
// CHECK-NEXT: %[[DX:.*]] = fysched.alloc : <device, tensor<6x4xf32>>
// CHECK-NEXT: %[[DW:.*]] = fysched.alloc : <device, tensor<8x4xf32>>
// CHECK-NEXT: fysched.launch "matmul" {{.*}} outs(%[[DW]] : {{.*}}) {args = [true, false]}
// CHECK-NEXT: fysched.grad_offload_early @g0, @wte.weight(%[[DW]] : {{.*}}) held
// CHECK-NEXT: fysched.launch "matmul" {{.*}} outs(%[[DX]] : {{.*}}) {args = [false, false]}
// CHECK-NEXT: fysched.early_release @g0, @wte.weight

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dl: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %z = fysched.alloc : <device, tensor<6x8xf32>>
  fysched.launch "matmul" ins(%y, %e : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%z : !fysched.buffer<device, tensor<6x8xf32>>) {args = [false, true]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dl, %e : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// A launch between writes what the table's product reads: it stays where
// it is, and with no read of the table after it, nothing is held.
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.launch "matmul" {{.*}} {args = [false, false]}
// CHECK-NEXT: fysched.launch "neg"
// CHECK-NEXT: %[[DW:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "matmul" {{.*}} {args = [true, false]}
// CHECK-NEXT: fysched.grad_offload_early @g0, @wte.weight(%[[DW]] : {{.*}}){{$}}
// CHECK-NOT: early_release

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %z: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %dl = fysched.alloc : <device, tensor<6x8xf32>>
  fysched.launch "mul" ins(%z, %z : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x8xf32>>) outs(%dl : !fysched.buffer<device, tensor<6x8xf32>>)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dl, %e : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  fysched.launch "neg" ins(%dx : !fysched.buffer<device, tensor<6x4xf32>>) outs(%y : !fysched.buffer<device, tensor<6x4xf32>>)
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// The table read again after the sum (a recomputed gather, say) would see
// rows updated early; ids that are not the step's tokens (positions) name
// other rows: both keep their whole update at the end.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: grad_offload_early

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fygraph.param @wpe.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight, @wpe.weight] bytes 256

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %pos: !fysched.buffer<device, tensor<2x3xi64>>,
                      %y: !fysched.buffer<device, tensor<6x4xf32>>, %dl: !fysched.buffer<device, tensor<6x8xf32>>,
                      %drows: !fysched.buffer<device, tensor<2x3x4xf32>>) {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %p = fysched.get_param @wpe.weight : <device, tensor<8x4xf32>>
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %dp = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dp : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %again = fysched.alloc : <device, tensor<2x3x4xf32>>
  %ev = fysched.view %e : <device, tensor<8x4xf32>> -> <device, tensor<32xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%again : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %gp = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dp, %drows, %pos : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%gp : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g, %gp : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>)
  return
}

// -----

// With loss scaling every update waits for the step's verdict: nothing to gain.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: grad_offload_early

module attributes {fy.loss_scale} {
fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dl: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>) {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  return
}
}

// -----

// A table not read rows first (streamed, say): the runtime's rows part is
// missing, so no early rows.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: grad_offload_early

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dl: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>) {
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  return
}

// -----

// The planner predicted the step faster without (the plan's early_rows = "no").
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: grad_offload_early

module attributes {fysched.plan = #fysched.plan<activations = "keep", early_rows = "no">} {
fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dl: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>) {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  return
}
}

// -----

// The planner predicted the step faster with the rows' chunks sent down all
// at once (the plan's early_chunks = "all"): the op says so, and the program
// declares it.
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.grad_offload_early @g0, @wte.weight(%{{.*}} : <device, tensor<8x4xf32>>) except(%{{.*}} : <device, tensor<2x3xi64>>) all_chunks
// EMITC: emitc.call_opaque "fy::rt::declare_early_rows"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"0LL">, true]}

module attributes {fysched.plan = #fysched.plan<activations = "keep", early_rows = "yes", early_chunks = "all">} {
fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dl: !fysched.buffer<device, tensor<6x8xf32>>, %drows: !fysched.buffer<device, tensor<2x3x4xf32>>) {
  fysched.group_wait_rows @g0, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %dw = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%dl, %y : !fysched.buffer<device, tensor<6x8xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<8x4xf32>>) {args = [true, false]}
  %g = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %drows, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<8x4xf32>>)
  %u = fysched.group_adamw @g0 after(%o)
  return
}
}
