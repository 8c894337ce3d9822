// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-outline-eval | FileCheck %s
// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-outline-eval --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC

// A planned step: the state read ahead of the update, the table's rows
// first, a streamed weight, dropout, one activation on its way to SSD
// (host, then SSD), others kept on the device, a weight copied ahead for
// backward, backward's seed, then backward and the optimizer. train_step
// stays as it was; eval_step is forward up to the loss, dropout a copy (its
// mask gone), what forward kept freed at the end.
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.state_read @g0
// CHECK: fysched.group_wait_rows
// CHECK: fysched.launch "dropout"
// CHECK: fysched.group_adamw
// CHECK: return

// CHECK-LABEL: func.func @eval_step
// CHECK-SAME: (%[[IDX:[^:]*]]: !fysched.buffer<device, tensor<2x3xi64>>, %[[TGT:[^:]*]]: !fysched.buffer<device, tensor<6xi64>>)
// CHECK-SAME: tensor<f32>> {{\{$}}
// CHECK-NEXT: fysched.group_wait @g1
// CHECK-NEXT: %[[E:.*]] = fysched.get_param @wte.weight
// CHECK-NEXT: %[[X:.*]] = fysched.alloc {offset = 0 : i64} : <device, tensor<2x3x4xf32>>
// CHECK-NEXT: fysched.launch "gather" ins(%[[E]], %[[IDX]] {{.*}} outs(%[[X]]
// CHECK-NEXT: fysched.group_wait @g0
// CHECK-NEXT: %[[WH:.*]] = fysched.get_param @h.0.w : <host
// CHECK-NEXT: %[[W:.*]] = fysched.alloc {offset = 512 : i64} : <device, tensor<4x4xf32>>
// CHECK-NEXT: %[[C:.*]] = fysched.copy %[[WH]], %[[W]] : {{.*}} -> !fysched.token
// CHECK-NEXT: fysched.wait %[[C]]
// CHECK-NEXT: %[[D:.*]] = fysched.alloc {offset = 128 : i64} : <device, tensor<2x3x4xf32>>
// CHECK-NEXT: fysched.copy %[[X]], %[[D]] : <device, tensor<2x3x4xf32>>, <device, tensor<2x3x4xf32>>
// CHECK-NEXT: %[[Y:.*]] = fysched.alloc {offset = 384 : i64} : <device, tensor<2x3x4xf32>>
// CHECK-NEXT: fysched.launch "matmul" ins(%[[D]], %[[W]] {{.*}} outs(%[[Y]]
// CHECK-NEXT: fysched.dealloc %[[W]]
// CHECK-NEXT: fysched.dealloc %[[D]]
// CHECK-NEXT: %[[YV:.*]] = fysched.view %[[Y]]
// CHECK-NEXT: %[[L:.*]] = fysched.alloc {offset = 640 : i64} : <device, tensor<f32>>
// CHECK-NEXT: %[[P:.*]] = fysched.alloc {offset = 704 : i64} : <device, tensor<6x4xf32>>
// CHECK-NEXT: fysched.launch "softmax_cross_entropy" ins(%[[YV]], %[[TGT]] {{.*}} outs(%[[L]], %[[P]]
// CHECK-NEXT: fysched.dealloc %[[X]]
// CHECK-NEXT: fysched.dealloc %[[Y]]
// CHECK-NEXT: fysched.dealloc %[[P]]
// CHECK-NEXT: return %[[L]]
// CHECK-NEXT: }

