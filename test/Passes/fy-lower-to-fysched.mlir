// RUN: fuyou-opt %s -split-input-file --fy-lower-to-fysched | FileCheck %s

// The step's signature becomes device buffers; parameters their storage,
// constants buffers, reshapes views, adamw a cpu_adamw, and each compute op
// one launch into a fresh alloc. A reduction without keepdims writes
// through a keepdims view of its result.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<4x8xf32>>, %[[IDX:.*]]: !fysched.buffer<device, tensor<2x3xi64>>) -> !fysched.buffer<device, tensor<f32>>
// CHECK: %[[W:.*]] = fysched.get_param @w : <device, tensor<4x8xf32>>
// CHECK: %[[C:.*]] = fysched.constant dense<5.000000e-01> : tensor<f32> : <device, tensor<f32>>
// CHECK: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK: fysched.launch "add" ins(%[[X]], %[[W]] : {{.*}}) outs(%[[A]] : !fysched.buffer<device, tensor<4x8xf32>>){{$}}
// CHECK: %[[M:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK: fysched.launch "mul" ins(%[[A]], %[[C]] : {{.*}}) outs(%[[M]] : {{.*}})
// CHECK: %[[R:.*]] = fysched.view %[[M]] : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
// CHECK: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK: %[[LK:.*]] = fysched.view %[[L]] : <device, tensor<f32>> -> <device, tensor<1xf32>>
// CHECK: fysched.launch "reduce_mean" ins(%[[R]] : {{.*}}) outs(%[[LK]] : !fysched.buffer<device, tensor<1xf32>>)
// CHECK: fysched.cpu_adamw @w, %[[M]] : <device, tensor<4x8xf32>>
// CHECK: return %[[L]] : !fysched.buffer<device, tensor<f32>>
// CHECK-NOT: fygraph.
fygraph.param @w trainable : tensor<4x8xf32>
func.func @train_step(%x: tensor<4x8xf32>, %idx: tensor<2x3xi64>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %c = fygraph.constant dense<0.5> : tensor<f32>
  %a = fygraph.add %x, %w : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = fygraph.mul %a, %c : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %r = fygraph.reshape %m : tensor<4x8xf32> -> tensor<32xf32>
  %l = fygraph.reduce_mean %r {axes = array<i64: 0>, keepdims = false} : tensor<32xf32> -> tensor<f32>
  fygraph.adamw @w, %m : tensor<4x8xf32>
  return %l : tensor<f32>
}

// -----

