// RUN: fuyou-opt %s -split-input-file -verify-diagnostics

func.func @bad_broadcast(%a: tensor<2x3xf32>, %b: tensor<4xf32>) -> tensor<2x3xf32> {
  // expected-error @+1 {{operands don't have broadcast-compatible shapes}}
  %0 = fygraph.add %a, %b : (tensor<2x3xf32>, tensor<4xf32>) -> tensor<2x3xf32>
  return %0 : tensor<2x3xf32>
}

// -----

func.func @equal_not_i1(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{result element type must be 'i1'}}
  %0 = fygraph.equal %a, %a : (tensor<2xf32>, tensor<2xf32>) -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @matmul_k(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{contraction dims differ: 3 vs 4}}
  %0 = fygraph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_bias_len(%a: tensor<2x3xf32>, %b: tensor<3x5xf32>, %bias: tensor<4xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{bias must be 1-D with the result's last dim, got [4]}}
  %0 = fygraph.matmul_bias %a, %b, %bias : (tensor<2x3xf32>, tensor<3x5xf32>, tensor<4xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @matmul_bias_k(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>, %bias: tensor<5xf32>) -> tensor<2x5xf32> {
  // expected-error @+1 {{contraction dims differ: 3 vs 4}}
  %0 = fygraph.matmul_bias %a, %b, %bias : (tensor<2x3xf32>, tensor<4x5xf32>, tensor<5xf32>) -> tensor<2x5xf32>
  return %0 : tensor<2x5xf32>
}

// -----

func.func @reshape_count(%a: tensor<2x3xf32>) -> tensor<7xf32> {
  // expected-error @+1 {{must keep the element count and type}}
  %0 = fygraph.reshape %a : tensor<2x3xf32> -> tensor<7xf32>
  return %0 : tensor<7xf32>
}

// -----

func.func @perm(%a: tensor<2x3xf32>) -> tensor<3x2xf32> {
  // expected-error @+1 {{perm is not a permutation}}
  %0 = fygraph.transpose %a {perm = array<i64: 0, 0>} : tensor<2x3xf32> -> tensor<3x2xf32>
  return %0 : tensor<3x2xf32>
}

// -----

func.func @slice_oob(%a: tensor<4xf32>) -> tensor<3xf32> {
  // expected-error @+1 {{slice runs out of dim 0}}
  %0 = fygraph.slice %a {starts = array<i64: 1>, steps = array<i64: 2>} : tensor<4xf32> -> tensor<3xf32>
  return %0 : tensor<3xf32>
}

// -----

func.func @ln_scale(%x: tensor<2x8xf32>, %g: tensor<4xf32>) -> tensor<2x8xf32> {
  // expected-error @+1 {{scale and bias must have the normalised dims' shape}}
  %y, %m, %s = fygraph.layer_norm %x, %g {axis = -1 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x8xf32>, tensor<4xf32>) -> (tensor<2x8xf32>, tensor<2x1xf32>, tensor<2x1xf32>)
  return %y : tensor<2x8xf32>
}

// -----

func.func @reduce(%x: tensor<2x8xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{result shape does not match the reduction}}
  %0 = fygraph.reduce_sum %x {axes = array<i64: 1>} : tensor<2x8xf32> -> tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @gather(%t: tensor<16x8xf32>, %i: tensor<2x4xi64>) -> tensor<2x8xf32> {
  // expected-error @+1 {{gathered shape must be indices' shape + table shape[1:]}}
  %0 = fygraph.gather %t, %i : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x8xf32>
  return %0 : tensor<2x8xf32>
}

// -----

func.func @gather_grad_add_base(%t: tensor<16x4xf32>, %dy: tensor<2x8xf32>, %i: tensor<2xi64>) -> tensor<16x8xf32> {
  // expected-error @+1 {{base must have the result's type}}
  %0 = fygraph.gather_grad_add %t, %dy, %i : (tensor<16x4xf32>, tensor<2x8xf32>, tensor<2xi64>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

func.func @gather_grad_add_rows(%t: tensor<16x8xf32>, %dy: tensor<3x8xf32>, %i: tensor<2xi64>) -> tensor<16x8xf32> {
  // expected-error @+1 {{gathered shape must be indices' shape + table shape[1:]}}
  %0 = fygraph.gather_grad_add %t, %dy, %i : (tensor<16x8xf32>, tensor<3x8xf32>, tensor<2xi64>) -> tensor<16x8xf32>
  return %0 : tensor<16x8xf32>
}

// -----

func.func @sce(%s: tensor<8x16xf32>, %l: tensor<4xi64>) -> tensor<f32> {
  // expected-error @+1 {{labels must have the scores' shape without the class dim 1}}
  %loss, %lp = fygraph.softmax_cross_entropy_loss %s, %l : (tensor<8x16xf32>, tensor<4xi64>) -> (tensor<f32>, tensor<8x16xf32>)
  return %loss : tensor<f32>
}

// -----

func.func @masked_softmax_rows(%x: tensor<2x5x9xf32>, %m: tensor<3x9xi1>) -> tensor<2x5x9xf32> {
  // expected-error @+1 {{mask must be [1.., R, D] with D the input's last dim and R 1 or the dim before it, got 'tensor<3x9xi1>'}}
  %0 = fygraph.masked_softmax %x, %m {scale = 1.0 : f32} : (tensor<2x5x9xf32>, tensor<3x9xi1>) -> tensor<2x5x9xf32>
  return %0 : tensor<2x5x9xf32>
}

// -----

func.func @masked_softmax_batch(%x: tensor<2x5x9xf32>, %m: tensor<2x1x9xi1>) -> tensor<2x5x9xf32> {
  // expected-error @+1 {{mask must be [1.., R, D]}}
  %0 = fygraph.masked_softmax %x, %m {scale = 1.0 : f32} : (tensor<2x5x9xf32>, tensor<2x1x9xi1>) -> tensor<2x5x9xf32>
  return %0 : tensor<2x5x9xf32>
}

// -----

func.func @dyn(%a: tensor<?xf32>) {
  // expected-error @+1 {{must be statically shaped tensor}}
  %0 = fygraph.neg %a : tensor<?xf32>
  return
}

// -----

func.func @bias_gelu_bias(%a: tensor<2x4xf32>, %b: tensor<2xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{bias must be 1-D with the input's last dim, got 'tensor<2xf32>' for 'tensor<2x4xf32>'}}
  %0 = fygraph.bias_gelu %a, %b : tensor<2x4xf32>, tensor<2xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @bias_gelu_grad_form(%a: tensor<2x4xf32>, %b: tensor<4xf32>) -> tensor<2x4xf32> {
  // expected-error @+1 {{approximate must be "none" or "tanh"}}
  %0 = fygraph.bias_gelu_grad %a, %b, %a, %a {approximate = "fast"} : tensor<2x4xf32>, tensor<4xf32>
  return %0 : tensor<2x4xf32>
}

// -----

func.func @gelu(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{approximate must be "none" or "tanh"}}
  %0 = fygraph.gelu %a {approximate = "fast"} : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

func.func @unknown_grad(%a: tensor<2xf32>) -> tensor<2xf32> {
  // expected-error @+1 {{unknown elementwise function 'cos'}}
  %0 = fygraph.unary_grad "cos" %a, %a, %a : tensor<2xf32>
  return %0 : tensor<2xf32>
}

// -----

fygraph.param @w : tensor<4xf32>
func.func @no_param() -> tensor<4xf32> {
  // expected-error @+1 {{'v' does not name a fygraph.param}}
  %0 = fygraph.get_param @v : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

fygraph.param @w : tensor<4xf32>
func.func @frozen_update(%g: tensor<4xf32>) {
  // expected-error @+1 {{parameter 'w' is not trainable}}
  fygraph.adamw @w, %g : tensor<4xf32>
  return
}

// -----

// expected-error @+1 {{type must be a statically shaped tensor}}
fygraph.param @w : tensor<?xf32>

// -----

func.func @loss_scale_not_scalar() -> tensor<2xf32> {
  // expected-error @+1 {{result #0 must be 0D tensor of 32-bit float values}}
  %s = fygraph.loss_scale : tensor<2xf32>
  return %s : tensor<2xf32>
}

// -----

func.func @rope_odd_dim(%x: tensor<2x3x5xf32>, %t: tensor<3x5xf32>) -> tensor<2x3x5xf32> {
  // expected-error @+1 {{the input's last dim must be even (two halves), got 5}}
  %0 = fygraph.rope %x, %t, %t {seq_axis = 1 : i64} : tensor<2x3x5xf32>, tensor<3x5xf32>
  return %0 : tensor<2x3x5xf32>
}

// -----

func.func @rope_table(%x: tensor<2x3x4xf32>, %t: tensor<2x4xf32>) -> tensor<2x3x4xf32> {
  // expected-error @+1 {{cos and sin must be [T, D] = [3, 4]}}
  %0 = fygraph.rope %x, %t, %t {seq_axis = 1 : i64} : tensor<2x3x4xf32>, tensor<2x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

func.func @rope_axis(%x: tensor<2x3x4xf32>, %t: tensor<3x4xf32>) -> tensor<2x3x4xf32> {
  // expected-error @+1 {{seq_axis must be a dim of the input other than its last, got 2}}
  %0 = fygraph.rope %x, %t, %t {seq_axis = 2 : i64} : tensor<2x3x4xf32>, tensor<3x4xf32>
  return %0 : tensor<2x3x4xf32>
}

// -----

func.func @attention_qkv_heads(%x: tensor<2x5x5x8xf32>) -> tensor<2x5x2x8xf32> {
  // expected-error @+1 {{must hold the result's heads and twice 2 more}}
  %o, %l = fygraph.attention_qkv %x {kv_heads = 2 : i64, scale = 0.5 : f32} : (tensor<2x5x5x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x2x5xf32>)
  return %o : tensor<2x5x2x8xf32>
}

// -----

func.func @attention_qkv_kv_heads(%x: tensor<2x5x7x8xf32>) -> tensor<2x5x3x8xf32> {
  // expected-error @+1 {{kv_heads must divide the result's 3 heads, got 2}}
  %o, %l = fygraph.attention_qkv %x {kv_heads = 2 : i64, scale = 0.5 : f32} : (tensor<2x5x7x8xf32>) -> (tensor<2x5x3x8xf32>, tensor<2x3x5xf32>)
  return %o : tensor<2x5x3x8xf32>
}

// -----

func.func @attention_qkv_lse(%x: tensor<2x5x6x8xf32>) -> tensor<2x5x2x8xf32> {
  // expected-error @+1 {{lse must be [B, H, T]}}
  %o, %l = fygraph.attention_qkv %x {kv_heads = 2 : i64, scale = 0.5 : f32} : (tensor<2x5x6x8xf32>) -> (tensor<2x5x2x8xf32>, tensor<2x5x2xf32>)
  return %o : tensor<2x5x2x8xf32>
}

// -----

func.func @attention_qkv_grad_types(%x: tensor<2x5x6x8xf32>, %o: tensor<2x5x2x8xf32>, %l: tensor<2x2x5xf32>) -> tensor<2x5x6x8xf32> {
  // expected-error @+1 {{dy must have the result's type, dqkv qkv's}}
  %d = fygraph.attention_qkv_grad %x, %o, %l, %x {kv_heads = 2 : i64, scale = 0.5 : f32} : (tensor<2x5x6x8xf32>, tensor<2x5x2x8xf32>, tensor<2x2x5xf32>, tensor<2x5x6x8xf32>) -> tensor<2x5x6x8xf32>
  return %d : tensor<2x5x6x8xf32>
}

// -----

func.func @swiglu_packed_not_doubled(%x: tensor<4x15xf32>) -> tensor<4x8xf32> {
  // expected-error @+1 {{the packed input's last dim must be twice its half's, got 15 and 8}}
  %s = fygraph.swiglu_packed %x : tensor<4x15xf32> -> tensor<4x8xf32>
  return %s : tensor<4x8xf32>
}

// -----

func.func @swiglu_packed_grad_rows(%x: tensor<4x16xf32>, %dy: tensor<3x8xf32>) -> tensor<4x16xf32> {
  // expected-error @+1 {{the packed input and its half differ outside the last dim}}
  %d = fygraph.swiglu_packed_grad %x, %dy : tensor<4x16xf32>, tensor<3x8xf32>
  return %d : tensor<4x16xf32>
}
