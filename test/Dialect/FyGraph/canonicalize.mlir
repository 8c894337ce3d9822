// RUN: fuyou-opt %s -split-input-file --canonicalize | FileCheck %s

// A tied table's gradient, the logits part plus the gather's rows: one
// gather_grad_add, whichever side of the add the rows are on.
// CHECK-LABEL: func.func @tied
// CHECK-SAME: (%[[A:.*]]: tensor<16x8xf32>, %[[DY:.*]]: tensor<2x4x8xf32>, %[[IDX:.*]]: tensor<2x4xi64>)
// CHECK-NEXT: %[[S:.*]] = fygraph.gather_grad_add %[[A]], %[[DY]], %[[IDX]]
// CHECK-NEXT: %[[T:.*]] = fygraph.gather_grad_add %[[A]], %[[DY]], %[[IDX]]
// CHECK-NEXT: return %[[S]], %[[T]]
func.func @tied(%a: tensor<16x8xf32>, %dy: tensor<2x4x8xf32>, %idx: tensor<2x4xi64>) -> (tensor<16x8xf32>, tensor<16x8xf32>) {
  %g = fygraph.gather_grad %dy, %idx : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  %s = fygraph.add %a, %g : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %h = fygraph.gather_grad %dy, %idx : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  %t = fygraph.add %h, %a : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  return %s, %t : tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

// The scattered rows read elsewhere too, or an add that broadcasts: left alone.
// CHECK-LABEL: func.func @kept
// CHECK: fygraph.gather_grad %
// CHECK: fygraph.add
// CHECK: fygraph.gather_grad %
// CHECK: fygraph.add
// CHECK-NOT: gather_grad_add
func.func @kept(%a: tensor<16x8xf32>, %b: tensor<8xf32>, %dy: tensor<2x8xf32>, %idx: tensor<2xi64>)
    -> (tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>) {
  %g = fygraph.gather_grad %dy, %idx : (tensor<2x8xf32>, tensor<2xi64>) -> tensor<16x8xf32>
  %s = fygraph.add %a, %g : (tensor<16x8xf32>, tensor<16x8xf32>) -> tensor<16x8xf32>
  %h = fygraph.gather_grad %dy, %idx : (tensor<2x8xf32>, tensor<2xi64>) -> tensor<16x8xf32>
  %t = fygraph.add %h, %b : (tensor<16x8xf32>, tensor<8xf32>) -> tensor<16x8xf32>
  return %s, %g, %t : tensor<16x8xf32>, tensor<16x8xf32>, tensor<16x8xf32>
}

// -----

// A transpose of a transpose is one (torch's k.transpose(-2, -1) of a k
// already moved to [B, H, T, D] exports as two), and the identity is none.
// The inner one stays where something else reads it.
// CHECK-LABEL: func.func @transposes
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4x5xf32>)
// CHECK-NEXT: %[[I:.*]] = fygraph.transpose %[[X]] {perm = array<i64: 0, 2, 3, 1>} : tensor<2x3x4x5xf32> -> tensor<2x4x5x3xf32>
// CHECK-NEXT: %[[T:.*]] = fygraph.transpose %[[X]] {perm = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x5xf32> -> tensor<2x4x3x5xf32>
// CHECK-NEXT: return %[[T]], %[[X]], %[[I]]
func.func @transposes(%x: tensor<2x3x4x5xf32>) -> (tensor<2x4x3x5xf32>, tensor<2x3x4x5xf32>, tensor<2x4x5x3xf32>) {
  %a = fygraph.transpose %x {perm = array<i64: 0, 2, 3, 1>} : tensor<2x3x4x5xf32> -> tensor<2x4x5x3xf32>
  %b = fygraph.transpose %a {perm = array<i64: 0, 1, 3, 2>} : tensor<2x4x5x3xf32> -> tensor<2x4x3x5xf32>
  %c = fygraph.transpose %x {perm = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x5xf32> -> tensor<2x4x3x5xf32>
  %d = fygraph.transpose %c {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x3x5xf32> -> tensor<2x3x4x5xf32>
  return %b, %d, %a : tensor<2x4x3x5xf32>, tensor<2x3x4x5xf32>, tensor<2x4x5x3xf32>
}