// Elementwise ops launch the kernel of their own name; gelu picks its form;
// unary_grad names its function; expand broadcasts and reduce_to sums.
// CHECK-LABEL: func.func @elementwise
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<4x8xf32>>, %[[V:.*]]: !fysched.buffer<device, tensor<8xf32>>, %[[C:.*]]: !fysched.buffer<device, tensor<4x8xi1>>)
// CHECK: fysched.launch "sub" ins(%[[X]], %[[V]] :
// CHECK: fysched.launch "div" ins(
// CHECK: fysched.launch "pow" ins(
// CHECK: fysched.launch "equal" ins({{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<4x8xi1>>)
// CHECK: fysched.launch "neg" ins(%[[X]] :
// CHECK: fysched.launch "sqrt" ins(
// CHECK: fysched.launch "reciprocal" ins(
// CHECK: fysched.launch "exp" ins(
// CHECK: fysched.launch "tanh" ins(
// CHECK: fysched.launch "erf" ins(
// CHECK: fysched.launch "sigmoid" ins(
// CHECK: fysched.launch "silu" ins(
// CHECK: fysched.launch "gelu" ins(
// CHECK: fysched.launch "gelu_tanh" ins(
// CHECK: %[[Y:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK: fysched.launch "sigmoid" ins(%[[X]] : {{.*}}) outs(%[[Y]] :
// CHECK: %[[DX:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK: fysched.launch "unary_grad_sigmoid" ins(%[[X]], %[[Y]], %[[X]] : {{.*}}) outs(%[[DX]] :
// CHECK: fysched.launch "unary_grad_gelu_tanh" ins(
// CHECK: fysched.launch "bias_gelu" ins(%[[X]], %[[V]] :
// CHECK: fysched.launch "bias_gelu_tanh_grad" ins(%[[X]], %[[V]], %{{.*}}, %[[X]] :
// CHECK: fysched.launch "where" ins(%[[C]], %[[X]], %[[V]] :
// CHECK: fysched.launch "cast" ins(%[[C]] : !fysched.buffer<device, tensor<4x8xi1>>) outs(%{{.*}} : !fysched.buffer<device, tensor<4x8xf32>>)
// CHECK: %[[E:.*]] = fysched.alloc : <device, tensor<2x4x8xf32>>
// CHECK: fysched.launch "broadcast_to" ins(%[[V]] : !fysched.buffer<device, tensor<8xf32>>) outs(%[[E]] : !fysched.buffer<device, tensor<2x4x8xf32>>)
// CHECK: %[[S:.*]] = fysched.alloc : <device, tensor<8xf32>>
// CHECK: fysched.launch "reduce_sum" ins(%[[E]] : !fysched.buffer<device, tensor<2x4x8xf32>>) outs(%[[S]] : !fysched.buffer<device, tensor<8xf32>>)
func.func @elementwise(%x: tensor<4x8xf32>, %v: tensor<8xf32>, %c: tensor<4x8xi1>) -> tensor<8xf32> {
  %0 = fygraph.sub %x, %v : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %1 = fygraph.div %0, %v : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %2 = fygraph.pow %1, %v : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %3 = fygraph.equal %2, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xi1>
  %4 = fygraph.neg %x : tensor<4x8xf32>
  %5 = fygraph.sqrt %4 : tensor<4x8xf32>
  %6 = fygraph.reciprocal %5 : tensor<4x8xf32>
  %7 = fygraph.exp %6 : tensor<4x8xf32>
  %8 = fygraph.tanh %7 : tensor<4x8xf32>
  %9 = fygraph.erf %8 : tensor<4x8xf32>
  %10 = fygraph.sigmoid %9 : tensor<4x8xf32>
  %11 = fygraph.silu %10 : tensor<4x8xf32>
  %12 = fygraph.gelu %11 : tensor<4x8xf32>
  %13 = fygraph.gelu %12 {approximate = "tanh"} : tensor<4x8xf32>
  %y = fygraph.sigmoid %x : tensor<4x8xf32>
  %dx = fygraph.unary_grad "sigmoid" %x, %y, %x : tensor<4x8xf32>
  %14 = fygraph.unary_grad "gelu_tanh" %x, %13, %dx : tensor<4x8xf32>
  %bg = fygraph.bias_gelu %x, %v : tensor<4x8xf32>, tensor<8xf32>
  %bgg = fygraph.bias_gelu_grad %x, %v, %bg, %x {approximate = "tanh"} : tensor<4x8xf32>, tensor<8xf32>
  %15 = fygraph.where %c, %x, %v : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %16 = fygraph.cast %c : tensor<4x8xi1> to tensor<4x8xf32>
  %e = fygraph.expand %v : tensor<8xf32> -> tensor<2x4x8xf32>
  %s = fygraph.reduce_to %e : tensor<2x4x8xf32> -> tensor<8xf32>
  return %s : tensor<8xf32>
}

// -----

// Reductions write through a keepdims view of their result; with
// keepdims=true the view keeps the shape. Axes are implied by the shapes.
// CHECK-LABEL: func.func @reductions
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<2x3x4xf32>>)
// CHECK: %[[S:.*]] = fysched.alloc : <device, tensor<2x4xf32>>
// CHECK: %[[SK:.*]] = fysched.view %[[S]] : <device, tensor<2x4xf32>> -> <device, tensor<2x1x4xf32>>
// CHECK: fysched.launch "reduce_sum" ins(%[[X]] : {{.*}}) outs(%[[SK]] : !fysched.buffer<device, tensor<2x1x4xf32>>){{$}}
// CHECK: %[[M:.*]] = fysched.alloc : <device, tensor<2x3x1xf32>>
// CHECK: %[[MK:.*]] = fysched.view %[[M]] : <device, tensor<2x3x1xf32>> -> <device, tensor<2x3x1xf32>>
// CHECK: fysched.launch "reduce_mean" ins(%[[X]] : {{.*}}) outs(%[[MK]] : !fysched.buffer<device, tensor<2x3x1xf32>>){{$}}
// CHECK: return %[[S]], %[[M]]
func.func @reductions(%x: tensor<2x3x4xf32>) -> (tensor<2x4xf32>, tensor<2x3x1xf32>) {
  %s = fygraph.reduce_sum %x {axes = array<i64: 1>, keepdims = false} : tensor<2x3x4xf32> -> tensor<2x4xf32>
  %m = fygraph.reduce_mean %x {axes = array<i64: -1>} : tensor<2x3x4xf32> -> tensor<2x3x1xf32>
  return %s, %m : tensor<2x4xf32>, tensor<2x3x1xf32>
}

