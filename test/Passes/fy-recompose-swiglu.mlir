// RUN: fuyou-opt %s -split-input-file --fy-recompose=swiglu=true | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-recompose | FileCheck %s --check-prefix=OFF
// OFF-NOT: fygraph.swiglu

// A SwiGLU MLP's product, silu(gate) * up (either order, the silu from its
// exported x * sigmoid(x)): one swiglu.
// CHECK-LABEL: func.func @swiglu
// CHECK-SAME: (%[[G:.*]]: tensor<2x8xf32>, %[[U:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[A:.*]] = fygraph.swiglu %[[G]], %[[U]] : tensor<2x8xf32>
// CHECK-NEXT: %[[B:.*]] = fygraph.swiglu %[[U]], %[[G]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @swiglu(%g: tensor<2x8xf32>, %u: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %sg = fygraph.sigmoid %g : tensor<2x8xf32>
  %silu = fygraph.mul %g, %sg : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %a = fygraph.mul %silu, %u : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %su = fygraph.silu %u : tensor<2x8xf32>
  %b = fygraph.mul %g, %su : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %a, %b : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// Not when the silu is read elsewhere too (it would be computed twice and
// kept anyway), nor for a product that broadcasts.
// CHECK-LABEL: func.func @not_swiglu
// CHECK-NOT: fygraph.swiglu
func.func @not_swiglu(%g: tensor<2x8xf32>, %u: tensor<2x8xf32>, %b: tensor<8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %s = fygraph.silu %g : tensor<2x8xf32>
  %a = fygraph.mul %s, %u : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s2 = fygraph.silu %u : tensor<2x8xf32>
  %c = fygraph.mul %s2, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  return %a, %s, %c : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}