// The program hands both steps to the runtime.
// EMITC-LABEL: emitc.func @fy_train_step
// EMITC-LABEL: emitc.func @fy_eval_step
// EMITC-NOT: state_read
// EMITC: emitc.call_opaque "fy::rt::group_wait"
// EMITC: emitc.call_opaque "fy::rt::copy"
// EMITC-NOT: group_adamw
// EMITC: emitc.verbatim "int main{{.*}}fy::program_main(argc, argv, fy_declare, fy_train_step, fy_eval_step);

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fysched.group @g0 [@h.0.w] bytes 64
fysched.group @g1 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %tgt: !fysched.buffer<device, tensor<6xi64>>)
    -> !fysched.buffer<device, tensor<f32>> attributes {fysched.arena_bytes = 1024 : i64} {
  %r0 = fysched.state_read @g0
  %one = fysched.constant dense<1.0> : tensor<f32> {offset = 960 : i64} : <device, tensor<f32>>
  fysched.group_wait_rows @g1, @wte.weight[%idx : <device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %x = fysched.alloc {offset = 0 : i64} : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%x : !fysched.buffer<device, tensor<2x3x4xf32>>)
  fysched.group_wait @g0
  %wh = fysched.get_param @h.0.w : <host, tensor<4x4xf32>>
  %w = fysched.alloc {offset = 512 : i64} : <device, tensor<4x4xf32>>
  %c = fysched.copy %wh, %w : <host, tensor<4x4xf32>>, <device, tensor<4x4xf32>> -> !fysched.token
  fysched.wait %c
  %d = fysched.alloc {offset = 128 : i64} : <device, tensor<2x3x4xf32>>
  %mask = fysched.alloc {offset = 256 : i64} : <device, tensor<2x3x4xi1>>
  fysched.launch "dropout" ins(%x : !fysched.buffer<device, tensor<2x3x4xf32>>) outs(%d, %mask : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3x4xi1>>) {args = [5.000000e-01, 7]}
  %y = fysched.alloc {offset = 384 : i64} : <device, tensor<2x3x4xf32>>
  fysched.launch "matmul" ins(%d, %w : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<2x3x4xf32>>) {args = [false, false]}
  fysched.dealloc %w : <device, tensor<4x4xf32>>
  // %d goes to host memory, then on to SSD, for backward.
  %dh = fysched.alloc {offset = 0 : i64} : <host, tensor<2x3x4xf32>>
  %co = fysched.copy %d, %dh : <device, tensor<2x3x4xf32>>, <host, tensor<2x3x4xf32>> -> !fysched.token
  %ds = fysched.alloc {offset = 0 : i64} : <ssd, tensor<2x3x4xf32>>
  fysched.wait %co
  fysched.dealloc %d : <device, tensor<2x3x4xf32>>
  fysched.copy %dh, %ds : <host, tensor<2x3x4xf32>>, <ssd, tensor<2x3x4xf32>>
  fysched.dealloc %dh : <host, tensor<2x3x4xf32>>
  // Backward's copy of the weight, issued early: only backward reads it.
  %wb = fysched.alloc {offset = 832 : i64} : <device, tensor<4x4xf32>>
  %cb = fysched.copy %wh, %wb : <host, tensor<4x4xf32>>, <device, tensor<4x4xf32>> -> !fysched.token
  %yv = fysched.view %y : <device, tensor<2x3x4xf32>> -> <device, tensor<6x4xf32>>
  %l = fysched.alloc {offset = 640 : i64} : <device, tensor<f32>>
  %p = fysched.alloc {offset = 704 : i64} : <device, tensor<6x4xf32>>
  fysched.launch "softmax_cross_entropy" ins(%yv, %tgt : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%l, %p : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<6x4xf32>>) {args = [-100, true]}
  // Backward.
  fysched.wait %cb
  %g = fysched.alloc {offset = 768 : i64} : <device, tensor<6x4xf32>>
  fysched.launch "softmax_cross_entropy_grad" ins(%one, %p, %tgt : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%g : !fysched.buffer<device, tensor<6x4xf32>>) {args = [-100, true]}
  fysched.dealloc %one : <device, tensor<f32>>
  fysched.dealloc %p : <device, tensor<6x4xf32>>
  %gw = fysched.alloc {offset = 896 : i64} : <device, tensor<4x4xf32>>
  %di = fysched.alloc {offset = 0 : i64} : <host, tensor<2x3x4xf32>>
  fysched.copy %ds, %di : <ssd, tensor<2x3x4xf32>>, <host, tensor<2x3x4xf32>>
  fysched.dealloc %ds : <ssd, tensor<2x3x4xf32>>
  %dd = fysched.alloc {offset = 128 : i64} : <device, tensor<2x3x4xf32>>
  fysched.copy %di, %dd : <host, tensor<2x3x4xf32>>, <device, tensor<2x3x4xf32>>
  fysched.dealloc %di : <host, tensor<2x3x4xf32>>
  %gv = fysched.view %g : <device, tensor<6x4xf32>> -> <device, tensor<2x3x4xf32>>
  fysched.launch "matmul" ins(%dd, %gv : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>) outs(%gw : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  fysched.dealloc %dd : <device, tensor<2x3x4xf32>>
  fysched.dealloc %g : <device, tensor<6x4xf32>>
  fysched.dealloc %wb : <device, tensor<4x4xf32>>
  fysched.dealloc %mask : <device, tensor<2x3x4xi1>>
  fysched.dealloc %y : <device, tensor<2x3x4xf32>>
  %o0 = fysched.grad_offload @g0(%gw : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0, %r0)
  fysched.state_write @g0 after(%u0)
  fysched.dealloc %gw : <device, tensor<4x4xf32>>
  fysched.dealloc %x : <device, tensor<2x3x4xf32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// A loss returned through a view made after its launch (a [1] mean reshaped
// to a scalar): the view stays, backward goes.
// CHECK-LABEL: func.func @eval_step
// CHECK: %[[L:.*]] = fysched.alloc {offset = 0 : i64} : <device, tensor<1xf32>>
// CHECK-NEXT: fysched.launch "reduce_mean" {{.*}} outs(%[[L]]
// CHECK-NEXT: %[[V:.*]] = fysched.view %[[L]] : <device, tensor<1xf32>> -> <device, tensor<f32>>
// CHECK-NEXT: return %[[V]]
func.func @train_step(%x: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %l = fysched.alloc {offset = 0 : i64} : <device, tensor<1xf32>>
  fysched.launch "reduce_mean" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%l : !fysched.buffer<device, tensor<1xf32>>) {args = [array<i64: 0>, true]}
  %g = fysched.alloc {offset = 64 : i64} : <device, tensor<4xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%g : !fysched.buffer<device, tensor<4xf32>>)
  fysched.dealloc %g : <device, tensor<4xf32>>
  %v = fysched.view %l : <device, tensor<1xf32>> -> <device, tensor<f32>>
  return %v : !fysched.buffer<device, tensor<f32>>
}