// -----

// Static arguments: matmul's transposes, transpose's perm, slice's starts
// and steps, concat's axis normalised to be non-negative.
// CHECK-LABEL: func.func @movement
// CHECK-SAME: (%[[A:.*]]: !fysched.buffer<device, tensor<2x3x4xf32>>, %[[B:.*]]: !fysched.buffer<device, tensor<5x4xf32>>, %[[T:.*]]: !fysched.buffer<device, tensor<10x4xf32>>, %[[I:.*]]: !fysched.buffer<device, tensor<2x3xi64>>)
// CHECK: fysched.launch "matmul" ins(%[[A]], %[[B]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<2x3x5xf32>>) {args = [false, true]}
// CHECK: fysched.launch "matmul" ins(%[[A]], %[[A]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<2x4x4xf32>>) {args = [true, false]}
// CHECK: fysched.launch "transpose" ins(%[[A]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<4x2x3xf32>>) {args = [array<i64: 2, 0, 1>]}
// CHECK: fysched.launch "slice" ins(%[[A]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<2x1x4xf32>>) {args = [array<i64: 0, 1, 0>, array<i64: 1, 2, 1>]}
// CHECK: fysched.launch "slice_grad" ins(%{{.*}} : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<2x3x4xf32>>) {args = [array<i64: 0, 1, 0>, array<i64: 1, 2, 1>]}
// CHECK: fysched.launch "concat" ins(%[[A]], %[[A]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<2x3x8xf32>>) {args = [2]}
// CHECK: %[[G:.*]] = fysched.alloc : <device, tensor<2x3x4xf32>>
// CHECK: fysched.launch "gather" ins(%[[T]], %[[I]] : !fysched.buffer<device, tensor<10x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%[[G]] : {{.*}}){{$}}
// CHECK: fysched.launch "gather_grad" ins(%[[G]], %[[I]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<10x4xf32>>){{$}}
func.func @movement(%a: tensor<2x3x4xf32>, %b: tensor<5x4xf32>, %t: tensor<10x4xf32>, %i: tensor<2x3xi64>) -> tensor<10x4xf32> {
  %0 = fygraph.matmul %a, %b {trans_b} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %1 = fygraph.matmul %a, %a {trans_a} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x4x4xf32>
  %2 = fygraph.transpose %a {perm = array<i64: 2, 0, 1>} : tensor<2x3x4xf32> -> tensor<4x2x3xf32>
  %3 = fygraph.slice %a {starts = array<i64: 0, 1, 0>, steps = array<i64: 1, 2, 1>} : tensor<2x3x4xf32> -> tensor<2x1x4xf32>
  %4 = fygraph.slice_grad %3 {starts = array<i64: 0, 1, 0>, steps = array<i64: 1, 2, 1>} : tensor<2x1x4xf32> -> tensor<2x3x4xf32>
  %5 = fygraph.concat %a, %a {axis = -1 : i64} : (tensor<2x3x4xf32>, tensor<2x3x4xf32>) -> tensor<2x3x8xf32>
  %g = fygraph.gather %t, %i : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %dt = fygraph.gather_grad %g, %i : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<10x4xf32>
  return %dt : tensor<10x4xf32>
}

// -----

