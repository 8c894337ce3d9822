// RUN: fuyou-opt %s -split-input-file --fy-pack-swiglu | FileCheck %s

// A SwiGLU of two projections of one input: one product of the weights
// concatenated (gate's rows first), whose halves swiglu_packed reads.
// CHECK-LABEL: func.func @mlp
// CHECK-NOT: fygraph.swiglu %
// CHECK: %[[G:.*]] = fygraph.get_param @w1 : tensor<12x8xf32>
// CHECK-NEXT: %[[U:.*]] = fygraph.get_param @w3 : tensor<12x8xf32>
// CHECK-NEXT: %[[W:.*]] = fygraph.concat %[[G]], %[[U]] {axis = 0 : i64} : (tensor<12x8xf32>, tensor<12x8xf32>) -> tensor<24x8xf32>
// CHECK-NEXT: %[[Y:.*]] = fygraph.matmul %arg0, %[[W]] {trans_b} : (tensor<2x5x8xf32>, tensor<24x8xf32>) -> tensor<2x5x24xf32>
// CHECK-NEXT: %[[S:.*]] = fygraph.swiglu_packed %[[Y]] : tensor<2x5x24xf32> -> tensor<2x5x12xf32>
// CHECK-NEXT: return %[[S]]
fygraph.param @w1 trainable : tensor<12x8xf32>
fygraph.param @w3 trainable : tensor<12x8xf32>
func.func @mlp(%x: tensor<2x5x8xf32>) -> tensor<2x5x12xf32> {
  %w1 = fygraph.get_param @w1 : tensor<12x8xf32>
  %g = fygraph.matmul %x, %w1 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %w3 = fygraph.get_param @w3 : tensor<12x8xf32>
  %u = fygraph.matmul %x, %w3 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %s = fygraph.swiglu %g, %u : tensor<2x5x12xf32>
  return %s : tensor<2x5x12xf32>
}

// -----

// Left alone: the gate's product read elsewhere too (@gate_also_read), the
// two projections of different inputs (@two_inputs), or a gate that is no
// product (@not_projected).
// CHECK-LABEL: func.func @gate_also_read
// CHECK: fygraph.swiglu %
// CHECK-LABEL: func.func @two_inputs
// CHECK: fygraph.swiglu %
// CHECK-LABEL: func.func @not_projected
// CHECK: fygraph.swiglu %
// CHECK-NOT: swiglu_packed
fygraph.param @w1 trainable : tensor<12x8xf32>
fygraph.param @w3 trainable : tensor<12x8xf32>
func.func @gate_also_read(%x: tensor<2x5x8xf32>) -> (tensor<2x5x12xf32>, tensor<2x5x12xf32>) {
  %w1 = fygraph.get_param @w1 : tensor<12x8xf32>
  %g = fygraph.matmul %x, %w1 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %w3 = fygraph.get_param @w3 : tensor<12x8xf32>
  %u = fygraph.matmul %x, %w3 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %s = fygraph.swiglu %g, %u : tensor<2x5x12xf32>
  return %s, %g : tensor<2x5x12xf32>, tensor<2x5x12xf32>
}
func.func @two_inputs(%x: tensor<2x5x8xf32>, %z: tensor<2x5x8xf32>) -> tensor<2x5x12xf32> {
  %w1 = fygraph.get_param @w1 : tensor<12x8xf32>
  %g = fygraph.matmul %x, %w1 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %w3 = fygraph.get_param @w3 : tensor<12x8xf32>
  %u = fygraph.matmul %z, %w3 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %s = fygraph.swiglu %g, %u : tensor<2x5x12xf32>
  return %s : tensor<2x5x12xf32>
}
func.func @not_projected(%x: tensor<2x5x8xf32>, %g: tensor<2x5x12xf32>) -> tensor<2x5x12xf32> {
  %w3 = fygraph.get_param @w3 : tensor<12x8xf32>
  %u = fygraph.matmul %x, %w3 {trans_b} : (tensor<2x5x8xf32>, tensor<12x8xf32>) -> tensor<2x5x12xf32>
  %s = fygraph.swiglu %g, %u : tensor<2x5x12xf32>
  return %s : tensor<2x5x12xf32>
}
