// RUN: fuyou-opt %s | fuyou-opt | FileCheck %s
// RUN: fuyou-opt %s --mlir-print-op-generic | fuyou-opt | FileCheck %s

// CHECK-LABEL: fygraph.param @wte trainable : tensor<16x8xf32>
// CHECK: fygraph.param @mask : tensor<1x1x4x4xf32>
fygraph.param @wte trainable : tensor<16x8xf32>
fygraph.param @ln_w trainable : tensor<8xf32>
fygraph.param @ln_b trainable : tensor<8xf32>
fygraph.param @mask : tensor<1x1x4x4xf32>

// CHECK-LABEL: func.func @forward
func.func @forward(%idx: tensor<2x4xi64>, %tgt: tensor<2x4xi64>) -> tensor<f32> {
  // CHECK: %[[W:.*]] = fygraph.get_param @wte : tensor<16x8xf32>
  %w = fygraph.get_param @wte : tensor<16x8xf32>
  // CHECK: %[[X:.*]] = fygraph.gather %[[W]], %{{.*}}
  %x = fygraph.gather %w, %idx : (tensor<16x8xf32>, tensor<2x4xi64>) -> tensor<2x4x8xf32>
  %g = fygraph.get_param @ln_w : tensor<8xf32>
  %b = fygraph.get_param @ln_b : tensor<8xf32>
  // CHECK: fygraph.layer_norm %[[X]], %{{.*}}, %{{.*}} {axis = -1 : i64, epsilon = 9.99999974E-6 : f32}
  %n, %mean, %istd = fygraph.layer_norm %x, %g, %b {axis = -1 : i64, epsilon = 1.0e-5 : f32}
      : (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>)
  %r, %ir = fygraph.rms_norm %x, %g {axis = 2 : i64, epsilon = 1.0e-6 : f32}
      : (tensor<2x4x8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x1xf32>)
  %c = fygraph.constant dense<0.5> : tensor<f32>
  // CHECK: fygraph.mul %{{.*}}, %{{.*}} : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %m = fygraph.mul %n, %c : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %a = fygraph.add %m, %r : (tensor<2x4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %s = fygraph.sub %a, %c : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %d = fygraph.div %s, %c : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  %p = fygraph.pow %d, %c : (tensor<2x4x8xf32>, tensor<f32>) -> tensor<2x4x8xf32>
  // CHECK: fygraph.gelu %{{.*}} {approximate = "tanh"} : tensor<2x4x8xf32>
  %ge = fygraph.gelu %p {approximate = "tanh"} : tensor<2x4x8xf32>
  // CHECK: fygraph.bias_gelu %{{.*}}, %{{.*}} {approximate = "tanh"} : tensor<2x4x8xf32>, tensor<8xf32>
  %bg = fygraph.bias_gelu %ge, %b {approximate = "tanh"} : tensor<2x4x8xf32>, tensor<8xf32>
  // CHECK: fygraph.bias_gelu_grad %{{.*}}, %{{.*}}, %{{.*}}, %{{.*}} : tensor<2x4x8xf32>, tensor<8xf32>
  %bgg = fygraph.bias_gelu_grad %ge, %b, %bg, %ge : tensor<2x4x8xf32>, tensor<8xf32>
  %si = fygraph.silu %ge : tensor<2x4x8xf32>
  %ng = fygraph.neg %si : tensor<2x4x8xf32>
  %e = fygraph.exp %ng : tensor<2x4x8xf32>
  %sq = fygraph.sqrt %e : tensor<2x4x8xf32>
  %rc = fygraph.reciprocal %sq : tensor<2x4x8xf32>
  %th = fygraph.tanh %rc : tensor<2x4x8xf32>
  %ef = fygraph.erf %th : tensor<2x4x8xf32>
  %sg = fygraph.sigmoid %ef : tensor<2x4x8xf32>
  %dg = fygraph.unary_grad "tanh" %rc, %th, %sg : tensor<2x4x8xf32>
  // CHECK: fygraph.matmul %{{.*}}, %{{.*}} {trans_b} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %logits = fygraph.matmul %dg, %w {trans_b} : (tensor<2x4x8xf32>, tensor<16x8xf32>) -> tensor<2x4x16xf32>
  %rs = fygraph.reshape %logits : tensor<2x4x16xf32> -> tensor<8x16xf32>
  %t = fygraph.transpose %logits {perm = array<i64: 0, 2, 1>} : tensor<2x4x16xf32> -> tensor<2x16x4xf32>
  %sl = fygraph.slice %t {starts = array<i64: 0, 1, 0>, steps = array<i64: 1, 2, 1>} : tensor<2x16x4xf32> -> tensor<2x7x4xf32>
  %sg2 = fygraph.slice_grad %sl {starts = array<i64: 0, 1, 0>, steps = array<i64: 1, 2, 1>} : tensor<2x7x4xf32> -> tensor<2x16x4xf32>
  %cc = fygraph.concat %sl, %sl {axis = 1 : i64} : (tensor<2x7x4xf32>, tensor<2x7x4xf32>) -> tensor<2x14x4xf32>
  %mk = fygraph.get_param @mask : tensor<1x1x4x4xf32>
  %z = fygraph.constant dense<0.0> : tensor<f32>
  %eq = fygraph.equal %mk, %z : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xi1>
  %ex = fygraph.expand %mk : tensor<1x1x4x4xf32> -> tensor<2x3x4x4xf32>
  %wh = fygraph.where %eq, %z, %ex : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %sm = fygraph.softmax %wh {axis = -1 : i64} : tensor<2x3x4x4xf32>
  %smg = fygraph.softmax_grad %sm, %sm {axis = -1 : i64} : tensor<2x3x4x4xf32>
  // CHECK: fygraph.masked_softmax %{{.*}}, %{{.*}} {scale = 1.250000e-01 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
  %msm = fygraph.masked_softmax %ex, %eq {scale = 0.125 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
  // CHECK: fygraph.softmax_grad %{{.*}}, %{{.*}} {axis = 3 : i64, scale = 1.250000e-01 : f32} : tensor<2x3x4x4xf32>
  %msg = fygraph.softmax_grad %smg, %msm {axis = 3 : i64, scale = 0.125 : f32} : tensor<2x3x4x4xf32>
  %cs = fygraph.cast %eq : tensor<1x1x4x4xi1> to tensor<1x1x4x4xf32>
  %rsum = fygraph.reduce_sum %smg {axes = array<i64: 1>, keepdims = false} : tensor<2x3x4x4xf32> -> tensor<2x4x4xf32>
  %rmean = fygraph.reduce_mean %smg {axes = array<i64: -1>} : tensor<2x3x4x4xf32> -> tensor<2x3x4x1xf32>
  %rto = fygraph.reduce_to %smg : tensor<2x3x4x4xf32> -> tensor<4x4xf32>
  %dr, %dm = fygraph.dropout %logits {ratio = 0.0 : f32, seed = 0 : i64} : (tensor<2x4x16xf32>) -> (tensor<2x4x16xf32>, tensor<2x4x16xi1>)
  %drg = fygraph.dropout_grad %dr, %dm {ratio = 0.0 : f32} : (tensor<2x4x16xf32>, tensor<2x4x16xi1>) -> tensor<2x4x16xf32>
  %dx, %dsc, %db = fygraph.layer_norm_grad %x, %x, %g, %mean, %istd {axis = -1 : i64}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x1xf32>, tensor<2x4x1xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %rx, %rsc = fygraph.rms_norm_grad %x, %x, %g, %ir {axis = 2 : i64}
      : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4x1xf32>) -> (tensor<2x4x8xf32>, tensor<8xf32>)
  %gg = fygraph.gather_grad %x, %idx : (tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  // CHECK: fygraph.gather_grad_add %{{.*}}, %{{.*}}, %{{.*}} : (tensor<16x8xf32>, tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  %gga = fygraph.gather_grad_add %gg, %x, %idx : (tensor<16x8xf32>, tensor<2x4x8xf32>, tensor<2x4xi64>) -> tensor<16x8xf32>
  fygraph.adamw @wte, %gga : tensor<16x8xf32>
  // CHECK: fygraph.adamw @wte, %{{.*}} : tensor<16x8xf32>
  fygraph.adamw @wte, %gg : tensor<16x8xf32>
  %scores = fygraph.transpose %drg {perm = array<i64: 0, 2, 1>} : tensor<2x4x16xf32> -> tensor<2x16x4xf32>
  // CHECK: %[[LOSS:.*]], %{{.*}} = fygraph.softmax_cross_entropy_loss
  %loss, %lp = fygraph.softmax_cross_entropy_loss %scores, %tgt {ignore_index = -100 : i64}
      : (tensor<2x16x4xf32>, tensor<2x4xi64>) -> (tensor<f32>, tensor<2x16x4xf32>)
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %dl = fygraph.softmax_cross_entropy_loss_grad %one, %lp, %tgt
      : (tensor<f32>, tensor<2x16x4xf32>, tensor<2x4xi64>) -> tensor<2x16x4xf32>
  // CHECK: return %[[LOSS]]
  return %loss : tensor<f32>
}

// The run's loss scale, where backward starts under dynamic loss scaling.
// CHECK-LABEL: func.func @seed
func.func @seed() -> tensor<f32> {
  // CHECK: %[[S:.*]] = fygraph.loss_scale : tensor<f32>
  %s = fygraph.loss_scale : tensor<f32>
  // CHECK: return %[[S]]
  return %s : tensor<f32>
}