// Normalisations: a launch writes every result; axes are normalised and
// epsilons passed on; layer_norm without a bias has its own kernel.
// CHECK-LABEL: func.func @norms
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<2x3x4xf32>>, %[[G:.*]]: !fysched.buffer<device, tensor<4xf32>>, %[[B:.*]]: !fysched.buffer<device, tensor<4xf32>>, %[[G2:.*]]: !fysched.buffer<device, tensor<3x4xf32>>)
// CHECK: %[[Y:.*]] = fysched.alloc : <device, tensor<2x3x4xf32>>
// CHECK: %[[MU:.*]] = fysched.alloc : <device, tensor<2x3x1xf32>>
// CHECK: %[[IS:.*]] = fysched.alloc : <device, tensor<2x3x1xf32>>
// CHECK: fysched.launch "layer_norm" ins(%[[X]], %[[G]], %[[B]] : {{.*}}) outs(%[[Y]], %[[MU]], %[[IS]] : {{.*}}) {args = [2, 9.99999974E-6 : f32]}
// CHECK: fysched.launch "layer_norm_nobias" ins(%[[X]], %[[G2]] : {{.*}}) outs({{.*}}) {args = [1, 1.000000e-03 : f32]}
// CHECK: fysched.launch "layer_norm_grad" ins(%[[X]], %[[X]], %[[G]], %[[MU]], %[[IS]] : {{.*}}) outs({{.*}} : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<device, tensor<4xf32>>) {args = [2]}
// CHECK: %[[R:.*]] = fysched.alloc : <device, tensor<2x3x4xf32>>
// CHECK: %[[IR:.*]] = fysched.alloc : <device, tensor<2x3x1xf32>>
// CHECK: fysched.launch "rms_norm" ins(%[[X]], %[[G]] : {{.*}}) outs(%[[R]], %[[IR]] : {{.*}}) {args = [2, 9.99999997E-7 : f32]}
// CHECK: fysched.launch "rms_norm_grad" ins(%[[X]], %[[X]], %[[G]], %[[IR]] : {{.*}}) outs({{.*}}) {args = [2]}
// CHECK: %[[SM:.*]] = fysched.alloc : <device, tensor<2x3x4xf32>>
// CHECK: fysched.launch "softmax" ins(%[[X]] : {{.*}}) outs(%[[SM]] : {{.*}}) {args = [2]}
// CHECK: fysched.launch "softmax_grad" ins(%[[X]], %[[SM]] : {{.*}}) outs({{.*}}) {args = [1, 1.000000e+00 : f32]}
func.func @norms(%x: tensor<2x3x4xf32>, %g: tensor<4xf32>, %b: tensor<4xf32>, %g2: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  %y, %mu, %is = fygraph.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
  %y2, %mu2, %is2 = fygraph.layer_norm %x, %g2 {axis = 1 : i64, epsilon = 1.0e-3 : f32}
      : (tensor<2x3x4xf32>, tensor<3x4xf32>) -> (tensor<2x3x4xf32>, tensor<2x1x1xf32>, tensor<2x1x1xf32>)
  %dx, %dg, %db = fygraph.layer_norm_grad %x, %x, %g, %mu, %is {axis = -1 : i64}
      : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>, tensor<4xf32>)
  %r, %ir = fygraph.rms_norm %x, %g {axis = -1 : i64, epsilon = 1.0e-6 : f32}
      : (tensor<2x3x4xf32>, tensor<4xf32>) -> (tensor<2x3x4xf32>, tensor<2x3x1xf32>)
  %rx, %rg = fygraph.rms_norm_grad %x, %x, %g, %ir {axis = 2 : i64}
      : (tensor<2x3x4xf32>, tensor<2x3x4xf32>, tensor<4xf32>, tensor<2x3x1xf32>) -> (tensor<2x3x4xf32>, tensor<4xf32>)
  %sm = fygraph.softmax %x {axis = -1 : i64} : tensor<2x3x4xf32>
  %sg = fygraph.softmax_grad %x, %sm {axis = -2 : i64} : tensor<2x3x4xf32>
  return %sg : tensor<2x3x4xf32>
}

// -----

