// With loss-scale, backward starts from the run's scale instead of 1.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[L:.*]] = fygraph.reduce_sum
// CHECK-NOT: fygraph.constant dense<1.000000e+00>
// CHECK: %[[S:.*]] = fygraph.loss_scale : tensor<f32>
// CHECK: %[[R:.*]] = fygraph.reshape %[[S]] : tensor<f32> -> tensor<1x1xf32>
// CHECK: fygraph.expand %[[R]] : tensor<1x1xf32> -> tensor<4x8xf32>
// CHECK: return %[[L]],
fygraph.param @b trainable : tensor<8xf32>
func.func @forward(%x: tensor<4x8xf32>) -> tensor<f32> {
  %b = fygraph.get_param @b : tensor<8xf32>
  %y = fygraph.add %x, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<4x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
