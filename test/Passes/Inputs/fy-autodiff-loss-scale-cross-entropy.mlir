// With loss-scale, linear_cross_entropy's gradients (made for a gradient of
// 1 on the loss) are each scaled by the run's scale.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[LOSS:.*]], %[[DX:.*]], %[[DW:.*]] = fygraph.linear_cross_entropy
// CHECK: %[[S:.*]] = fygraph.loss_scale : tensor<f32>
// CHECK-DAG: %[[GX:.*]] = fygraph.mul %[[DX]], %[[S]] : (tensor<6x4xf32>, tensor<f32>) -> tensor<6x4xf32>
// CHECK-DAG: %[[GW:.*]] = fygraph.mul %[[DW]], %[[S]] : (tensor<10x4xf32>, tensor<f32>) -> tensor<10x4xf32>
// CHECK: return %[[LOSS]], %[[GX]], %[[GW]]
fygraph.param @x trainable : tensor<6x4xf32>
fygraph.param @w trainable : tensor<10x4xf32>
func.func @forward(%lbl: tensor<6xi64>) -> tensor<f32> {
  %x = fygraph.get_param @x : tensor<6x4xf32>
  %w = fygraph.get_param @w : tensor<10x4xf32>
  %l, %dx, %dw = fygraph.linear_cross_entropy %x, %w, %lbl
      : (tensor<6x4xf32>, tensor<10x4xf32>, tensor<6xi64>) -> (tensor<f32>, tensor<6x4xf32>, tensor<10x4xf32>)
  return %l : tensor<f32>
}