// Attention's masked softmax passes its scale, and so does its gradient.
// CHECK-LABEL: func.func @masked_softmax
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<2x3x4x4xf32>>, %[[M:.*]]: !fysched.buffer<device, tensor<1x1x4x4xi1>>)
// CHECK: %[[Y:.*]] = fysched.alloc : <device, tensor<2x3x4x4xf32>>
// CHECK: fysched.launch "masked_softmax" ins(%[[X]], %[[M]] : {{.*}}) outs(%[[Y]] : {{.*}}) {args = [1.250000e-01 : f32]}
// CHECK: fysched.launch "softmax_grad" ins(%[[X]], %[[Y]] : {{.*}}) outs({{.*}}) {args = [3, 1.250000e-01 : f32]}
func.func @masked_softmax(%x: tensor<2x3x4x4xf32>, %m: tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32> {
  %y = fygraph.masked_softmax %x, %m {scale = 0.125 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
  %g = fygraph.softmax_grad %x, %y {axis = 3 : i64, scale = 0.125 : f32} : tensor<2x3x4x4xf32>
  return %g : tensor<2x3x4x4xf32>
}

// -----

// Fused attention: its result and log-sum-exps, then its gradient from them;
// the scale and window go with each (no T x T buffer is allocated).
// CHECK-LABEL: func.func @attention
// CHECK-SAME: (%[[Q:.*]]: !fysched.buffer<device, tensor<1x4x8x16xf32>>, %[[K:.*]]: !fysched.buffer<device, tensor<1x2x8x16xf32>>, %[[DY:.*]]: !fysched.buffer<device, tensor<1x4x8x16xf32>>)
// CHECK: %[[O:.*]] = fysched.alloc : <device, tensor<1x4x8x16xf32>>
// CHECK: %[[L:.*]] = fysched.alloc : <device, tensor<1x4x8xf32>>
// CHECK: fysched.launch "attention" ins(%[[Q]], %[[K]], %[[K]] : {{.*}}) outs(%[[O]], %[[L]] : {{.*}}) {args = [2.500000e-01 : f32, 3, false]}
// CHECK: fysched.launch "attention_grad" ins(%[[Q]], %[[K]], %[[K]], %[[O]], %[[L]], %[[DY]] : {{.*}}) outs({{.*}} : !fysched.buffer<device, tensor<1x4x8x16xf32>>, !fysched.buffer<device, tensor<1x2x8x16xf32>>, !fysched.buffer<device, tensor<1x2x8x16xf32>>) {args = [2.500000e-01 : f32, 3, false]}
// CHECK-NOT: tensor<1x4x8x8xf32>
func.func @attention(%q: tensor<1x4x8x16xf32>, %k: tensor<1x2x8x16xf32>, %dy: tensor<1x4x8x16xf32>) -> tensor<1x4x8x16xf32> {
  %o, %lse = fygraph.attention %q, %k, %k {scale = 0.25 : f32, window = 3 : i64}
      : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>) -> (tensor<1x4x8x16xf32>, tensor<1x4x8xf32>)
  %dq, %dk, %dv = fygraph.attention_grad %q, %k, %k, %o, %lse, %dy {scale = 0.25 : f32, window = 3 : i64}
      : (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x4x8x16xf32>, tensor<1x4x8xf32>, tensor<1x4x8x16xf32>)
      -> (tensor<1x4x8x16xf32>, tensor<1x2x8x16xf32>, tensor<1x2x8x16xf32>)
  return %dq : tensor<1x4x8x16xf32>
}

// -----

// The loss of a Linear's logits: the loss and both gradients from one launch,
// ignore_index and the mean as the loss's, then `true` (make the gradients);
// its last out the kernel's scratch, one block of rows' logits (here all 6
// rows: a block is at least 64), never [N, V] for a long sequence.
// CHECK-LABEL: func.func @linear_cross_entropy
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<2x3x4xf32>>, %[[W:.*]]: !fysched.buffer<device, tensor<10x4xf32>>, %[[L:.*]]: !fysched.buffer<device, tensor<6xi64>>)
// CHECK: %[[LOSS:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK: %[[DX:.*]] = fysched.alloc : <device, tensor<2x3x4xf32>>
// CHECK: %[[DW:.*]] = fysched.alloc : <device, tensor<10x4xf32>>
// CHECK: %[[BLK:.*]] = fysched.alloc : <device, tensor<6x10xf32>>
// CHECK: fysched.launch "linear_cross_entropy" ins(%[[X]], %[[W]], %[[L]] : {{.*}}) outs(%[[LOSS]], %[[DX]], %[[DW]], %[[BLK]] : {{.*}}) {args = [-100, true, true]}
// CHECK-LABEL: func.func @linear_cross_entropy_long
// CHECK: fysched.alloc : <device, tensor<512x65536xf32>>
// CHECK: fysched.launch "linear_cross_entropy"
func.func @linear_cross_entropy(%x: tensor<2x3x4xf32>, %w: tensor<10x4xf32>, %l: tensor<6xi64>) -> tensor<10x4xf32> {
  %loss, %dx, %dw = fygraph.linear_cross_entropy %x, %w, %l {ignore_index = -100 : i64}
      : (tensor<2x3x4xf32>, tensor<10x4xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<2x3x4xf32>, tensor<10x4xf32>)
  return %dw : tensor<10x4xf32>
}
// 4,096 rows of a 65,536 vocabulary: blocks of 512 rows (128 MiB).
func.func @linear_cross_entropy_long(%x: tensor<4096x8xf32>, %w: tensor<65536x8xf32>, %l: tensor<4096xi64>) -> tensor<f32> {
  %loss, %dx, %dw = fygraph.linear_cross_entropy %x, %w, %l
      : (tensor<4096x8xf32>, tensor<65536x8xf32>, tensor<4096xi64>) -> (tensor<f32>, tensor<4096x8xf32>, tensor<65536x8xf32>)
  return %loss : tensor<f32>
}

