// RUN: fuyou-opt %s -split-input-file --fy-recompose=attention=true | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-recompose | FileCheck %s --check-prefix=OFF
// Without `attention`, attention ops already formed stay as they are.
// OFF-NOT: fygraph.attention_qkv
// OFF: fygraph.mul
// q, k and v cut in order from one fused qkv Linear's output [B, T, 3 C]
// (GPT-2's c_attn), each reshaped into heads: attention_qkv reads them there
// (no slice left); grouped-query heads (2 over 1) and a window kept.
// CHECK-LABEL: func.func @packed_qkv
// CHECK-SAME: (%[[X:.*]]: tensor<2x5x48xf32>, %[[Y:.*]]: tensor<2x5x32xf32>)
// CHECK-NOT: fygraph.slice
// CHECK: %[[P:.*]] = fygraph.reshape %[[X]] : tensor<2x5x48xf32> -> tensor<2x5x6x8xf32>
// CHECK: fygraph.attention_qkv %[[P]] {kv_heads = 2 : i64, scale = 0.3535{{[0-9]*}} : f32} : (tensor<2x5x6x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
// CHECK: %[[R:.*]] = fygraph.reshape %[[Y]] : tensor<2x5x32xf32> -> tensor<2x5x4x8xf32>
// CHECK: fygraph.attention_qkv %[[R]] {kv_heads = 1 : i64, scale = 0.3535{{[0-9]*}} : f32, window = 3 : i64} : (tensor<2x5x4x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
func.func @packed_qkv(%x: tensor<2x5x48xf32>, %y: tensor<2x5x32xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) {
  %q = fygraph.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %k = fygraph.slice %x {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %v = fygraph.slice %x {starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %qh = fygraph.reshape %q : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %kh = fygraph.reshape %k : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %vh = fygraph.reshape %v : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %o, %l = fygraph.attention %qh, %kh, %vh {scale = 0.353553385 : f32, seq_major} : (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
  %q2 = fygraph.slice %y {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x5x32xf32> -> tensor<2x5x16xf32>
  %k2 = fygraph.slice %y {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : tensor<2x5x32xf32> -> tensor<2x5x8xf32>
  %v2 = fygraph.slice %y {starts = array<i64: 0, 0, 24>, steps = array<i64: 1, 1, 1>} : tensor<2x5x32xf32> -> tensor<2x5x8xf32>
  %qh2 = fygraph.reshape %q2 : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %kh2 = fygraph.reshape %k2 : tensor<2x5x8xf32> -> tensor<2x5x1x8xf32>
  %vh2 = fygraph.reshape %v2 : tensor<2x5x8xf32> -> tensor<2x5x1x8xf32>
  %o2, %l2 = fygraph.attention %qh2, %kh2, %vh2 {scale = 0.353553385 : f32, seq_major, window = 3 : i64} : (tensor<2x5x2x8xf32>, tensor<2x5x1x8xf32>, tensor<2x5x1x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
  return %o, %o2 : tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>
}

// -----

// Not packed: k's slice before q's, or q's slice read elsewhere too.
// CHECK-LABEL: func.func @not_packed_qkv
// CHECK-NOT: fygraph.attention_qkv
func.func @not_packed_qkv(%x: tensor<2x5x48xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x16xf32>) {
  %a = fygraph.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %b = fygraph.slice %x {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %c = fygraph.slice %x {starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %ah = fygraph.reshape %a : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %bh = fygraph.reshape %b : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %ch = fygraph.reshape %c : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %o, %l = fygraph.attention %bh, %ah, %ch {scale = 0.353553385 : f32, seq_major} : (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
  %d = fygraph.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %e = fygraph.slice %x {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %f = fygraph.slice %x {starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x5x48xf32> -> tensor<2x5x16xf32>
  %dh = fygraph.reshape %d : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %eh = fygraph.reshape %e : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %fh = fygraph.reshape %f : tensor<2x5x16xf32> -> tensor<2x5x2x8xf32>
  %o2, %l2 = fygraph.attention %dh, %eh, %fh {scale = 0.353553385 : f32, seq_major} : (tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
  return %o, %o2, %d : tensor<2x5x2x8xf32>, tensor<2x5x2x8xf32>, tensor<2x5x16xf32>
}

// -----

// q scaled by a (reshaped) splat constant, as torch 2.x's exporter leaves
// it: the factor goes into attention's scale (0.25 x 0.5).
// CHECK-LABEL: func.func @query_scale
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x3x8xf32>, %[[K:.*]]: tensor<2x4x3x8xf32>, %[[V:.*]]: tensor<2x4x3x8xf32>)
// CHECK-NOT: fygraph.mul
// CHECK: fygraph.attention %[[Q]], %[[K]], %[[V]] {scale = 1.250000e-01 : f32, seq_major}
func.func @query_scale(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %c = fygraph.constant dense<5.000000e-01> : tensor<f32>
  %c4 = fygraph.reshape %c : tensor<f32> -> tensor<1x1x1x1xf32>
  %qs = fygraph.mul %q, %c4 : (tensor<2x4x3x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x4x3x8xf32>
  %o, %l = fygraph.attention %qs, %k, %v {scale = 2.500000e-01 : f32, seq_major} : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
  return %o : tensor<2x4x3x8xf32>
}

// -----

// Not packed: reshapes that do not keep the tokens ([2, 4, 16] into
// [4, 2, 2, 8]), though the slices tile x in order.
// CHECK-LABEL: func.func @not_packed_tokens
// CHECK-NOT: fygraph.attention_qkv
func.func @not_packed_tokens(%x: tensor<2x4x48xf32>) -> tensor<4x2x2x8xf32> {
  %a = fygraph.slice %x {starts = array<i64: 0, 0, 0>, steps = array<i64: 1, 1, 1>} : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
  %b = fygraph.slice %x {starts = array<i64: 0, 0, 16>, steps = array<i64: 1, 1, 1>} : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
  %c = fygraph.slice %x {starts = array<i64: 0, 0, 32>, steps = array<i64: 1, 1, 1>} : tensor<2x4x48xf32> -> tensor<2x4x16xf32>
  %ah = fygraph.reshape %a : tensor<2x4x16xf32> -> tensor<4x2x2x8xf32>
  %bh = fygraph.reshape %b : tensor<2x4x16xf32> -> tensor<4x2x2x8xf32>
  %ch = fygraph.reshape %c : tensor<2x4x16xf32> -> tensor<4x2x2x8xf32>
  %o, %l = fygraph.attention %ah, %bh, %ch {scale = 0.353553385 : f32, seq_major} : (tensor<4x2x2x8xf32>, tensor<4x2x2x8xf32>, tensor<4x2x2x8xf32>) -> (tensor<4x2x2x8xf32>, tensor<4x2x2xf32>)
  return %o : tensor<4x2x2x8xf32>
}

// -----

// The scale stays apart where q's factor is no splat constant, or where the
// scaled q is read elsewhere too.
// CHECK-LABEL: func.func @query_scale_kept
// CHECK: fygraph.mul
// CHECK: fygraph.attention {{.*}} {scale = 2.500000e-01 : f32, seq_major}
// CHECK: fygraph.mul
// CHECK: fygraph.attention {{.*}} {scale = 2.500000e-01 : f32, seq_major}
func.func @query_scale_kept(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) {
  %c = fygraph.constant dense<[[[[0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.25]]]]> : tensor<1x1x1x8xf32>
  %qs = fygraph.mul %q, %c : (tensor<2x4x3x8xf32>, tensor<1x1x1x8xf32>) -> tensor<2x4x3x8xf32>
  %o, %l = fygraph.attention %qs, %k, %v {scale = 2.500000e-01 : f32, seq_major} : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
  %h = fygraph.constant dense<5.000000e-01> : tensor<f32>
  %h4 = fygraph.reshape %h : tensor<f32> -> tensor<1x1x1x1xf32>
  %ks = fygraph.mul %k, %h4 : (tensor<2x4x3x8xf32>, tensor<1x1x1x1xf32>) -> tensor<2x4x3x8xf32>
  %o2, %l2 = fygraph.attention %ks, %q, %v {scale = 2.500000e-01 : f32, seq_major} : (tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>) -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
  return %o, %o2, %ks : tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>, tensor<2x4x3x8xf32>
}
