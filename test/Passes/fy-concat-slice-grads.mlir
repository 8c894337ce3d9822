// RUN: fuyou-opt %s -split-input-file --fy-concat-slice-grads | FileCheck %s

// GPT-2's q, k and v of one product: their gradients' slice_grads, summed
// as autodiff sums them, become one concat in the pieces' order (whatever
// the order of the sum).
// CHECK-LABEL: func.func @qkv
// CHECK-SAME: (%[[DQ:.*]]: tensor<6x4xf32>, %[[DK:.*]]: tensor<6x4xf32>, %[[DV:.*]]: tensor<6x4xf32>)
// CHECK-NEXT: %[[C:.*]] = fygraph.concat %[[DQ]], %[[DK]], %[[DV]] {axis = 1 : i64} : (tensor<6x4xf32>, tensor<6x4xf32>, tensor<6x4xf32>) -> tensor<6x12xf32>
// CHECK-NEXT: return %[[C]]
func.func @qkv(%dq: tensor<6x4xf32>, %dk: tensor<6x4xf32>, %dv: tensor<6x4xf32>) -> tensor<6x12xf32> {
  %v = fygraph.slice_grad %dv {starts = array<i64: 0, 8>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x12xf32>
  %q = fygraph.slice_grad %dq {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x12xf32>
  %k = fygraph.slice_grad %dk {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x12xf32>
  %s = fygraph.add %v, %q : (tensor<6x12xf32>, tensor<6x12xf32>) -> tensor<6x12xf32>
  %t = fygraph.add %s, %k : (tensor<6x12xf32>, tensor<6x12xf32>) -> tensor<6x12xf32>
  return %t : tensor<6x12xf32>
}

// -----

// RoPE's halves along a middle axis, pieces of unequal size.
// CHECK-LABEL: func.func @halves
// CHECK-NEXT: %[[C:.*]] = fygraph.concat %{{.*}}, %{{.*}} {axis = 1 : i64} : (tensor<2x3x5xf32>, tensor<2x1x5xf32>) -> tensor<2x4x5xf32>
// CHECK-NEXT: return %[[C]]
func.func @halves(%a: tensor<2x3x5xf32>, %b: tensor<2x1x5xf32>) -> tensor<2x4x5xf32> {
  %x = fygraph.slice_grad %a {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x3x5xf32> -> tensor<2x4x5xf32>
  %y = fygraph.slice_grad %b {starts = array<i64: 0, 3, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x1x5xf32> -> tensor<2x4x5xf32>
  %s = fygraph.add %y, %x : (tensor<2x4x5xf32>, tensor<2x4x5xf32>) -> tensor<2x4x5xf32>
  return %s : tensor<2x4x5xf32>
}

// -----

// Not for pieces that leave a gap or overlap, are strided, are cut along
// two axes, or are read elsewhere too.
// CHECK-LABEL: func.func @not_a_tiling
// CHECK-NOT: fygraph.concat
func.func @not_a_tiling(%a: tensor<6x4xf32>, %b: tensor<6x4xf32>, %d: tensor<3x4xf32>) -> (tensor<6x12xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<6x8xf32>) {
  %g0 = fygraph.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x12xf32>
  %g1 = fygraph.slice_grad %b {starts = array<i64: 0, 8>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x12xf32>
  %gap = fygraph.add %g0, %g1 : (tensor<6x12xf32>, tensor<6x12xf32>) -> tensor<6x12xf32>
  %o0 = fygraph.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %o1 = fygraph.slice_grad %b {starts = array<i64: 0, 2>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %overlap = fygraph.add %o0, %o1 : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  %s0 = fygraph.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 2>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %s1 = fygraph.slice_grad %b {starts = array<i64: 0, 1>, steps = array<i64: 1, 2>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %strided = fygraph.add %s0, %s1 : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  %t0 = fygraph.slice_grad %d {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<3x4xf32> -> tensor<6x8xf32>
  %t1 = fygraph.slice_grad %d {starts = array<i64: 3, 4>, steps = array<i64: 1, 1>} : tensor<3x4xf32> -> tensor<6x8xf32>
  %two = fygraph.add %t0, %t1 : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  %u0 = fygraph.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %u1 = fygraph.slice_grad %b {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %read = fygraph.add %u0, %u1 : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  return %gap, %overlap, %strided, %two, %u0 : tensor<6x12xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<6x8xf32>, tensor<6x8xf32>
}

// -----

// A sum with another term: the tiling part becomes the concat, the other
// term is still added to it.
// CHECK-LABEL: func.func @and_another_term
// CHECK-SAME: (%[[A:.*]]: tensor<6x4xf32>, %[[B:.*]]: tensor<6x4xf32>, %[[R:.*]]: tensor<6x8xf32>)
// CHECK-NEXT: %[[C:.*]] = fygraph.concat %[[A]], %[[B]] {axis = 1 : i64}
// CHECK-NEXT: %[[S:.*]] = fygraph.add %[[C]], %[[R]]
// CHECK-NEXT: return %[[S]]
func.func @and_another_term(%a: tensor<6x4xf32>, %b: tensor<6x4xf32>, %r: tensor<6x8xf32>) -> tensor<6x8xf32> {
  %w0 = fygraph.slice_grad %a {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %w1 = fygraph.slice_grad %b {starts = array<i64: 0, 4>, steps = array<i64: 1, 1>} : tensor<6x4xf32> -> tensor<6x8xf32>
  %w = fygraph.add %w0, %w1 : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  %other = fygraph.add %w, %r : (tensor<6x8xf32>, tensor<6x8xf32>) -> tensor<6x8xf32>
  return %other : tensor<6x8xf32>
}
