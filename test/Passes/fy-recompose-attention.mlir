// RUN: fuyou-opt %s -split-input-file --fy-recompose=attention=true | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-recompose | FileCheck %s --check-prefix=OFF
// OFF-NOT: fygraph.attention
// A head dim over the target kernel's (4 in these tests' 8): no attention.
// RUN: fuyou-opt %s -split-input-file --fy-recompose="attention=true attention-max-head-dim=4" | FileCheck %s --check-prefix=OFF
// RUN: fuyou-opt %s -split-input-file --fy-recompose="attention=true attention-max-head-dim=8" | FileCheck %s

// torch 2.x's export: q and k each times the root of the scale, k^T made by
// transposes, a constant causal mask: one attention, its scale the product
// (0.5 * 0.5 = 0.25); k comes back to [B, H, T, D] by a transpose.
// CHECK-LABEL: func.func @causal
// CHECK-SAME: (%[[Q:.*]]: tensor<2x3x4x8xf32>, %[[KT:.*]]: tensor<2x3x8x4xf32>, %[[V:.*]]: tensor<2x3x4x8xf32>)
// CHECK-NEXT: %[[K:.*]] = fygraph.transpose %[[KT]] {perm = array<i64: 0, 1, 3, 2>}
// CHECK-NEXT: %[[O:.*]], %{{.*}} = fygraph.attention %[[Q]], %[[K]], %[[V]] {scale = 2.500000e-01 : f32} : {{.*}} -> (tensor<2x3x4x8xf32>, tensor<2x3x4xf32>)
// CHECK-NEXT: return %[[O]]
func.func @causal(%q: tensor<2x3x4x8xf32>, %kt: tensor<2x3x8x4xf32>, %v: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %half = fygraph.constant dense<5.000000e-01> : tensor<f32>
  %qs = fygraph.mul %q, %half : (tensor<2x3x4x8xf32>, tensor<f32>) -> tensor<2x3x4x8xf32>
  %ks = fygraph.mul %kt, %half : (tensor<2x3x8x4xf32>, tensor<f32>) -> tensor<2x3x8x4xf32>
  %s = fygraph.matmul %qs, %ks : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 1.000000e+00 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
  %o = fygraph.matmul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// -----

// k^T as torch exports a batched product's operand: k [B, H, T, D] flattened
// to [B*H, T, D], transposed, and unflattened. The attention reads k itself:
// no transpose is made back.
// CHECK-LABEL: func.func @batch_reshapes
// CHECK-SAME: (%[[Q:.*]]: tensor<2x3x4x8xf32>, %[[K:.*]]: tensor<2x3x4x8xf32>, %[[V:.*]]: tensor<2x3x4x8xf32>)
// CHECK-NOT: fygraph.transpose
// CHECK: %[[O:.*]], %{{.*}} = fygraph.attention %[[Q]], %[[K]], %[[V]] {scale = 0.3535
// CHECK-NEXT: return %[[O]]
func.func @batch_reshapes(%q: tensor<2x3x4x8xf32>, %k: tensor<2x3x4x8xf32>, %v: tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32> {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %flat = fygraph.reshape %k : tensor<2x3x4x8xf32> -> tensor<6x4x8xf32>
  %t = fygraph.transpose %flat {perm = array<i64: 0, 2, 1>} : tensor<6x4x8xf32> -> tensor<6x8x4xf32>
  %kt = fygraph.reshape %t : tensor<6x8x4xf32> -> tensor<2x3x8x4xf32>
  %s = fygraph.matmul %q, %kt : (tensor<2x3x4x8xf32>, tensor<2x3x8x4xf32>) -> tensor<2x3x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 0.353553385 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
  %o = fygraph.matmul %p, %v : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  return %o : tensor<2x3x4x8xf32>
}

// -----

// q, k and v split into heads from [B, T, heads, D] by transposes, and the
// result transposed back: attention {seq_major} reads and writes that
// layout, and no transpose is left.
// CHECK-LABEL: func.func @seq_major
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x3x8xf32>, %[[K:.*]]: tensor<2x4x3x8xf32>, %[[V:.*]]: tensor<2x4x3x8xf32>)
// CHECK-NOT: fygraph.transpose
// CHECK: %[[O:.*]], %{{.*}} = fygraph.attention %[[Q]], %[[K]], %[[V]] {scale = 0.3535{{[0-9]*}} : f32, seq_major} : {{.*}} -> (tensor<2x4x3x8xf32>, tensor<2x3x4xf32>)
// CHECK-NEXT: return %[[O]]
func.func @seq_major(%q: tensor<2x4x3x8xf32>, %k: tensor<2x4x3x8xf32>, %v: tensor<2x4x3x8xf32>) -> tensor<2x4x3x8xf32> {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %qh = fygraph.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %kh = fygraph.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %vh = fygraph.transpose %v {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x3x8xf32> -> tensor<2x3x4x8xf32>
  %s = fygraph.matmul %qh, %kh {trans_b} : (tensor<2x3x4x8xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 0.353553385 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
  %o = fygraph.matmul %p, %vh : (tensor<2x3x4x4xf32>, tensor<2x3x4x8xf32>) -> tensor<2x3x4x8xf32>
  %ot = fygraph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<2x3x4x8xf32> -> tensor<2x4x3x8xf32>
  return %ot : tensor<2x4x3x8xf32>
}

// -----

// k as it is, read transposed by the product (trans_b), the scale in the
// softmax; a sliding window of 2 (each row sees itself and the row before).
// CHECK-LABEL: func.func @window
// CHECK-SAME: (%[[Q:.*]]: tensor<1x2x4x8xf32>, %[[K:.*]]: tensor<1x2x4x8xf32>, %[[V:.*]]: tensor<1x2x4x8xf32>)
// CHECK-NEXT: %[[O:.*]], %{{.*}} = fygraph.attention %[[Q]], %[[K]], %[[V]] {scale = 0.35355{{[0-9]*}} : f32, window = 2 : i64}
// CHECK-NEXT: return %[[O]]
func.func @window(%q: tensor<1x2x4x8xf32>, %k: tensor<1x2x4x8xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [true, false, false, true], [true, true, false, false]]]]> : tensor<1x1x4x4xi1>
  %s = fygraph.matmul %q, %k {trans_b} : (tensor<1x2x4x8xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 0.353553385 : f32} : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x4xf32>
  %o = fygraph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Masks the kernel does not have are left as they are: one that also drops
// a key a causal row sees (row 2, key 0) without a window's pattern, one
// that keeps a later key, and one given at run time.
// CHECK-LABEL: func.func @other_masks
// CHECK-NOT: fygraph.attention
// CHECK: return
func.func @other_masks(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>, %m: tensor<1x1x4x4xi1>)
    -> (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) {
  %holes = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [true, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %ahead = fygraph.constant dense<[[[[false, false, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %s1 = fygraph.matmul %q, %k {trans_b} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p1 = fygraph.masked_softmax %s1, %holes {scale = 1.000000e+00 : f32} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x1x4x4xf32>
  %o1 = fygraph.matmul %p1, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %s2 = fygraph.matmul %q, %k {trans_b} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p2 = fygraph.masked_softmax %s2, %ahead {scale = 1.000000e+00 : f32} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x1x4x4xf32>
  %o2 = fygraph.matmul %p2, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  %s3 = fygraph.matmul %q, %k {trans_b} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p3 = fygraph.masked_softmax %s3, %m {scale = 1.000000e+00 : f32} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x1x4x4xf32>
  %o3 = fygraph.matmul %p3, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o1, %o2, %o3 : tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>
}

// -----

// Probabilities read elsewhere too (returned here) stay: the fused op never
// writes them.
// CHECK-LABEL: func.func @probabilities_used
// CHECK-NOT: fygraph.attention
// CHECK: return
func.func @probabilities_used(%q: tensor<1x1x4x8xf32>, %k: tensor<1x1x4x8xf32>, %v: tensor<1x1x4x8xf32>)
    -> (tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>) {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %s = fygraph.matmul %q, %k {trans_b} : (tensor<1x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 1.000000e+00 : f32} : (tensor<1x1x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x1x4x4xf32>
  %o = fygraph.matmul %p, %v : (tensor<1x1x4x4xf32>, tensor<1x1x4x8xf32>) -> tensor<1x1x4x8xf32>
  return %o, %p : tensor<1x1x4x8xf32>, tensor<1x1x4x4xf32>
}

// -----

// k^T broadcast over the heads in the product ([B, 1, D, T] against q's
// [B, 2, T, D]): not the op's shape, so nothing is built, not even k's
// transpose back.
// CHECK-LABEL: func.func @broadcast_k
// CHECK-NOT: fygraph.attention
// CHECK-NOT: fygraph.transpose
// CHECK: return
func.func @broadcast_k(%q: tensor<1x2x4x8xf32>, %kt: tensor<1x1x8x4xf32>, %v: tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32> {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %s = fygraph.matmul %q, %kt : (tensor<1x2x4x8xf32>, tensor<1x1x8x4xf32>) -> tensor<1x2x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 1.000000e+00 : f32} : (tensor<1x2x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<1x2x4x4xf32>
  %o = fygraph.matmul %p, %v : (tensor<1x2x4x4xf32>, tensor<1x2x4x8xf32>) -> tensor<1x2x4x8xf32>
  return %o : tensor<1x2x4x8xf32>
}

// -----

// Llama's attention: q and k rotated (RoPE, Hugging Face's rotate_half) after
// the swap into heads, k and v repeated for grouped-query heads (repeat_kv).
// The swaps move below the rotation, the repeats go (the kernel reads head
// h's keys from h / 2), and attention {seq_major} reads q, k, v where the
// Linears wrote them: no transpose or expand is left, only cos and sin
// reshaped to the token-major layout.
// CHECK-LABEL: func.func @rope_gqa
// CHECK-SAME: (%[[Q:.*]]: tensor<2x4x2x8xf32>, %[[K:.*]]: tensor<2x4x1x8xf32>, %[[V:.*]]: tensor<2x4x1x8xf32>, %[[COS:.*]]: tensor<1x1x4x8xf32>, %[[SIN:.*]]: tensor<1x1x4x8xf32>)
// CHECK-NOT: fygraph.{{transpose|expand}}
// CHECK: fygraph.reshape %[[COS]] : tensor<1x1x4x8xf32> -> tensor<1x4x1x8xf32>
// CHECK-NOT: fygraph.{{transpose|expand}}
// CHECK: %[[O:.*]], %{{.*}} = fygraph.attention {{.*}}, %[[V]] {{{.*}}seq_major}
// CHECK-SAME: (tensor<2x4x2x8xf32>, tensor<2x4x1x8xf32>, tensor<2x4x1x8xf32>)
// CHECK-NEXT: return %[[O]]
func.func @rope_gqa(%q: tensor<2x4x2x8xf32>, %k: tensor<2x4x1x8xf32>, %v: tensor<2x4x1x8xf32>, %cos: tensor<1x1x4x8xf32>, %sin: tensor<1x1x4x8xf32>) -> tensor<2x4x2x8xf32> {
  %mask = fygraph.constant dense<[[[[false, true, true, true], [false, false, true, true], [false, false, false, true], [false, false, false, false]]]]> : tensor<1x1x4x4xi1>
  %qh = fygraph.transpose %q {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x2x8xf32> -> tensor<2x2x4x8xf32>
  %qc = fygraph.mul %qh, %cos : (tensor<2x2x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<2x2x4x8xf32>
  %qlo = fygraph.slice %qh {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x2x4x8xf32> -> tensor<2x2x4x4xf32>
  %qhi = fygraph.slice %qh {starts = array<i64: 0, 0, 0, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x2x4x8xf32> -> tensor<2x2x4x4xf32>
  %qn = fygraph.neg %qhi : tensor<2x2x4x4xf32>
  %qrot = fygraph.concat %qn, %qlo {axis = 3 : i64} : (tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>) -> tensor<2x2x4x8xf32>
  %qs = fygraph.mul %qrot, %sin : (tensor<2x2x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<2x2x4x8xf32>
  %qr = fygraph.add %qc, %qs : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  %kh = fygraph.transpose %k {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x1x8xf32> -> tensor<2x1x4x8xf32>
  %kc = fygraph.mul %kh, %cos : (tensor<2x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  %klo = fygraph.slice %kh {starts = array<i64: 0, 0, 0, 0>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x1x4x8xf32> -> tensor<2x1x4x4xf32>
  %khi = fygraph.slice %kh {starts = array<i64: 0, 0, 0, 4>, steps = array<i64: 1, 1, 1, 1>} : tensor<2x1x4x8xf32> -> tensor<2x1x4x4xf32>
  %kn = fygraph.neg %khi : tensor<2x1x4x4xf32>
  %krot = fygraph.concat %kn, %klo {axis = 3 : i64} : (tensor<2x1x4x4xf32>, tensor<2x1x4x4xf32>) -> tensor<2x1x4x8xf32>
  %ks = fygraph.mul %krot, %sin : (tensor<2x1x4x8xf32>, tensor<1x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  %kr = fygraph.add %kc, %ks : (tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>) -> tensor<2x1x4x8xf32>
  %k5 = fygraph.reshape %kr : tensor<2x1x4x8xf32> -> tensor<2x1x1x4x8xf32>
  %kx = fygraph.expand %k5 : tensor<2x1x1x4x8xf32> -> tensor<2x1x2x4x8xf32>
  %krep = fygraph.reshape %kx : tensor<2x1x2x4x8xf32> -> tensor<2x2x4x8xf32>
  %vh = fygraph.transpose %v {perm = array<i64: 0, 2, 1, 3>} : tensor<2x4x1x8xf32> -> tensor<2x1x4x8xf32>
  %v5 = fygraph.reshape %vh : tensor<2x1x4x8xf32> -> tensor<2x1x1x4x8xf32>
  %vx = fygraph.expand %v5 : tensor<2x1x1x4x8xf32> -> tensor<2x1x2x4x8xf32>
  %vrep = fygraph.reshape %vx : tensor<2x1x2x4x8xf32> -> tensor<2x2x4x8xf32>
  %s = fygraph.matmul %qr, %krep {trans_b} : (tensor<2x2x4x8xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x4xf32>
  %p = fygraph.masked_softmax %s, %mask {scale = 0.353553385 : f32} : (tensor<2x2x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x2x4x4xf32>
  %o = fygraph.matmul %p, %vrep : (tensor<2x2x4x4xf32>, tensor<2x2x4x8xf32>) -> tensor<2x2x4x8xf32>
  %ot = fygraph.transpose %o {perm = array<i64: 0, 2, 1, 3>} : tensor<2x2x4x8xf32> -> tensor<2x4x2x8xf32>
  return %ot : tensor<2x4x2x8xf32>
}