// -----

// Losses and dropout: ignore_index (INT64_MIN when absent) and whether the
// reduction is a mean; dropout's ratio as f64 and its seed.
// CHECK-LABEL: func.func @losses
// CHECK-SAME: (%[[S:.*]]: !fysched.buffer<device, tensor<4x10xf32>>, %[[L:.*]]: !fysched.buffer<device, tensor<4xi64>>, %[[ONE:.*]]: !fysched.buffer<device, tensor<f32>>)
// CHECK: %[[LOSS:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK: %[[LP:.*]] = fysched.alloc : <device, tensor<4x10xf32>>
// CHECK: fysched.launch "softmax_cross_entropy" ins(%[[S]], %[[L]] : {{.*}}) outs(%[[LOSS]], %[[LP]] : {{.*}}) {args = [-100, true]}
// CHECK: fysched.launch "softmax_cross_entropy" ins(%[[S]], %[[L]] : {{.*}}) outs({{.*}}) {args = [-9223372036854775808, false]}
// CHECK: fysched.launch "softmax_cross_entropy_grad" ins(%[[ONE]], %[[LP]], %[[L]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<4x10xf32>>) {args = [-100, true]}
// CHECK: %[[D:.*]] = fysched.alloc : <device, tensor<4x10xf32>>
// CHECK: %[[MASK:.*]] = fysched.alloc : <device, tensor<4x10xi1>>
// CHECK: fysched.launch "dropout" ins(%[[S]] : {{.*}}) outs(%[[D]], %[[MASK]] : {{.*}}) {args = [2.500000e-01, 42]}
// CHECK: fysched.launch "dropout_grad" ins(%[[D]], %[[MASK]] : {{.*}}) outs(%{{.*}} : !fysched.buffer<device, tensor<4x10xf32>>) {args = [2.500000e-01]}
func.func @losses(%s: tensor<4x10xf32>, %l: tensor<4xi64>, %one: tensor<f32>) -> tensor<4x10xf32> {
  %loss, %lp = fygraph.softmax_cross_entropy_loss %s, %l {ignore_index = -100 : i64}
      : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  %loss2, %lp2 = fygraph.softmax_cross_entropy_loss %s, %l {reduction = "sum"}
      : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  %ds = fygraph.softmax_cross_entropy_loss_grad %one, %lp, %l {ignore_index = -100 : i64}
      : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
  %d, %mask = fygraph.dropout %s {ratio = 0.25 : f32, seed = 42 : i64} : (tensor<4x10xf32>) -> (tensor<4x10xf32>, tensor<4x10xi1>)
  %dd = fygraph.dropout_grad %d, %mask {ratio = 0.25 : f32} : (tensor<4x10xf32>, tensor<4x10xi1>) -> tensor<4x10xf32>
  return %dd : tensor<4x10xf32>
}
