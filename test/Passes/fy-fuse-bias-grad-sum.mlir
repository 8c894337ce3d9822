// RUN: fuyou-opt %s -split-input-file --fy-fuse-bias-grad-sum | FileCheck %s

// The GELU's input gradient, read only by its bias's sum and copy (and an
// unused view of it): one launch where the gradient stood, writing the sum
// and the copy, allocated before it; no fp32 gradient left.
// CHECK-LABEL: func.func @fused
// CHECK-NOT: tensor<40x8xf32>
// CHECK: %[[DB:.*]] = fysched.alloc : <device, tensor<8xf32>>
// CHECK-NEXT: %[[C:.*]] = fysched.alloc : <device, tensor<40x8xbf16>>
// CHECK-NEXT: fysched.launch "bias_gelu_tanh_grad_sum" ins(%arg0, %arg1, %arg2, %arg3 : {{.*}}) outs(%[[DB]], %[[C]] : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>)
// CHECK: fysched.launch "neg"
// CHECK: fysched.launch "matmul" ins(%[[C]], {{.*}})
// CHECK-NOT: tensor<40x8xf32>
// CHECK: return
func.func @fused(%x: !fysched.buffer<device, tensor<40x8xbf16>>, %b: !fysched.buffer<device, tensor<8xf32>>, %y: !fysched.buffer<device, tensor<40x8xbf16>>, %dy: !fysched.buffer<device, tensor<40x8xbf16>>, %w: !fysched.buffer<device, tensor<8x3xbf16>>) -> (!fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x3xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>) {
  %dx = fysched.alloc : !fysched.buffer<device, tensor<40x8xf32>>
  fysched.launch "bias_gelu_tanh_grad" ins(%x, %b, %y, %dy : !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<40x8xbf16>>) outs(%dx : !fysched.buffer<device, tensor<40x8xf32>>)
  %n = fysched.alloc : !fysched.buffer<device, tensor<40x8xbf16>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<40x8xbf16>>) outs(%n : !fysched.buffer<device, tensor<40x8xbf16>>)
  %db = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  %c = fysched.alloc : !fysched.buffer<device, tensor<40x8xbf16>>
  fysched.launch "reduce_sum_cast" ins(%dx : !fysched.buffer<device, tensor<40x8xf32>>) outs(%db, %c : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>)
  %v = fysched.view %dx : <device, tensor<40x8xf32>> -> <device, tensor<320xf32>>
  %p = fysched.alloc : !fysched.buffer<device, tensor<40x3xf32>>
  fysched.launch "matmul" ins(%c, %w : !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<8x3xbf16>>) outs(%p : !fysched.buffer<device, tensor<40x3xf32>>) {args = [false, false]}
  return %db, %p, %n : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x3xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>
}

// -----

