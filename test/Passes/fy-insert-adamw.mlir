// RUN: fuyou-opt %s -split-input-file --fy-insert-adamw -verify-diagnostics | FileCheck %s

// One adamw per gradient named by fygraph.grads, right after the gradient
// is computed when nothing reads the parameter later; the step then
// returns only the loss and loses the attribute.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>) -> tensor<f32> {
// CHECK: %[[W:.*]] = fygraph.get_param @w : tensor<4x8xf32>
// CHECK: %[[B:.*]] = fygraph.get_param @b : tensor<8xf32>
// CHECK: %[[DB:.*]] = fygraph.reduce_to %[[X]] : tensor<4x8xf32> -> tensor<8xf32>
// CHECK-NEXT: fygraph.adamw @b, %[[DB]] : tensor<8xf32>
// CHECK-NEXT: %[[DW:.*]] = fygraph.neg %[[X]] : tensor<4x8xf32>
// CHECK-NEXT: fygraph.adamw @w, %[[DW]] : tensor<4x8xf32>
// CHECK-NEXT: return %[[L:.*]] : tensor<f32>
// CHECK-NOT: fygraph.adamw
fygraph.param @w trainable : tensor<4x8xf32>
fygraph.param @b trainable : tensor<8xf32>
func.func @train_step(%x: tensor<4x8xf32>) -> (tensor<f32>, tensor<4x8xf32>, tensor<8xf32>) attributes {fygraph.grads = [@w, @b]} {
  %w = fygraph.get_param @w : tensor<4x8xf32>
  %b = fygraph.get_param @b : tensor<8xf32>
  %y = fygraph.mul %w, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  %db = fygraph.reduce_to %x : tensor<4x8xf32> -> tensor<8xf32>
  %dw = fygraph.neg %x : tensor<4x8xf32>
  return %l, %dw, %db : tensor<f32>, tensor<4x8xf32>, tensor<8xf32>
}

// -----

// A parameter read again after its gradient exists (here by the backward of
// another op) is updated only after that last read.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W:.*]] = fygraph.get_param @w : tensor<8xf32>
// CHECK: %[[DW:.*]] = fygraph.neg %{{.*}} : tensor<8xf32>
// CHECK-NOT: fygraph.adamw
// CHECK: %[[LATE:.*]] = fygraph.mul %[[DW]], %[[W]]
// CHECK-NEXT: fygraph.adamw @w, %[[DW]] : tensor<8xf32>
// CHECK-NEXT: %[[LAST:.*]] = fygraph.neg %[[LATE]]
// CHECK-NEXT: return %{{.*}} : tensor<f32>
fygraph.param @w trainable : tensor<8xf32>
fygraph.param @v trainable : tensor<8xf32>
func.func @train_step(%x: tensor<8xf32>) -> (tensor<f32>, tensor<8xf32>) attributes {fygraph.grads = [@w]} {
  %w = fygraph.get_param @w : tensor<8xf32>
  %y = fygraph.mul %x, %w : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0>, keepdims = false} : tensor<8xf32> -> tensor<f32>
  %dw = fygraph.neg %x : tensor<8xf32>
  %late = fygraph.mul %dw, %w : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %last = fygraph.neg %late : tensor<8xf32>
  return %l, %dw : tensor<f32>, tensor<8xf32>
}

// -----

// Two get_params of one parameter: the update follows the last read of either.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[W0:.*]] = fygraph.get_param @w
// CHECK: %[[DW:.*]] = fygraph.constant dense<0.000000e+00> : tensor<8xf32>
// CHECK: %[[W1:.*]] = fygraph.get_param @w
// CHECK-NOT: fygraph.adamw
// CHECK: %[[R:.*]] = fygraph.add %[[W0]], %[[W1]]
// CHECK-NEXT: fygraph.adamw @w, %[[DW]] : tensor<8xf32>
// CHECK-NEXT: fygraph.reduce_sum %[[R]]
fygraph.param @w trainable : tensor<8xf32>
func.func @train_step() -> (tensor<f32>, tensor<8xf32>) attributes {fygraph.grads = [@w]} {
  %w0 = fygraph.get_param @w : tensor<8xf32>
  %dw = fygraph.constant dense<0.0> : tensor<8xf32>
  %w1 = fygraph.get_param @w : tensor<8xf32>
  %r = fygraph.add %w0, %w1 : (tensor<8xf32>, tensor<8xf32>) -> tensor<8xf32>
  %l = fygraph.reduce_sum %r {axes = array<i64: 0>, keepdims = false} : tensor<8xf32> -> tensor<f32>
  return %l, %dw : tensor<f32>, tensor<8xf32>
}

// -----

// Without @train_step and its fygraph.grads there is nothing to update.
// expected-error @+1 {{fy-insert-adamw needs @train_step from fy-autodiff}}
module {
  fygraph.param @w trainable : tensor<8xf32>
  func.func @train_step(%x: tensor<8xf32>) -> (tensor<f32>, tensor<8xf32>) {
    %l = fygraph.reduce_sum %x {axes = array<i64: 0>, keepdims = false} : tensor<8xf32> -> tensor<f32>
    return %l, %x : tensor<f32>, tensor<8xf32>
  }
}
