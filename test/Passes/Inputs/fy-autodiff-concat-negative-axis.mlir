// Input of fy-autodiff.mlir: a concat whose axis is negative (-1 = dim 1)
// slices its gradient along the normalised axis.
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
  %y = fygraph.concat %a, %c {axis = -1 : i64} : (tensor<2x3xf32>, tensor<2x5xf32>) -> tensor<2x8xf32>
  %l = fygraph.reduce_sum %y {axes = array<i64: 0, 1>, keepdims = false} : tensor<2x8xf32> -> tensor<f32>
  return %l : tensor<f32>
}