// -----

// Written again after the first launch, the loss is no forward's alone.
func.func @train_step(%x: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %l = fysched.alloc {offset = 0 : i64} : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>) {args = [array<i64: 0>, false]}
  // expected-error @+1 {{fy-outline-eval: the loss is written by more than one launch}}
  fysched.launch "reduce_sum" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>) {args = [array<i64: 0>, false]}
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// A step that does not return its loss has no forward to cut out.
// expected-error @+1 {{fy-outline-eval: @train_step must return its loss, written by a launch}}
func.func @train_step(%x: !fysched.buffer<device, tensor<4xf32>>) {
  return
}

// -----

// expected-error @below {{fy-outline-eval: the module already has @eval_step}}
module {
  func.func @train_step(%x: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
    return %x : !fysched.buffer<device, tensor<4xf32>>
  }
  func.func @eval_step(%x: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
    return %x : !fysched.buffer<device, tensor<4xf32>>
  }
}

// -----

// The loss of a Linear's logits evaluates without its gradients: the same
// launch, its last argument false (train_step's stays true); the gradients'
// buffers keep their places, unwritten, and are freed at the end (the
// scratch after the launch, as in train_step).
// CHECK-LABEL: func.func @train_step
// CHECK: fysched.launch "linear_cross_entropy" {{.*}} {args = [-100, true, true]}
// CHECK-LABEL: func.func @eval_step
// CHECK: %[[LOSS:.*]] = fysched.alloc {offset = 0 : i64} : <device, tensor<f32>>
// CHECK: fysched.launch "linear_cross_entropy" {{.*}} {args = [-100, true, false]}
// CHECK-NOT: fysched.launch
// CHECK: return %[[LOSS]]
func.func @train_step(%x: !fysched.buffer<device, tensor<6x4xf32>>, %w: !fysched.buffer<device, tensor<10x4xf32>>, %t: !fysched.buffer<device, tensor<6xi64>>) -> !fysched.buffer<device, tensor<f32>> {
  %l = fysched.alloc {offset = 0 : i64} : <device, tensor<f32>>
  %dx = fysched.alloc {offset = 64 : i64} : <device, tensor<6x4xf32>>
  %dw = fysched.alloc {offset = 192 : i64} : <device, tensor<10x4xf32>>
  %blk = fysched.alloc {offset = 384 : i64} : <device, tensor<6x10xf32>>
  fysched.launch "linear_cross_entropy" ins(%x, %w, %t : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<10x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<10x4xf32>>, !fysched.buffer<device, tensor<6x10xf32>>) {args = [-100, true, true]}
  fysched.dealloc %blk : <device, tensor<6x10xf32>>
  %g = fysched.alloc {offset = 384 : i64} : <device, tensor<6x4xf32>>
  fysched.launch "neg" ins(%dx : !fysched.buffer<device, tensor<6x4xf32>>) outs(%g : !fysched.buffer<device, tensor<6x4xf32>>)
  fysched.dealloc %g : <device, tensor<6x4xf32>>
  fysched.dealloc %dx : <device, tensor<6x4xf32>>
  fysched.dealloc %dw : <device, tensor<10x4xf32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}