// Left alone: the fp32 gradient read by another launch too (@also_read),
// summed without a copy (@plain_sum), summed whole rather than by column
// (@not_a_bias_sum), or of 32 rows or fewer, which reduce_sum_cast sums in
// another order (@few_rows).
// CHECK-LABEL: func.func @also_read
// CHECK: "bias_gelu_grad" ins
// CHECK: "reduce_sum_cast"
// CHECK-LABEL: func.func @plain_sum
// CHECK: "bias_gelu_grad" ins
// CHECK: "reduce_sum" ins
// CHECK-LABEL: func.func @not_a_bias_sum
// CHECK: "bias_gelu_grad" ins
// CHECK: "reduce_sum_cast"
// CHECK-LABEL: func.func @few_rows
// CHECK: "bias_gelu_grad" ins
// CHECK: "reduce_sum_cast"
func.func @also_read(%x: !fysched.buffer<device, tensor<40x8xbf16>>, %b: !fysched.buffer<device, tensor<8xf32>>, %y: !fysched.buffer<device, tensor<40x8xbf16>>, %dy: !fysched.buffer<device, tensor<40x8xbf16>>) -> (!fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<40x8xf32>>) {
  %dx = fysched.alloc : !fysched.buffer<device, tensor<40x8xf32>>
  fysched.launch "bias_gelu_grad" ins(%x, %b, %y, %dy : !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<40x8xbf16>>) outs(%dx : !fysched.buffer<device, tensor<40x8xf32>>)
  %db = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  %c = fysched.alloc : !fysched.buffer<device, tensor<40x8xbf16>>
  fysched.launch "reduce_sum_cast" ins(%dx : !fysched.buffer<device, tensor<40x8xf32>>) outs(%db, %c : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>)
  %t = fysched.alloc : !fysched.buffer<device, tensor<40x8xf32>>
  fysched.launch "neg" ins(%dx : !fysched.buffer<device, tensor<40x8xf32>>) outs(%t : !fysched.buffer<device, tensor<40x8xf32>>)
  return %db, %c, %t : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<40x8xf32>>
}
func.func @plain_sum(%x: !fysched.buffer<device, tensor<40x8xbf16>>, %b: !fysched.buffer<device, tensor<8xf32>>, %y: !fysched.buffer<device, tensor<40x8xbf16>>, %dy: !fysched.buffer<device, tensor<40x8xbf16>>) -> !fysched.buffer<device, tensor<8xf32>> {
  %dx = fysched.alloc : !fysched.buffer<device, tensor<40x8xf32>>
  fysched.launch "bias_gelu_grad" ins(%x, %b, %y, %dy : !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<40x8xbf16>>) outs(%dx : !fysched.buffer<device, tensor<40x8xf32>>)
  %db = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.launch "reduce_sum" ins(%dx : !fysched.buffer<device, tensor<40x8xf32>>) outs(%db : !fysched.buffer<device, tensor<8xf32>>)
  return %db : !fysched.buffer<device, tensor<8xf32>>
}
func.func @not_a_bias_sum(%x: !fysched.buffer<device, tensor<40x8xbf16>>, %b: !fysched.buffer<device, tensor<8xf32>>, %y: !fysched.buffer<device, tensor<40x8xbf16>>, %dy: !fysched.buffer<device, tensor<40x8xbf16>>) -> (!fysched.buffer<device, tensor<1xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>) {
  %dx = fysched.alloc : !fysched.buffer<device, tensor<40x8xf32>>
  fysched.launch "bias_gelu_grad" ins(%x, %b, %y, %dy : !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>, !fysched.buffer<device, tensor<40x8xbf16>>) outs(%dx : !fysched.buffer<device, tensor<40x8xf32>>)
  %db = fysched.alloc : !fysched.buffer<device, tensor<1xf32>>
  %c = fysched.alloc : !fysched.buffer<device, tensor<40x8xbf16>>
  fysched.launch "reduce_sum_cast" ins(%dx : !fysched.buffer<device, tensor<40x8xf32>>) outs(%db, %c : !fysched.buffer<device, tensor<1xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>)
  return %db, %c : !fysched.buffer<device, tensor<1xf32>>, !fysched.buffer<device, tensor<40x8xbf16>>
}
func.func @few_rows(%x: !fysched.buffer<device, tensor<32x8xbf16>>, %b: !fysched.buffer<device, tensor<8xf32>>, %y: !fysched.buffer<device, tensor<32x8xbf16>>, %dy: !fysched.buffer<device, tensor<32x8xbf16>>) -> (!fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<32x8xbf16>>) {
  %dx = fysched.alloc : !fysched.buffer<device, tensor<32x8xf32>>
  fysched.launch "bias_gelu_grad" ins(%x, %b, %y, %dy : !fysched.buffer<device, tensor<32x8xbf16>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<32x8xbf16>>, !fysched.buffer<device, tensor<32x8xbf16>>) outs(%dx : !fysched.buffer<device, tensor<32x8xf32>>)
  %db = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  %c = fysched.alloc : !fysched.buffer<device, tensor<32x8xbf16>>
  fysched.launch "reduce_sum_cast" ins(%dx : !fysched.buffer<device, tensor<32x8xf32>>) outs(%db, %c : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<32x8xbf16>>)
  return %db, %c : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<32x8xbf16>>
}
