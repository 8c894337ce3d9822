// RUN: fuyou-opt %s -split-input-file --fy-recompose=rope=true | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-recompose="rope=true attention=true" | FileCheck %s --check-prefix=SWAP
// RUN: fuyou-opt %s -split-input-file --fy-recompose | FileCheck %s --check-prefix=OFF
// OFF-NOT: fygraph.rope

// RoPE as Llama exports it, token-major q [B, T, H, D] with cos and sin
// [1, T, 1, D] (either order of each product and of the sum): one rope, the
// tables reshaped to [T, D], the seven ops gone.
// CHECK-LABEL: func.func @rope
// CHECK-SAME: (%[[X:.*]]: tensor<2x6x3x8xf32>, %[[C:.*]]: tensor<1x6x1x8xf32>, %[[S:.*]]: tensor<1x6x1x8xf32>)
// CHECK-DAG: %[[C2:.*]] = fygraph.reshape %[[C]] : tensor<1x6x1x8xf32> -> tensor<6x8xf32>
// CHECK-DAG: %[[S2:.*]] = fygraph.reshape %[[S]] : tensor<1x6x1x8xf32> -> tensor<6x8xf32>
// CHECK: %[[R:.*]] = fygraph.rope %[[X]], %[[C2]], %[[S2]] {seq_axis = 1 : i64} : tensor<2x6x3x8xf32>, tensor<6x8xf32>
// CHECK-NOT: fygraph.slice
// CHECK-NOT: fygraph.concat
// CHECK: return %[[R]]
func.func @rope(%x: tensor<2x6x3x8xf32>, %c: tensor<1x6x1x8xf32>, %s: tensor<1x6x1x8xf32>) -> tensor<2x6x3x8xf32> {
  %xc = fygraph.mul %c, %x : (tensor<1x6x1x8xf32>, tensor<2x6x3x8xf32>) -> tensor<2x6x3x8xf32>
  %lo = fygraph.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x6x3x8xf32> -> tensor<2x6x3x4xf32>
  %hi = fygraph.slice %x {starts = array<i64: 0, 0, 0, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x6x3x8xf32> -> tensor<2x6x3x4xf32>
  %n = fygraph.neg %hi : tensor<2x6x3x4xf32>
  %r = fygraph.concat %n, %lo {axis = 3 : i64} : (tensor<2x6x3x4xf32>, tensor<2x6x3x4xf32>) -> tensor<2x6x3x8xf32>
  %rs = fygraph.mul %s, %r : (tensor<1x6x1x8xf32>, tensor<2x6x3x8xf32>) -> tensor<2x6x3x8xf32>
  %y = fygraph.add %rs, %xc : (tensor<2x6x3x8xf32>, tensor<2x6x3x8xf32>) -> tensor<2x6x3x8xf32>
  return %y : tensor<2x6x3x8xf32>
}

// -----

// Head-major [B, H, T, D] with [T, D] tables: seq_axis 2, no reshape.
// CHECK-LABEL: func.func @rope_heads
// CHECK: fygraph.rope %{{.*}}, %{{.*}}, %{{.*}} {seq_axis = 2 : i64} : tensor<2x3x6x8xf32>, tensor<6x8xf32>
func.func @rope_heads(%x: tensor<2x3x6x8xf32>, %c: tensor<6x8xf32>, %s: tensor<6x8xf32>) -> tensor<2x3x6x8xf32> {
  %xc = fygraph.mul %x, %c : (tensor<2x3x6x8xf32>, tensor<6x8xf32>) -> tensor<2x3x6x8xf32>
  %lo = fygraph.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x3x6x8xf32> -> tensor<2x3x6x4xf32>
  %hi = fygraph.slice %x {starts = array<i64: 0, 0, 0, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x3x6x8xf32> -> tensor<2x3x6x4xf32>
  %n = fygraph.neg %hi : tensor<2x3x6x4xf32>
  %r = fygraph.concat %n, %lo {axis = -1 : i64} : (tensor<2x3x6x4xf32>, tensor<2x3x6x4xf32>) -> tensor<2x3x6x8xf32>
  %rs = fygraph.mul %r, %s : (tensor<2x3x6x8xf32>, tensor<6x8xf32>) -> tensor<2x3x6x8xf32>
  %y = fygraph.add %xc, %rs : (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) -> tensor<2x3x6x8xf32>
  return %y : tensor<2x3x6x8xf32>
}

// -----

// Not a rotation of the halves: the halves swapped the other way (no neg on
// the second), a slice of the wrong width, a table over the heads too, or a
// table computed from a trainable parameter (it would need a gradient).
// CHECK-LABEL: func.func @not_rope
// CHECK-NOT: fygraph.rope
fygraph.param @w trainable : tensor<6x8xf32>
func.func @not_rope(%x: tensor<2x3x6x8xf32>, %c: tensor<6x8xf32>, %s: tensor<6x8xf32>, %ch: tensor<3x6x8xf32>) -> (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) {
  %xc = fygraph.mul %x, %c : (tensor<2x3x6x8xf32>, tensor<6x8xf32>) -> tensor<2x3x6x8xf32>
  %lo = fygraph.slice %x {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x3x6x8xf32> -> tensor<2x3x6x4xf32>
  %hi = fygraph.slice %x {starts = array<i64: 0, 0, 0, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x3x6x8xf32> -> tensor<2x3x6x4xf32>
  %nlo = fygraph.neg %lo : tensor<2x3x6x4xf32>
  %r1 = fygraph.concat %nlo, %hi {axis = 3 : i64} : (tensor<2x3x6x4xf32>, tensor<2x3x6x4xf32>) -> tensor<2x3x6x8xf32>
  %rs1 = fygraph.mul %r1, %s : (tensor<2x3x6x8xf32>, tensor<6x8xf32>) -> tensor<2x3x6x8xf32>
  %y1 = fygraph.add %xc, %rs1 : (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) -> tensor<2x3x6x8xf32>
  %n = fygraph.neg %hi : tensor<2x3x6x4xf32>
  %r = fygraph.concat %n, %lo {axis = 3 : i64} : (tensor<2x3x6x4xf32>, tensor<2x3x6x4xf32>) -> tensor<2x3x6x8xf32>
  %xch = fygraph.mul %x, %ch : (tensor<2x3x6x8xf32>, tensor<3x6x8xf32>) -> tensor<2x3x6x8xf32>
  %rsh = fygraph.mul %r, %ch : (tensor<2x3x6x8xf32>, tensor<3x6x8xf32>) -> tensor<2x3x6x8xf32>
  %y2 = fygraph.add %xch, %rsh : (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) -> tensor<2x3x6x8xf32>
  %w = fygraph.get_param @w : tensor<6x8xf32>
  %xw = fygraph.mul %x, %w : (tensor<2x3x6x8xf32>, tensor<6x8xf32>) -> tensor<2x3x6x8xf32>
  %rw = fygraph.mul %r, %s : (tensor<2x3x6x8xf32>, tensor<6x8xf32>) -> tensor<2x3x6x8xf32>
  %y3 = fygraph.add %xw, %rw : (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) -> tensor<2x3x6x8xf32>
  return %y1, %y2, %y3 : tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>
}

// -----

// A swap of heads above the rotation: without attention the rope forms on
// the head-major value; with it the swap moves below the rotation first (to
// be folded into attention's layout) and the rope forms on the token-major x.
// CHECK-LABEL: func.func @rope_after_swap
// CHECK: fygraph.transpose
// CHECK: fygraph.rope %{{.*}}, %{{.*}}, %{{.*}} {seq_axis = 2 : i64} : tensor<2x3x6x8xf32>, tensor<6x8xf32>
// SWAP-LABEL: func.func @rope_after_swap
// SWAP: fygraph.rope %{{.*}}, %{{.*}}, %{{.*}} {seq_axis = 1 : i64} : tensor<2x6x3x8xf32>, tensor<6x8xf32>
// SWAP: fygraph.transpose
func.func @rope_after_swap(%x: tensor<2x6x3x8xf32>, %c: tensor<1x1x6x8xf32>, %s: tensor<1x1x6x8xf32>) -> tensor<2x3x6x8xf32> {
  %t = fygraph.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<2x6x3x8xf32> -> tensor<2x3x6x8xf32>
  %xc = fygraph.mul %t, %c : (tensor<2x3x6x8xf32>, tensor<1x1x6x8xf32>) -> tensor<2x3x6x8xf32>
  %lo = fygraph.slice %t {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x3x6x8xf32> -> tensor<2x3x6x4xf32>
  %hi = fygraph.slice %t {starts = array<i64: 0, 0, 0, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x3x6x8xf32> -> tensor<2x3x6x4xf32>
  %n = fygraph.neg %hi : tensor<2x3x6x4xf32>
  %r = fygraph.concat %n, %lo {axis = 3 : i64} : (tensor<2x3x6x4xf32>, tensor<2x3x6x4xf32>) -> tensor<2x3x6x8xf32>
  %rs = fygraph.mul %r, %s : (tensor<2x3x6x8xf32>, tensor<1x1x6x8xf32>) -> tensor<2x3x6x8xf32>
  %y = fygraph.add %xc, %rs : (tensor<2x3x6x8xf32>, tensor<2x3x6x8xf32>) -> tensor<2x3x6x8xf32>
  return %y : tensor<2x3x6x8xf32>
}
