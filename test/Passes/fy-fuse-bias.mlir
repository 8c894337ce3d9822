// RUN: fuyou-opt %s -split-input-file --fy-fuse-bias | FileCheck %s

// A Linear's product and bias (either order of the add; a flattened 2-D
// product as GPT-2's Conv1D, and a batched one): one matmul_bias each, the
// product's flags kept.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<6x4xf32>, %[[W:.*]]: tensor<5x4xf32>, %[[B:.*]]: tensor<5xf32>, %[[X3:.*]]: tensor<2x3x4xf32>)
// CHECK-NEXT: %[[Y:.*]] = fygraph.matmul_bias %[[X]], %[[W]], %[[B]] {trans_b} : (tensor<6x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<6x5xf32>
// CHECK-NEXT: %[[Z:.*]] = fygraph.matmul_bias %[[X3]], %[[W]], %[[B]] {trans_b} : (tensor<2x3x4xf32>, tensor<5x4xf32>, tensor<5xf32>) -> tensor<2x3x5xf32>
// CHECK-NEXT: return %[[Y]], %[[Z]]
func.func @linear(%x: tensor<6x4xf32>, %w: tensor<5x4xf32>, %b: tensor<5xf32>, %x3: tensor<2x3x4xf32>) -> (tensor<6x5xf32>, tensor<2x3x5xf32>) {
  %p = fygraph.matmul %x, %w {trans_b} : (tensor<6x4xf32>, tensor<5x4xf32>) -> tensor<6x5xf32>
  %y = fygraph.add %p, %b : (tensor<6x5xf32>, tensor<5xf32>) -> tensor<6x5xf32>
  %q = fygraph.matmul %x3, %w {trans_b} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %z = fygraph.add %b, %q : (tensor<5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  return %y, %z : tensor<6x5xf32>, tensor<2x3x5xf32>
}

// -----

// Not when the product is read elsewhere too (it would be stored anyway),
// nor for an add that is not a bias along the last dim (a residual, a
// column vector, a bias that broadcasts the product up).
// CHECK-LABEL: func.func @not_bias
// CHECK-NOT: fygraph.matmul_bias
func.func @not_bias(%x: tensor<6x4xf32>, %w: tensor<4x5xf32>, %b: tensor<5xf32>, %r: tensor<6x5xf32>, %c: tensor<6x1xf32>, %bb: tensor<2x6x5xf32>) -> (tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<2x6x5xf32>) {
  %p = fygraph.matmul %x, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
  %y = fygraph.add %p, %b : (tensor<6x5xf32>, tensor<5xf32>) -> tensor<6x5xf32>
  %q = fygraph.matmul %x, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
  %res = fygraph.add %q, %r : (tensor<6x5xf32>, tensor<6x5xf32>) -> tensor<6x5xf32>
  %s = fygraph.matmul %x, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
  %col = fygraph.add %s, %c : (tensor<6x5xf32>, tensor<6x1xf32>) -> tensor<6x5xf32>
  %t = fygraph.matmul %x, %w : (tensor<6x4xf32>, tensor<4x5xf32>) -> tensor<6x5xf32>
  %up = fygraph.add %t, %bb : (tensor<6x5xf32>, tensor<2x6x5xf32>) -> tensor<2x6x5xf32>
  return %y, %p, %res, %col, %up : tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<6x5xf32>, tensor<2x6x5xf32>
}

