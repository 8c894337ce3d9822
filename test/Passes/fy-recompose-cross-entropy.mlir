// RUN: fuyou-opt %s -split-input-file --fy-recompose=cross-entropy=true | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-recompose | FileCheck %s --check-prefix=OFF
// OFF-NOT: fygraph.linear_cross_entropy

// As Hugging Face's models export their loss: the lm_head's product with
// trans_b, the logits flattened to [N, V]. One op, from x [B, T, D] and
// w [V, D]; the product, the reshape and the loss go.
// CHECK-LABEL: func.func @lm_head
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>, %[[W:.*]]: tensor<10x4xf32>, %[[L:.*]]: tensor<6xi64>)
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}}, %{{.*}} = fygraph.linear_cross_entropy %[[X]], %[[W]], %[[L]] {ignore_index = -100 : i64} : (tensor<2x3x4xf32>, tensor<10x4xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<2x3x4xf32>, tensor<10x4xf32>)
// CHECK-NEXT: return %[[LOSS]]
func.func @lm_head(%x: tensor<2x3x4xf32>, %w: tensor<10x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
  %l = fygraph.matmul %x, %w {trans_b} : (tensor<2x3x4xf32>, tensor<10x4xf32>) -> tensor<2x3x10xf32>
  %s = fygraph.reshape %l : tensor<2x3x10xf32> -> tensor<6x10xf32>
  %loss, %lp = fygraph.softmax_cross_entropy_loss %s, %labels {ignore_index = -100 : i64} : (tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
  return %loss : tensor<f32>
}

// -----

// Rows already flat, a summed loss: the reduction carries over.
// CHECK-LABEL: func.func @flat_sum
// CHECK-NEXT: %[[LOSS:.*]], %{{.*}}, %{{.*}} = fygraph.linear_cross_entropy %arg0, %arg1, %arg2 {reduction = "sum"}
// CHECK-NEXT: return %[[LOSS]]
func.func @flat_sum(%x: tensor<6x4xf32>, %w: tensor<10x4xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
  %l = fygraph.matmul %x, %w {trans_b} : (tensor<6x4xf32>, tensor<10x4xf32>) -> tensor<6x10xf32>
  %loss, %lp = fygraph.softmax_cross_entropy_loss %l, %labels {reduction = "sum"} : (tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
  return %loss : tensor<f32>
}

// -----

// What must stay: the log-probabilities read by something else, the logits
// read by something else, and w read as [D, V] (no trans_b).
// CHECK-LABEL: func.func @log_probs_used
// CHECK-NOT: linear_cross_entropy
// CHECK: fygraph.softmax_cross_entropy_loss
func.func @log_probs_used(%x: tensor<6x4xf32>, %w: tensor<10x4xf32>, %labels: tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>) {
  %l = fygraph.matmul %x, %w {trans_b} : (tensor<6x4xf32>, tensor<10x4xf32>) -> tensor<6x10xf32>
  %loss, %lp = fygraph.softmax_cross_entropy_loss %l, %labels : (tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
  return %loss, %lp : tensor<f32>, tensor<6x10xf32>
}

// -----

// CHECK-LABEL: func.func @logits_used
// CHECK-NOT: linear_cross_entropy
// CHECK: fygraph.softmax_cross_entropy_loss
func.func @logits_used(%x: tensor<6x4xf32>, %w: tensor<10x4xf32>, %labels: tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>) {
  %l = fygraph.matmul %x, %w {trans_b} : (tensor<6x4xf32>, tensor<10x4xf32>) -> tensor<6x10xf32>
  %loss, %lp = fygraph.softmax_cross_entropy_loss %l, %labels : (tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
  return %loss, %l : tensor<f32>, tensor<6x10xf32>
}

// -----

// CHECK-LABEL: func.func @w_as_d_by_v
// CHECK-NOT: linear_cross_entropy
// CHECK: fygraph.softmax_cross_entropy_loss
func.func @w_as_d_by_v(%x: tensor<6x4xf32>, %w: tensor<4x10xf32>, %labels: tensor<6xi64>) -> tensor<f32> {
  %l = fygraph.matmul %x, %w : (tensor<6x4xf32>, tensor<4x10xf32>) -> tensor<6x10xf32>
  %loss, %lp = fygraph.softmax_cross_entropy_loss %l, %labels : (tensor<6x10xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x10xf32>)
  return %loss : tensor<f32>
}
