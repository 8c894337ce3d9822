// RUN: fuyou-opt %s -split-input-file --fy-autodiff -verify-diagnostics | FileCheck %s
// A concat over a negative axis (kept apart: it crashed the pass).
// RUN: fuyou-opt %S/Inputs/fy-autodiff-concat-negative-axis.mlir --fy-autodiff | FileCheck %S/Inputs/fy-autodiff-concat-negative-axis.mlir
// Backward from the run's loss scale (kept apart: a pass option).
// RUN: fuyou-opt %S/Inputs/fy-autodiff-loss-scale.mlir --fy-autodiff=loss-scale=true | FileCheck %S/Inputs/fy-autodiff-loss-scale.mlir
// RUN: fuyou-opt %S/Inputs/fy-autodiff-loss-scale-cross-entropy.mlir --fy-autodiff=loss-scale=true | FileCheck %S/Inputs/fy-autodiff-loss-scale-cross-entropy.mlir

// @forward becomes @train_step returning the loss and then one gradient per
// trainable parameter; the loss's seed is 1 and a full reduce_sum broadcasts
// it back. add with broadcasting sums the gradient back to the operand's
// shape with reduce_to.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>) -> (tensor<f32>, tensor<8xf32>) attributes {fygraph.grads = [@b]}
// CHECK: %[[B:.*]] = fygraph.get_param @b : tensor<8xf32>
// CHECK: %[[L:.*]] = fygraph.reduce_sum
// CHECK: %[[ONE:.*]] = fygraph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[R:.*]] = fygraph.reshape %[[ONE]] : tensor<f32> -> tensor<1x1xf32>
// CHECK: %[[DY:.*]] = fygraph.expand %[[R]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK: %[[DB:.*]] = fygraph.reduce_to %[[DY]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK: return %[[L]], %[[DB]] : tensor<f32>, tensor<8xf32>
// CHECK-NOT: func.func @forward
fygraph.param @b trainable : tensor<8xf32>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %b = fygraph.get_param @b : tensor<8xf32>
  %y = fygraph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// sub negates the gradient of its rhs; mul multiplies by the other operand
// and reduces the broadcast one. Gradients come in declaration order.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<4x8xf32>, tensor<8xf32>) attributes {fygraph.grads = [@a, @c]}
// CHECK: %[[A:.*]] = fygraph.get_param @a
// CHECK: %[[C:.*]] = fygraph.get_param @c
// CHECK: %[[L:.*]] = fygraph.reduce_sum
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DM:.*]] = fygraph.neg %[[DY]] : tensor<4x8xf32>
// CHECK-DAG: %[[DA:.*]] = fygraph.mul %[[DM]], %[[C]] : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
// CHECK-DAG: %[[DCF:.*]] = fygraph.mul %[[DM]], %[[A]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[DC:.*]] = fygraph.reduce_to %[[DCF]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK: return %[[L]], %[[DA]], %[[DC]]
fygraph.param @a trainable : tensor<4x8xf32>
fygraph.param @c trainable : tensor<8xf32>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %a = fygraph.get_param @a : tensor<4x8xf32>
  %c = fygraph.get_param @c : tensor<8xf32>
  %m = fygraph.mul %a, %c : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %s = fygraph.sub %x, %m : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// y = a / c: da = dy / c, dc = -(dy * y) / c.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: attributes {fygraph.grads = [@a, @c]}
// CHECK: %[[A:.*]] = fygraph.get_param @a
// CHECK: %[[C:.*]] = fygraph.get_param @c
// CHECK: %[[Y:.*]] = fygraph.div %[[A]], %[[C]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DA:.*]] = fygraph.div %[[DY]], %[[C]] : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[T:.*]] = fygraph.mul %[[DY]], %[[Y]]
// CHECK: %[[T2:.*]] = fygraph.div %[[T]], %[[C]]
// CHECK: %[[DC:.*]] = fygraph.neg %[[T2]]
// CHECK: return %{{.*}}, %[[DA]], %[[DC]]
fygraph.param @a trainable : tensor<4x8xf32>
fygraph.param @c trainable : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %a = fygraph.get_param @a : tensor<4x8xf32>
  %c = fygraph.get_param @c : tensor<4x8xf32>
  %y = fygraph.div %a, %c : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// y = w^e with a constant e: dw = (dy * e) * w^(e - 1).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %[[E:.*]] = fygraph.constant dense<3.000000e+00> : tensor<f32>
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[ONE:.*]] = fygraph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[EM1:.*]] = fygraph.sub %[[E]], %[[ONE]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[P:.*]] = fygraph.pow %[[W]], %[[EM1]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK: %[[T:.*]] = fygraph.mul %[[DY]], %[[E]] : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK: %[[DW:.*]] = fygraph.mul %[[T]], %[[P]]
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %e = fygraph.constant dense<3.0> : tensor<f32>
  %y = fygraph.pow %w, %e : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A 2-D weight shared over a batch ([2,3,4] x [5,4]^T): the batch folds into
// rows, so dW is one GEMM of the flattened operands and dX one GEMM reshaped
// back. Here X is an embedding lookup, so dX reaches the table too.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDX:.*]]: tensor<2x3xi64>) -> (tensor<f32>, tensor<10x4xf32>, tensor<5x4xf32>) attributes {fygraph.grads = [@emb, @w]}
// CHECK: %[[E:.*]] = fygraph.get_param @emb
// CHECK: %[[H:.*]] = fygraph.gather %[[E]], %[[IDX]]
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %[[DY:.*]] = fygraph.expand %{{.*}} : tensor<1x1x1xf32> -> tensor<2x3x5xf32>
// CHECK-DAG: %[[H2:.*]] = fygraph.reshape %[[H]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK-DAG: %[[G2:.*]] = fygraph.reshape %[[DY]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK: %[[DH2:.*]] = fygraph.matmul %[[G2]], %[[W]] : (tensor<6x5xf32>, tensor<5x4xf32>) -> tensor<6x4xf32>
// CHECK: %[[DH:.*]] = fygraph.reshape %[[DH2]] : tensor<6x4xf32> -> tensor<2x3x4xf32>
// CHECK: %[[DW:.*]] = fygraph.matmul %[[G2]], %[[H2]] {trans_a} : (tensor<6x5xf32>, tensor<6x4xf32>) -> tensor<5x4xf32>
// CHECK: %[[DE:.*]] = fygraph.gather_grad %[[DH]], %[[IDX]] : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<10x4xf32>
// CHECK: return %{{.*}}, %[[DE]], %[[DW]]
fygraph.param @emb trainable : tensor<10x4xf32>
fygraph.param @w trainable : tensor<5x4xf32>
func.func @forward(%idx: tensor<2x3xi64>) -> tensor<f32> {
  %e = fygraph.get_param @emb : tensor<10x4xf32>
  %h = fygraph.gather %e, %idx : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %w = fygraph.get_param @w : tensor<5x4xf32>
  %y = fygraph.matmul %h, %w {trans_b} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The same without trans_b: dW = X2^T G2.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>) -> (tensor<f32>, tensor<4x5xf32>)
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK-DAG: %[[X2:.*]] = fygraph.reshape %[[X]] : tensor<2x3x4xf32> -> tensor<6x4xf32>
// CHECK-DAG: %[[G2:.*]] = fygraph.reshape %[[DY]] : tensor<2x3x5xf32> -> tensor<6x5xf32>
// CHECK: %[[DW:.*]] = fygraph.matmul %[[X2]], %[[G2]] {trans_a} : (tensor<6x4xf32>, tensor<6x5xf32>) -> tensor<4x5xf32>
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<4x5xf32>
func.func @forward(%x: tensor<2x3x4xf32>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x5xf32>
  %y = fygraph.matmul %x, %w : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Batched matmuls, each combination of transposes:
//   y = A B:       dA = G B^T,   dB = A^T G (then reduced over the broadcast batch)
//   y = A B^T:     dA = G B,     dB = G^T A
//   y = A^T B:     dA = B G^T,   dB = A G
//   y = A^T B^T:   dA = B^T G^T, dB = G^T A^T
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: attributes {fygraph.grads = [@a0, @b0, @a1, @b1, @a2, @b2, @a3, @b3]}
// CHECK-DAG: %[[A0:.*]] = fygraph.get_param @a0
// CHECK-DAG: %[[B0:.*]] = fygraph.get_param @b0
// CHECK-DAG: %[[A1:.*]] = fygraph.get_param @a1
// CHECK-DAG: %[[B1:.*]] = fygraph.get_param @b1
// CHECK-DAG: %[[A2:.*]] = fygraph.get_param @a2
// CHECK-DAG: %[[B2:.*]] = fygraph.get_param @b2
// CHECK-DAG: %[[A3:.*]] = fygraph.get_param @a3
// CHECK-DAG: %[[B3:.*]] = fygraph.get_param @b3
// CHECK: %[[G:.*]] = fygraph.expand %{{.*}} : tensor<1x1x1xf32> -> tensor<2x3x5xf32>
// CHECK-DAG: %[[DA0:.*]] = fygraph.matmul %[[G]], %[[B0]] {trans_b} : (tensor<2x3x5xf32>, tensor<1x4x5xf32>) -> tensor<2x3x4xf32>
// CHECK-DAG: %[[DB0F:.*]] = fygraph.matmul %[[A0]], %[[G]] {trans_a} : (tensor<2x3x4xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
// CHECK-DAG: %[[DB0:.*]] = fygraph.reduce_to %[[DB0F]] : tensor<2x4x5xf32> -> tensor<1x4x5xf32>
// CHECK-DAG: %[[DA1:.*]] = fygraph.matmul %[[G]], %[[B1]] : (tensor<2x3x5xf32>, tensor<2x5x4xf32>) -> tensor<2x3x4xf32>
// CHECK-DAG: %[[DB1:.*]] = fygraph.matmul %[[G]], %[[A1]] {trans_a} : (tensor<2x3x5xf32>, tensor<2x3x4xf32>) -> tensor<2x5x4xf32>
// CHECK-DAG: %[[DA2:.*]] = fygraph.matmul %[[B2]], %[[G]] {trans_b} : (tensor<2x4x5xf32>, tensor<2x3x5xf32>) -> tensor<2x4x3xf32>
// CHECK-DAG: %[[DB2:.*]] = fygraph.matmul %[[A2]], %[[G]] : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
// CHECK-DAG: %[[DA3:.*]] = fygraph.matmul %[[B3]], %[[G]] {trans_a, trans_b} : (tensor<2x5x4xf32>, tensor<2x3x5xf32>) -> tensor<2x4x3xf32>
// CHECK-DAG: %[[DB3:.*]] = fygraph.matmul %[[G]], %[[A3]] {trans_a, trans_b} : (tensor<2x3x5xf32>, tensor<2x4x3xf32>) -> tensor<2x5x4xf32>
// CHECK: return %{{.*}}, %[[DA0]], %[[DB0]], %[[DA1]], %[[DB1]], %[[DA2]], %[[DB2]], %[[DA3]], %[[DB3]] :
fygraph.param @a0 trainable : tensor<2x3x4xf32>
fygraph.param @b0 trainable : tensor<1x4x5xf32>
fygraph.param @a1 trainable : tensor<2x3x4xf32>
fygraph.param @b1 trainable : tensor<2x5x4xf32>
fygraph.param @a2 trainable : tensor<2x4x3xf32>
fygraph.param @b2 trainable : tensor<2x4x5xf32>
fygraph.param @a3 trainable : tensor<2x4x3xf32>
fygraph.param @b3 trainable : tensor<2x5x4xf32>
func.func @forward() -> tensor<f32> {
  %a0 = fygraph.get_param @a0 : tensor<2x3x4xf32>
  %b0 = fygraph.get_param @b0 : tensor<1x4x5xf32>
  %a1 = fygraph.get_param @a1 : tensor<2x3x4xf32>
  %b1 = fygraph.get_param @b1 : tensor<2x5x4xf32>
  %a2 = fygraph.get_param @a2 : tensor<2x4x3xf32>
  %b2 = fygraph.get_param @b2 : tensor<2x4x5xf32>
  %a3 = fygraph.get_param @a3 : tensor<2x4x3xf32>
  %b3 = fygraph.get_param @b3 : tensor<2x5x4xf32>
  %y0 = fygraph.matmul %a0, %b0 : (tensor<2x3x4xf32>, tensor<1x4x5xf32>) -> tensor<2x3x5xf32>
  %y1 = fygraph.matmul %a1, %b1 {trans_b} : (tensor<2x3x4xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
  %y2 = fygraph.matmul %a2, %b2 {trans_a} : (tensor<2x4x3xf32>, tensor<2x4x5xf32>) -> tensor<2x3x5xf32>
  %y3 = fygraph.matmul %a3, %b3 {trans_a, trans_b} : (tensor<2x4x3xf32>, tensor<2x5x4xf32>) -> tensor<2x3x5xf32>
  %s0 = fygraph.add %y0, %y1 : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %s1 = fygraph.add %s0, %y2 : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %s2 = fygraph.add %s1, %y3 : (tensor<2x3x5xf32>, tensor<2x3x5xf32>) -> tensor<2x3x5xf32>
  %l = fygraph.reduce_sum %s2 {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x5xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// transpose: the gradient goes through the inverse permutation;
// reshape: back to the input's shape.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<2x3x4xf32>, tensor<4x6xf32>)
// CHECK-DAG: %[[DY:.*]] = fygraph.expand %{{.*}} : tensor<1x1x1xf32> -> tensor<3x4x2xf32>
// CHECK-DAG: %[[DT:.*]] = fygraph.transpose %[[DY]] {perm = array<i64: 2, 0, 1>} : tensor<3x4x2xf32> -> tensor<2x3x4xf32>
// CHECK-DAG: %[[DV:.*]] = fygraph.expand %{{.*}} : tensor<1xf32> -> tensor<24xf32>
// CHECK-DAG: %[[DR:.*]] = fygraph.reshape %[[DV]] : tensor<24xf32> -> tensor<4x6xf32>
// CHECK: return %{{.*}}, %[[DT]], %[[DR]]
fygraph.param @t trainable : tensor<2x3x4xf32>
fygraph.param @r trainable : tensor<4x6xf32>
func.func @forward() -> tensor<f32> {
  %t = fygraph.get_param @t : tensor<2x3x4xf32>
  %tt = fygraph.transpose %t {perm = array<i64: 1, 2, 0>} : tensor<2x3x4xf32> -> tensor<3x4x2xf32>
  %l0 = fygraph.reduce_sum %tt {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<3x4x2xf32> -> tensor<f32>
  %r = fygraph.get_param @r : tensor<4x6xf32>
  %rr = fygraph.reshape %r : tensor<4x6xf32> -> tensor<24xf32>
  %l1 = fygraph.reduce_sum %rr {axes = array<i64: 0>, keepdims = false} : tensor<24xf32> -> tensor<f32>
  %l = fygraph.add %l0, %l1 : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// expand: reduce_to the input's shape. reduce_mean over a [4,1] scales by
// 1/4; over the last dim of [4,8] (kept) by 1/8, and broadcasts back.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<1x8xf32>)
// CHECK: %[[SEED:.*]] = fygraph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[K4:.*]] = fygraph.constant dense<2.500000e-01> : tensor<f32>
// CHECK: %[[G0:.*]] = fygraph.mul %[[SEED]], %[[K4]] : (tensor<f32>, tensor<f32>) -> tensor<f32>
// CHECK: %[[G1:.*]] = fygraph.reshape %[[G0]] : tensor<f32> -> tensor<1x1xf32>
// CHECK: %[[G2:.*]] = fygraph.expand %[[G1]] : tensor<1x1xf32> -> tensor<4x1xf32>
// CHECK: %[[K8:.*]] = fygraph.constant dense<1.250000e-01> : tensor<f32>
// CHECK: %[[G3:.*]] = fygraph.mul %[[G2]], %[[K8]] : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
// CHECK: %[[G4:.*]] = fygraph.expand %[[G3]] : tensor<4x1xf32> -> tensor<4x8xf32>
// CHECK: %[[DW:.*]] = fygraph.reduce_to %[[G4]] : tensor<4x8xf32> -> tensor<1x8xf32>
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<1x8xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<1x8xf32>
  %e = fygraph.expand %w : tensor<1x8xf32> -> tensor<4x8xf32>
  %m = fygraph.reduce_mean %e {axes = array<i64: -1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %l = fygraph.reduce_mean %m {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x1xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// concat: each input's gradient is a slice of the result's at its offset
// along the axis.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<2x3xf32>, tensor<2x5xf32>)
// CHECK: %[[DY:.*]] = fygraph.expand %{{.*}} : tensor<1x1xf32> -> tensor<2x8xf32>
// CHECK: %[[DA:.*]] = fygraph.slice %[[DY]] {starts = array<i64: 0, 0>, steps = array<i64: 1, 1>} : tensor<2x8xf32> -> tensor<2x3xf32>
// CHECK: %[[DC:.*]] = fygraph.slice %[[DY]] {starts = array<i64: 0, 3>, steps = array<i64: 1, 1>} : tensor<2x8xf32> -> tensor<2x5xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DC]]
fygraph.param @a trainable : tensor<2x3xf32>
fygraph.param @c trainable : tensor<2x5xf32>
func.func @forward() -> tensor<f32> {
  %a = fygraph.get_param @a : tensor<2x3xf32>
  %c = fygraph.get_param @c : tensor<2x5xf32>
  %y = fygraph.concat %a, %c {axis = 1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// slice: slice_grad scatters into the input's shape with the same starts and steps.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[DY:.*]] = fygraph.expand %{{.*}} : tensor<1x1xf32> -> tensor<2x8xf32>
// CHECK: %[[DW:.*]] = fygraph.slice_grad %[[DY]] {starts = array<i64: 1, 0>, steps = array<i64: 2, 1>} : tensor<2x8xf32> -> tensor<4x8xf32>
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %s = fygraph.slice %w {starts = array<i64: 1, 0>, steps = array<i64: 2, 1>} : tensor<4x8xf32> -> tensor<2x8xf32>
  %l = fygraph.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// where: the gradient goes to the selected side, zero to the other; the
// broadcast rhs is reduced. The condition gets none.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[COND:.*]]: tensor<4x8xi1>) -> (tensor<f32>, tensor<4x8xf32>, tensor<8xf32>)
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[Z:.*]] = fygraph.constant dense<0.000000e+00> : tensor<f32>
// CHECK: %[[DA:.*]] = fygraph.where %[[COND]], %[[DY]], %[[Z]] : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
// CHECK: %[[DCF:.*]] = fygraph.where %[[COND]], %[[Z]], %[[DY]] : (tensor<4x8xi1>, tensor<f32>, tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK: %[[DC:.*]] = fygraph.reduce_to %[[DCF]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK: return %{{.*}}, %[[DA]], %[[DC]]
fygraph.param @a trainable : tensor<4x8xf32>
fygraph.param @c trainable : tensor<8xf32>
func.func @forward(%cond: tensor<4x8xi1>) -> tensor<f32> {
  %a = fygraph.get_param @a : tensor<4x8xf32>
  %c = fygraph.get_param @c : tensor<8xf32>
  %y = fygraph.where %cond, %a, %c : (tensor<4x8xi1>, tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// layer_norm: one layer_norm_grad from the saved statistics gives the
// input's, scale's and bias's gradients.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>) -> (tensor<f32>, tensor<8xf32>, tensor<8xf32>) attributes {fygraph.grads = [@g, @b]}
// CHECK: %[[G:.*]] = fygraph.get_param @g
// CHECK: %[[B:.*]] = fygraph.get_param @b
// CHECK: %[[Y:.*]], %[[MEAN:.*]], %[[ISTD:.*]] = fygraph.layer_norm %[[X]], %[[G]], %[[B]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %{{.*}}, %[[DG:.*]], %[[DB:.*]] = fygraph.layer_norm_grad %[[DY]], %[[X]], %[[G]], %[[MEAN]], %[[ISTD]] {axis = -1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
// CHECK: return %{{.*}}, %[[DG]], %[[DB]]
fygraph.param @g trainable : tensor<8xf32>
fygraph.param @b trainable : tensor<8xf32>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %g = fygraph.get_param @g : tensor<8xf32>
  %b = fygraph.get_param @b : tensor<8xf32>
  %y, %m, %s = fygraph.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>, tensor<4x1xf32>)
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// softmax: softmax_grad from the output; softmax_cross_entropy_loss: its
// grad from the log-probabilities, keeping reduction and ignore_index.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[LBL:.*]]: tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %[[P:.*]] = fygraph.softmax %[[W]] {axis = 1 : i64} : tensor<4x10xf32>
// CHECK: %[[L:.*]], %[[LP:.*]] = fygraph.softmax_cross_entropy_loss %[[P]], %[[LBL]]
// CHECK: %[[ONE:.*]] = fygraph.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[DP:.*]] = fygraph.softmax_cross_entropy_loss_grad %[[ONE]], %[[LP]], %[[LBL]] {ignore_index = -100 : i64, reduction = "sum"} : (tensor<f32>, tensor<4x10xf32>, tensor<4xi64>) -> tensor<4x10xf32>
// CHECK: %[[DW:.*]] = fygraph.softmax_grad %[[DP]], %[[P]] {axis = 1 : i64} : tensor<4x10xf32>
// CHECK: return %[[L]], %[[DW]]
fygraph.param @w trainable : tensor<4x10xf32>
func.func @forward(%lbl: tensor<4xi64>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x10xf32>
  %p = fygraph.softmax %w {axis = 1 : i64} : tensor<4x10xf32>
  %l, %lp = fygraph.softmax_cross_entropy_loss %p, %lbl {ignore_index = -100 : i64, reduction = "sum"}
      : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return %l : tensor<f32>
}

// -----

// masked_softmax: softmax_grad over the last dim with its scale; the mask
// takes no gradient.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[M:.*]]: tensor<4x10xi1>, %[[LBL:.*]]: tensor<4xi64>)
// CHECK: %[[P:.*]] = fygraph.masked_softmax %[[W:.*]], %[[M]] {scale = 1.250000e-01 : f32}
// CHECK: %[[DP:.*]] = fygraph.softmax_cross_entropy_loss_grad
// CHECK: %[[DW:.*]] = fygraph.softmax_grad %[[DP]], %[[P]] {axis = 1 : i64, scale = 1.250000e-01 : f32} : tensor<4x10xf32>
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<4x10xf32>
func.func @forward(%m: tensor<4x10xi1>, %lbl: tensor<4xi64>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x10xf32>
  %p = fygraph.masked_softmax %w, %m {scale = 0.125 : f32} : (tensor<4x10xf32>, tensor<4x10xi1>) -> tensor<4x10xf32>
  %l, %lp = fygraph.softmax_cross_entropy_loss %p, %lbl {ignore_index = -100 : i64, reduction = "sum"}
      : (tensor<4x10xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x10xf32>)
  return %l : tensor<f32>
}

// -----

// attention: one attention_grad from q, k, v, its result and log-sum-exps,
// with its scale and window; q, k and v each get theirs (here k and v are
// one parameter: the two add up).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[O:.*]], %[[LSE:.*]] = fygraph.attention %[[Q:.*]], %[[K:.*]], %[[K]] {scale = 1.250000e-01 : f32, window = 2 : i64}
// CHECK: %[[DO:.*]] = fygraph.reshape %{{.*}} : tensor<8x8xf32> -> tensor<1x2x4x8xf32>
// CHECK: %[[DQ:.*]], %[[DK:.*]], %[[DV:.*]] = fygraph.attention_grad %[[Q]], %[[K]], %[[K]], %[[O]], %[[LSE]], %[[DO]] {scale = 1.250000e-01 : f32, window = 2 : i64}
// CHECK: %[[DKV:.*]] = fygraph.add %[[DK]], %[[DV]]
// CHECK: return %{{.*}}, %[[DQ]], %[[DKV]]
fygraph.param @w trainable : tensor<1x2x4x8xf32>
fygraph.param @v trainable : tensor<1x1x4x8xf32>
func.func @forward(%lbl: tensor<8xi64>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<1x2x4x8xf32>
  %v = fygraph.get_param @v : tensor<1x1x4x8xf32>
  %o, %lse = fygraph.attention %w, %v, %v {scale = 0.125 : f32, window = 2 : i64}
      : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> (tensor<1x2x4x8xf32>, tensor<1x2x4xf32>)
  %r = fygraph.reshape %o : tensor<1x2x4x8xf32> -> tensor<8x8xf32>
  %l, %lp = fygraph.softmax_cross_entropy_loss %r, %lbl {ignore_index = -100 : i64, reduction = "sum"}
      : (tensor<8x8xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x8xf32>)
  return %l : tensor<f32>
}

// -----

// seq_major attention ([B, T, heads, D]): its gradient in the same layout.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[O:.*]], %[[LSE:.*]] = fygraph.attention %[[Q:.*]], %[[K:.*]], %[[K]] {scale = 1.250000e-01 : f32, seq_major}
// CHECK: fygraph.attention_grad %[[Q]], %[[K]], %[[K]], %[[O]], %[[LSE]], %{{.*}} {scale = 1.250000e-01 : f32, seq_major} : {{.*}} -> (tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>)
fygraph.param @w trainable : tensor<1x4x2x8xf32>
fygraph.param @v trainable : tensor<1x4x1x8xf32>
func.func @forward(%lbl: tensor<8xi64>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<1x4x2x8xf32>
  %v = fygraph.get_param @v : tensor<1x4x1x8xf32>
  %o, %lse = fygraph.attention %w, %v, %v {scale = 0.125 : f32, seq_major}
      : (tensor<1x4x2x8xf32>, tensor<1x4x1x8xf32>, tensor<1x4x1x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x2x4xf32>)
  %r = fygraph.reshape %o : tensor<1x4x2x8xf32> -> tensor<8x8xf32>
  %l, %lp = fygraph.softmax_cross_entropy_loss %r, %lbl {ignore_index = -100 : i64, reduction = "sum"}
      : (tensor<8x8xf32>, tensor<8xi64>) -> (tensor<f32>, tensor<8x8xf32>)
  return %l : tensor<f32>
}

// -----

// seq_major attention's verifier: lse is [B, H, T] in either layout.
func.func @forward(%q: tensor<1x4x2x8xf32>) -> tensor<f32> {
  // expected-error @+1 {{lse must be [B, H, T], got 'tensor<1x4x2xf32>'}}
  %o, %lse = fygraph.attention %q, %q, %q {scale = 0.125 : f32, seq_major}
      : (tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>, tensor<1x4x2x8xf32>) -> (tensor<1x4x2x8xf32>, tensor<1x4x2xf32>)
  %z = fygraph.constant dense<0.0> : tensor<f32>
  return %z : tensor<f32>
}

// -----

// attention's verifier: k's heads must divide q's.
fygraph.param @q trainable : tensor<1x3x4x8xf32>
fygraph.param @k trainable : tensor<1x2x4x8xf32>
func.func @forward(%lbl: tensor<8xi64>) -> tensor<f32> {
  %q = fygraph.get_param @q : tensor<1x3x4x8xf32>
  %k = fygraph.get_param @k : tensor<1x2x4x8xf32>
  // expected-error @+1 {{q's heads must be a multiple of k's (grouped-query heads), got 3 and 2}}
  %o, %lse = fygraph.attention %q, %k, %k {scale = 0.125 : f32}
      : (tensor<1x3x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> (tensor<1x3x4x8xf32>, tensor<1x3x4xf32>)
  %z = fygraph.constant dense<0.0> : tensor<f32>
  return %z : tensor<f32>
}

// -----

// attention_grad's verifier: its gradients have its operands' types.
func.func @forward(%q: tensor<1x2x4x8xf32>, %k: tensor<1x1x4x8xf32>, %o: tensor<1x2x4x8xf32>, %l: tensor<1x2x4xf32>) -> tensor<f32> {
  // expected-error @+1 {{dy and dq must have q's type, dk and dv k's}}
  %dq, %dk, %dv = fygraph.attention_grad %q, %k, %k, %o, %l, %o {scale = 0.25 : f32}
      : (tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x2x4xf32>, tensor<1x2x4x8xf32>)
      -> (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>, tensor<1x1x4x8xf32>)
  %z = fygraph.constant dense<0.0> : tensor<f32>
  return %z : tensor<f32>
}

// -----

// dropout: dropout_grad with the saved mask and the same ratio.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %{{.*}}, %[[MASK:.*]] = fygraph.dropout %[[W]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DW:.*]] = fygraph.dropout_grad %[[DY]], %[[MASK]] {ratio = 1.000000e-01 : f32} : (tensor<4x8xf32>, tensor<4x8xi1>) -> tensor<4x8xf32>
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %d, %mask = fygraph.dropout %w {ratio = 0.1 : f32, seed = 7 : i64} : (tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xi1>)
  %l = fygraph.reduce_sum %d {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Elementwise functions: unary_grad names the function and reads x and f(x).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %[[G:.*]] = fygraph.gelu %[[W]] {approximate = "tanh"}
// CHECK: %[[S:.*]] = fygraph.silu %[[G]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DG:.*]] = fygraph.unary_grad "silu" %[[G]], %[[S]], %[[DY]] : tensor<4x8xf32>
// CHECK: %[[DW:.*]] = fygraph.unary_grad "gelu_tanh" %[[W]], %[[G]], %[[DG]] : tensor<4x8xf32>
// CHECK: return %{{.*}}, %[[DW]]
fygraph.param @w trainable : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %g = fygraph.gelu %w {approximate = "tanh"} : tensor<4x8xf32>
  %s = fygraph.silu %g : tensor<4x8xf32>
  %l = fygraph.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// swiglu: both gradients from one swiglu_grad, which reads gate and up (not
// the silu).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[G:.*]] = fygraph.get_param @g
// CHECK: %[[U:.*]] = fygraph.get_param @u
// CHECK: fygraph.swiglu %[[G]], %[[U]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DG:.*]], %[[DU:.*]] = fygraph.swiglu_grad %[[G]], %[[U]], %[[DY]] : tensor<4x8xf32>
// CHECK: return %{{.*}}, %[[DG]], %[[DU]]
fygraph.param @g trainable : tensor<4x8xf32>
fygraph.param @u trainable : tensor<4x8xf32>
func.func @forward() -> tensor<f32> {
  %g = fygraph.get_param @g : tensor<4x8xf32>
  %u = fygraph.get_param @u : tensor<4x8xf32>
  %s = fygraph.swiglu %g, %u : tensor<4x8xf32>
  %l = fygraph.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// swiglu_packed: its input's gradient, both halves, from one
// swiglu_packed_grad.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = fygraph.get_param @gu
// CHECK: fygraph.swiglu_packed %[[X]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DX:.*]] = fygraph.swiglu_packed_grad %[[X]], %[[DY]] : tensor<4x16xf32>, tensor<4x8xf32>
// CHECK: return %{{.*}}, %[[DX]]
fygraph.param @gu trainable : tensor<4x16xf32>
func.func @forward() -> tensor<f32> {
  %x = fygraph.get_param @gu : tensor<4x16xf32>
  %s = fygraph.swiglu_packed %x : tensor<4x16xf32> -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %s {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// attention_qkv: the packed qkv's gradient is one attention_qkv_grad (no
// concat of three).
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = fygraph.get_param @qkv
// CHECK: %[[O:.*]], %[[L:.*]] = fygraph.attention_qkv %[[X]]
// CHECK: %[[DX:.*]] = fygraph.attention_qkv_grad %[[X]], %[[O]], %[[L]], %{{.*}} {kv_heads = 1 : i64, scale = 5.000000e-01 : f32, window = 2 : i64}
// CHECK-NOT: fygraph.concat
// CHECK: return %{{.*}}, %[[DX]]
fygraph.param @qkv trainable : tensor<1x3x4x8xf32>
func.func @forward() -> tensor<f32> {
  %x = fygraph.get_param @qkv : tensor<1x3x4x8xf32>
  %o, %l = fygraph.attention_qkv %x {kv_heads = 1 : i64, scale = 0.5 : f32, window = 2 : i64} : (tensor<1x3x4x8xf32>) -> (tensor<1x3x2x8xf32>, tensor<1x2x3xf32>)
  %s = fygraph.reduce_sum %o {axes = array<i64: 0, 1, 2, 3>, keepdims = false} : tensor<1x3x2x8xf32> -> tensor<f32>
  return %s : tensor<f32>
}

// -----

// rope: the input's gradient is dy rotated by the transposed rotation; the
// constant tables get none.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[X:.*]] = fygraph.get_param @x
// CHECK: fygraph.rope %[[X]], %[[C:.*]], %[[S:.*]] {seq_axis = 1 : i64}
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DX:.*]] = fygraph.rope %[[DY]], %[[C]], %[[S]] {seq_axis = 1 : i64, transposed}
// CHECK: return %{{.*}}, %[[DX]]
fygraph.param @x trainable : tensor<2x3x4xf32>
func.func @forward() -> tensor<f32> {
  %x = fygraph.get_param @x : tensor<2x3x4xf32>
  %c = fygraph.constant dense<5.000000e-01> : tensor<3x4xf32>
  %s = fygraph.constant dense<2.500000e-01> : tensor<3x4xf32>
  %y = fygraph.rope %x, %c, %s {seq_axis = 1 : i64} : tensor<2x3x4xf32>, tensor<3x4xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1, 2>, keepdims = false} : tensor<2x3x4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// bias_gelu: the input's gradient from bias_gelu_grad, the bias's its sum
// over the rows.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %[[B:.*]] = fygraph.get_param @b
// CHECK: %[[G:.*]] = fygraph.bias_gelu %[[W]], %[[B]] {approximate = "tanh"}
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK: %[[DW:.*]] = fygraph.bias_gelu_grad %[[W]], %[[B]], %[[G]], %[[DY]] {approximate = "tanh"} : tensor<4x8xf32>, tensor<8xf32>
// CHECK: %[[DB:.*]] = fygraph.reduce_to %[[DW]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK: return %{{.*}}, %[[DW]], %[[DB]]
fygraph.param @w trainable : tensor<4x8xf32>
fygraph.param @b trainable : tensor<8xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %b = fygraph.get_param @b : tensor<8xf32>
  %g = fygraph.bias_gelu %w, %b {approximate = "tanh"} : tensor<4x8xf32>, tensor<8xf32>
  %l = fygraph.reduce_sum %g {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A tied embedding and head: one get_param read by gather and matmul gets
// the sum of both gradients, and the result has one gradient for it.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDX:.*]]: tensor<2x3xi64>, %[[TGT:.*]]: tensor<6xi64>) -> (tensor<f32>, tensor<10x4xf32>) attributes {fygraph.grads = [@wte]}
// CHECK: %[[E:.*]] = fygraph.get_param @wte
// CHECK: %[[H:.*]] = fygraph.gather %[[E]], %[[IDX]]
// CHECK: %[[DHEAD:.*]] = fygraph.matmul %{{.*}}, %{{.*}} {trans_a} : (tensor<6x10xf32>, tensor<6x4xf32>) -> tensor<10x4xf32>
// CHECK: %[[DEMB:.*]] = fygraph.gather_grad %{{.*}}, %[[IDX]] : (tensor<2x3x4xf32>, tensor<2x3xi64>) -> tensor<10x4xf32>
// CHECK: %[[SUM:.*]] = fygraph.add %[[DHEAD]], %[[DEMB]] : (tensor<10x4xf32>, tensor<10x4xf32>) -> tensor<10x4xf32>
// CHECK: return %{{.*}}, %[[SUM]] : tensor<f32>, tensor<10x4xf32>
fygraph.param @wte trainable : tensor<10x4xf32>
func.func @forward(%idx: tensor<2x3xi64>, %tgt: tensor<6xi64>) -> tensor<f32> {
  %e = fygraph.get_param @wte : tensor<10x4xf32>
  %h = fygraph.gather %e, %idx : (tensor<10x4xf32>, tensor<2x3xi64>) -> tensor<2x3x4xf32>
  %y = fygraph.matmul %h, %e {trans_b} : (tensor<2x3x4xf32>, tensor<10x4xf32>) -> tensor<2x3x10xf32>
  %f = fygraph.reshape %y : tensor<2x3x10xf32> -> tensor<6x10xf32>
  %l, %lp = fygraph.softmax_cross_entropy_loss %f, %tgt : (tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
  return %l : tensor<f32>
}

// -----

// The same parameter read by two get_params: their gradients are summed.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<8xf32>) attributes {fygraph.grads = [@w]}
// CHECK: %[[W0:.*]] = fygraph.get_param @w
// CHECK: %[[W1:.*]] = fygraph.get_param @w
// CHECK: %[[A:.*]] = fygraph.add %{{.*}}, %[[W0]]
// CHECK: %[[DY:.*]] = fygraph.expand
// CHECK-DAG: %[[DA:.*]] = fygraph.mul %[[DY]], %[[W1]]
// CHECK-DAG: %[[DW1F:.*]] = fygraph.mul %[[DY]], %[[A]]
// CHECK-DAG: %[[DW1:.*]] = fygraph.reduce_to %[[DW1F]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-DAG: %[[DW0:.*]] = fygraph.reduce_to %[[DA]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK: %[[SUM:.*]] = fygraph.add %[[DW0]], %[[DW1]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK: return %{{.*}}, %[[SUM]]
fygraph.param @w trainable : tensor<8xf32>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %w0 = fygraph.get_param @w : tensor<8xf32>
  %w1 = fygraph.get_param @w : tensor<8xf32>
  %a = fygraph.add %x, %w0 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %b = fygraph.mul %a, %w1 : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %b {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// A frozen parameter gets no gradient and nothing computes one; a trainable
// one that the loss does not reach gets zeros.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: -> (tensor<f32>, tensor<8xf32>, tensor<3xf32>) attributes {fygraph.grads = [@w, @unused]}
// CHECK: %[[W:.*]] = fygraph.get_param @w
// CHECK: %[[F:.*]] = fygraph.get_param @frozen
// CHECK: %[[DE:.*]] = fygraph.expand %{{.*}} : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK: %[[DY:.*]] = fygraph.reduce_to %[[DE]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NOT: fygraph.mul %[[DY]], %[[W]]
// CHECK: %[[DW:.*]] = fygraph.mul %[[DY]], %[[F]] : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
// CHECK-NOT: fygraph.mul %[[DY]], %[[W]]
// CHECK: %[[Z:.*]] = fygraph.constant dense<0.000000e+00> : tensor<3xf32>
// CHECK: return %{{.*}}, %[[DW]], %[[Z]]
fygraph.param @w trainable : tensor<8xf32>
fygraph.param @frozen : tensor<8xf32>
fygraph.param @unused trainable : tensor<3xf32>
func.func @forward() -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<8xf32>
  %f = fygraph.get_param @frozen : tensor<8xf32>
  %y = fygraph.mul %w, %f : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %e = fygraph.expand %y : tensor<8xf32> -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %e {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// Errors. pow's gradient needs a constant exponent.
fygraph.param @w trainable : tensor<4xf32>
func.func @forward(%e: tensor<f32>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4xf32>
  // expected-error @+1 {{gradient of pow needs a constant exponent}}
  %y = fygraph.pow %w, %e : (tensor<4xf32>, tensor<f32>) -> tensor<4xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// No @forward.
// expected-error @+1 {{fy-autodiff needs a func.func @forward returning the loss}}
module {
  fygraph.param @w trainable : tensor<4xf32>
  func.func @train(%x: tensor<4xf32>) -> tensor<4xf32> {
    return %x : tensor<4xf32>
  }
}

// -----

// @forward returns more than the loss.
fygraph.param @w trainable : tensor<4xf32>
// expected-error @+1 {{@forward must return exactly the loss}}
func.func @forward() -> (tensor<f32>, tensor<4xf32>) {
  %w = fygraph.get_param @w : tensor<4xf32>
  %l = fygraph.reduce_sum %w {axes = array<i64: 0>, keepdims = false} : tensor<4xf32> -> tensor<f32>
  return %l, %w : tensor<f32>, tensor<4xf32>
}

// -----

// An op without a gradient rule on the path to the loss.
fygraph.param @w trainable : tensor<4x8xf32>
func.func @forward(%dy: tensor<4x8xf32>, %r: tensor<4x1xf32>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %s = fygraph.constant dense<1.0> : tensor<8xf32>
  // expected-error @+1 {{no gradient rule for fygraph.rms_norm_grad}}
  %dx, %ds = fygraph.rms_norm_grad %dy, %w, %s, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %l = fygraph.reduce_sum %dx {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}

// -----

// The loss reads the log-probabilities too.
fygraph.param @w trainable : tensor<4x8xf32>
func.func @forward(%lbl: tensor<4xi64>) -> tensor<f32> {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  // expected-error @+1 {{gradient through log-probabilities is not supported}}
  %l, %lp = fygraph.softmax_cross_entropy_loss %w, %lbl : (tensor<4x8xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<4x8xf32>)
  %s = fygraph.reduce_sum %lp {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  %t = fygraph.add %l, %s : (tensor<f32>, tensor<f32>) -> tensor<f32>
  return %t : tensor<f32>
}

// -----

// linear_cross_entropy made its gradients with the loss, for a gradient of 1
// on it: backward from the constant 1 takes them as they are (no product
// with the 1). Its w is also the embedding's table (tied): the table's
// gradient is dw plus the gather's, which starts from dx.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[LOSS:.*]], %[[DX:.*]], %[[DW:.*]] = fygraph.linear_cross_entropy
// CHECK-NOT: fygraph.mul
// CHECK: %[[G:.*]] = fygraph.gather_grad %[[DX]]
// CHECK-NEXT: %[[SUM:.*]] = fygraph.add %[[DW]], %[[G]]
// CHECK-NEXT: return %[[LOSS]], %[[SUM]]
fygraph.param @wte trainable : tensor<10x4xf32>
func.func @forward(%idx: tensor<6xi64>, %lbl: tensor<6xi64>) -> tensor<f32> {
  %w = fygraph.get_param @wte : tensor<10x4xf32>
  %x = fygraph.gather %w, %idx : (tensor<10x4xf32>, tensor<6xi64>) -> tensor<6x4xf32>
  %l, %dx, %dw = fygraph.linear_cross_entropy %x, %w, %lbl {ignore_index = -100 : i64}
      : (tensor<6x4xf32>, tensor<10x4xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x4xf32>, tensor<10x4xf32>)
  return %l : tensor<f32>
}

// -----

// linear_cross_entropy's verifier: one label a row of x.
func.func @forward(%x: tensor<6x4xf32>, %w: tensor<10x4xf32>, %lbl: tensor<5xi64>) -> tensor<f32> {
  // expected-error @+1 {{labels must be [N], one for each of x's rows}}
  %l, %dx, %dw = fygraph.linear_cross_entropy %x, %w, %lbl
      : (tensor<6x4xf32>, tensor<10x4xf32>, tensor<5xi64>) -> (tensor<f32>, tensor<6x4xf32>, tensor<10x4xf32>)
  return %l : tensor<f32>
}
