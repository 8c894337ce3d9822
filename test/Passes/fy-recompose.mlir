// RUN: fuyou-opt %s -split-input-file --fy-recompose | FileCheck %s

// GELU, erf form: 0.5 * (x * (1 + erf(x / sqrt(2)))).
// CHECK-LABEL: func.func @gelu_erf_div
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_erf_div(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = fygraph.constant dense<1.41421354> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %d = fygraph.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = fygraph.erf %d : tensor<2x8xf32>
  %a = fygraph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// -----

// GELU, erf form written with x * (1/sqrt(2)), operands in the other orders.
// CHECK-LABEL: func.func @gelu_erf_mul
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.gelu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_erf_mul(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %rs2 = fygraph.constant dense<0.707106769> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %d = fygraph.mul %rs2, %x : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %e = fygraph.erf %d : tensor<2x8xf32>
  %a = fygraph.add %one, %e : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = fygraph.mul %a, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %half, %m : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// -----

// GELU, tanh form with x^3 = (x * x) * x:
// 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3))).
// CHECK-LABEL: func.func @gelu_tanh_mul
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.gelu %[[X]] {approximate = "tanh"} : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_tanh_mul(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %k = fygraph.constant dense<0.797884583> : tensor<f32>
  %c = fygraph.constant dense<0.044715> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %x2 = fygraph.mul %x, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %x3 = fygraph.mul %x2, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %cx3 = fygraph.mul %c, %x3 : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %s = fygraph.add %x, %cx3 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = fygraph.mul %s, %k : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %th = fygraph.tanh %t : tensor<2x8xf32>
  %a = fygraph.add %th, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// -----

// GELU, tanh form with x^3 = pow(x, 3).
// CHECK-LABEL: func.func @gelu_tanh_pow
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.gelu %[[X]] {approximate = "tanh"} : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_tanh_pow(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %three = fygraph.constant dense<3.0> : tensor<f32>
  %k = fygraph.constant dense<0.797884583> : tensor<f32>
  %c = fygraph.constant dense<0.044715> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %x3 = fygraph.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %cx3 = fygraph.mul %x3, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %s = fygraph.add %cx3, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = fygraph.mul %k, %s : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %th = fygraph.tanh %t : tensor<2x8xf32>
  %a = fygraph.add %one, %th : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// -----

// GELU, tanh form as Hugging Face's NewGELUActivation (GPT-2's "gelu_new")
// writes it: (0.5 * x) * (1 + tanh(...)).
// CHECK-LABEL: func.func @gelu_new
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.gelu %[[X]] {approximate = "tanh"} : tensor<2x8xf32>
// CHECK-NEXT: return %[[G]]
func.func @gelu_new(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %three = fygraph.constant dense<3.0> : tensor<f32>
  %k = fygraph.constant dense<0.797884583> : tensor<f32>
  %c = fygraph.constant dense<0.044715> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %hx = fygraph.mul %x, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %x3 = fygraph.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %cx3 = fygraph.mul %x3, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %s = fygraph.add %x, %cx3 : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = fygraph.mul %s, %k : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %th = fygraph.tanh %t : tensor<2x8xf32>
  %a = fygraph.add %th, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %r = fygraph.mul %hx, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// -----

// SiLU, x * sigmoid(x) and sigmoid(x) * x.
// CHECK-LABEL: func.func @silu
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>, %[[Y:.*]]: tensor<2x8xf32>)
// CHECK-NEXT: %[[A:.*]] = fygraph.silu %[[X]] : tensor<2x8xf32>
// CHECK-NEXT: %[[B:.*]] = fygraph.silu %[[Y]] : tensor<2x8xf32>
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @silu(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>) {
  %sx = fygraph.sigmoid %x : tensor<2x8xf32>
  %a = fygraph.mul %x, %sx : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %sy = fygraph.sigmoid %y : tensor<2x8xf32>
  %b = fygraph.mul %sy, %y : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %a, %b : tensor<2x8xf32>, tensor<2x8xf32>
}

// -----

// RMSNorm, x * (1 / sqrt(mean(x^2, -1) + eps)) * w.
// CHECK-LABEL: func.func @rms_norm_div
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[R:.*]], %{{.*}} = fygraph.rms_norm %[[X]], %[[W]] {axis = 2 : i64, epsilon = 9.99999997E-7 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>)
// CHECK-NEXT: return %[[R]]
func.func @rms_norm_div(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %eps = fygraph.constant dense<1.0e-6> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %p = fygraph.pow %x, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %m = fygraph.reduce_mean %p {axes = array<i64: -1>} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %a = fygraph.add %m, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = fygraph.sqrt %a : tensor<2x3x1xf32>
  %ir = fygraph.div %one, %s : (tensor<f32>, tensor<2x3x1xf32>) -> tensor<2x3x1xf32>
  %n = fygraph.mul %x, %ir : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %r = fygraph.mul %n, %w : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  return %r : tensor<2x3x8xf32>
}

// -----

// RMSNorm, w * (reciprocal(sqrt(eps + mean(x * x, 1))) * x) on a 2-D input.
// CHECK-LABEL: func.func @rms_norm_reciprocal
// CHECK-SAME: (%[[X:.*]]: tensor<4x8xf32>, %[[W:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[R:.*]], %{{.*}} = fygraph.rms_norm %[[X]], %[[W]] {axis = 1 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<4x8xf32>, tensor<8xf32>) -> (tensor<4x8xf32>, tensor<4x1xf32>)
// CHECK-NEXT: return %[[R]]
func.func @rms_norm_reciprocal(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %eps = fygraph.constant dense<1.0e-5> : tensor<f32>
  %sq = fygraph.mul %x, %x : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %m = fygraph.reduce_mean %sq {axes = array<i64: 1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %a = fygraph.add %eps, %m : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %s = fygraph.sqrt %a : tensor<4x1xf32>
  %ir = fygraph.reciprocal %s : tensor<4x1xf32>
  %n = fygraph.mul %ir, %x : (tensor<4x1xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %r = fygraph.mul %w, %n : (tensor<8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// LayerNorm: (x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps) * w + b.
// CHECK-LABEL: func.func @layer_norm
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x8xf32>, %[[W:.*]]: tensor<8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[R:.*]], %{{.*}}, %{{.*}} = fygraph.layer_norm %[[X]], %[[W]], %[[B]] {axis = 2 : i64, epsilon = 9.99999974E-6 : f32} : (tensor<2x3x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x3x8xf32>, tensor<2x3x1xf32>, tensor<2x3x1xf32>)
// CHECK-NEXT: return %[[R]]
func.func @layer_norm(%x: tensor<2x3x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %eps = fygraph.constant dense<1.0e-5> : tensor<f32>
  %mu = fygraph.reduce_mean %x {axes = array<i64: -1>} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %c = fygraph.sub %x, %mu : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %p = fygraph.pow %c, %two : (tensor<2x3x8xf32>, tensor<f32>) -> tensor<2x3x8xf32>
  %var = fygraph.reduce_mean %p {axes = array<i64: 2>} : tensor<2x3x8xf32> -> tensor<2x3x1xf32>
  %a = fygraph.add %var, %eps : (tensor<2x3x1xf32>, tensor<f32>) -> tensor<2x3x1xf32>
  %s = fygraph.sqrt %a : tensor<2x3x1xf32>
  %n = fygraph.div %c, %s : (tensor<2x3x8xf32>, tensor<2x3x1xf32>) -> tensor<2x3x8xf32>
  %sc = fygraph.mul %n, %w : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  %r = fygraph.add %sc, %b : (tensor<2x3x8xf32>, tensor<8xf32>) -> tensor<2x3x8xf32>
  return %r : tensor<2x3x8xf32>
}

// -----

// Negative cases: nothing fuses.

// 0.6 instead of 0.5 in front.
// CHECK-LABEL: func.func @gelu_wrong_half
// CHECK-NOT: fygraph.gelu
// CHECK: fygraph.erf
// CHECK: return
func.func @gelu_wrong_half(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = fygraph.constant dense<1.41421354> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.6> : tensor<f32>
  %d = fygraph.div %x, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = fygraph.erf %d : tensor<2x8xf32>
  %a = fygraph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// erf(x / 2) is not GELU's inner function.
// CHECK-LABEL: func.func @gelu_wrong_divisor
// CHECK-NOT: fygraph.gelu
// CHECK: fygraph.erf
// CHECK: return
func.func @gelu_wrong_divisor(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %d = fygraph.div %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = fygraph.erf %d : tensor<2x8xf32>
  %a = fygraph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// The erf reads y, the product reads x.
// CHECK-LABEL: func.func @gelu_two_inputs
// CHECK-NOT: fygraph.gelu
// CHECK: fygraph.erf
// CHECK: return
func.func @gelu_two_inputs(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sqrt2 = fygraph.constant dense<1.41421354> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %d = fygraph.div %y, %sqrt2 : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %e = fygraph.erf %d : tensor<2x8xf32>
  %a = fygraph.add %e, %one : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// Tanh form with 0.05 instead of 0.044715.
// CHECK-LABEL: func.func @gelu_tanh_wrong_coefficient
// CHECK-NOT: fygraph.gelu
// CHECK: fygraph.tanh
// CHECK: return
func.func @gelu_tanh_wrong_coefficient(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %three = fygraph.constant dense<3.0> : tensor<f32>
  %k = fygraph.constant dense<0.797884583> : tensor<f32>
  %c = fygraph.constant dense<0.05> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %x3 = fygraph.pow %x, %three : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %cx3 = fygraph.mul %x3, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %s = fygraph.add %cx3, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = fygraph.mul %k, %s : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %th = fygraph.tanh %t : tensor<2x8xf32>
  %a = fygraph.add %one, %th : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// Tanh form with x^2 in place of x^3.
// CHECK-LABEL: func.func @gelu_tanh_square
// CHECK-NOT: fygraph.gelu
// CHECK: fygraph.tanh
// CHECK: return
func.func @gelu_tanh_square(%x: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %k = fygraph.constant dense<0.797884583> : tensor<f32>
  %c = fygraph.constant dense<0.044715> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %x2 = fygraph.pow %x, %two : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %cx2 = fygraph.mul %x2, %c : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  %s = fygraph.add %cx2, %x : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %t = fygraph.mul %k, %s : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %th = fygraph.tanh %t : tensor<2x8xf32>
  %a = fygraph.add %one, %th : (tensor<f32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %m = fygraph.mul %x, %a : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %r = fygraph.mul %m, %half : (tensor<2x8xf32>, tensor<f32>) -> tensor<2x8xf32>
  return %r : tensor<2x8xf32>
}

// sigmoid(y) * x.
// CHECK-LABEL: func.func @silu_two_inputs
// CHECK-NOT: fygraph.silu
// CHECK: fygraph.sigmoid
// CHECK: return
func.func @silu_two_inputs(%x: tensor<2x8xf32>, %y: tensor<2x8xf32>) -> tensor<2x8xf32> {
  %sy = fygraph.sigmoid %y : tensor<2x8xf32>
  %a = fygraph.mul %x, %sy : (tensor<2x8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  return %a : tensor<2x8xf32>
}

// RMSNorm over the first dim, not the last.
// CHECK-LABEL: func.func @rms_norm_wrong_axis
// CHECK-NOT: fygraph.rms_norm
// CHECK: fygraph.reduce_mean
// CHECK: return
func.func @rms_norm_wrong_axis(%x: tensor<8x8xf32>, %w: tensor<8xf32>) -> tensor<8x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %eps = fygraph.constant dense<1.0e-6> : tensor<f32>
  %one = fygraph.constant dense<1.0> : tensor<f32>
  %p = fygraph.pow %x, %two : (tensor<8x8xf32>, tensor<f32>) -> tensor<8x8xf32>
  %m = fygraph.reduce_mean %p {axes = array<i64: 0>} : tensor<8x8xf32> -> tensor<1x8xf32>
  %a = fygraph.add %m, %eps : (tensor<1x8xf32>, tensor<f32>) -> tensor<1x8xf32>
  %s = fygraph.sqrt %a : tensor<1x8xf32>
  %ir = fygraph.div %one, %s : (tensor<f32>, tensor<1x8xf32>) -> tensor<1x8xf32>
  %n = fygraph.mul %x, %ir : (tensor<8x8xf32>, tensor<1x8xf32>) -> tensor<8x8xf32>
  %r = fygraph.mul %n, %w : (tensor<8x8xf32>, tensor<8xf32>) -> tensor<8x8xf32>
  return %r : tensor<8x8xf32>
}

// RMSNorm with 2 / sqrt(...) in place of 1 / sqrt(...).
// CHECK-LABEL: func.func @rms_norm_wrong_numerator
// CHECK-NOT: fygraph.rms_norm
// CHECK: fygraph.sqrt
// CHECK: return
func.func @rms_norm_wrong_numerator(%x: tensor<4x8xf32>, %w: tensor<8xf32>) -> tensor<4x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %eps = fygraph.constant dense<1.0e-6> : tensor<f32>
  %p = fygraph.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %m = fygraph.reduce_mean %p {axes = array<i64: -1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %a = fygraph.add %m, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = fygraph.sqrt %a : tensor<4x1xf32>
  %ir = fygraph.div %two, %s : (tensor<f32>, tensor<4x1xf32>) -> tensor<4x1xf32>
  %n = fygraph.mul %x, %ir : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %r = fygraph.mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// LayerNorm whose variance squares x rather than x - mean(x).
// CHECK-LABEL: func.func @layer_norm_uncentred_variance
// CHECK-NOT: fygraph.layer_norm
// CHECK: fygraph.div
// CHECK: return
func.func @layer_norm_uncentred_variance(%x: tensor<4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<4x8xf32> {
  %two = fygraph.constant dense<2.0> : tensor<f32>
  %eps = fygraph.constant dense<1.0e-5> : tensor<f32>
  %mu = fygraph.reduce_mean %x {axes = array<i64: -1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %c = fygraph.sub %x, %mu : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %p = fygraph.pow %x, %two : (tensor<4x8xf32>, tensor<f32>) -> tensor<4x8xf32>
  %var = fygraph.reduce_mean %p {axes = array<i64: -1>} : tensor<4x8xf32> -> tensor<4x1xf32>
  %a = fygraph.add %var, %eps : (tensor<4x1xf32>, tensor<f32>) -> tensor<4x1xf32>
  %s = fygraph.sqrt %a : tensor<4x1xf32>
  %n = fygraph.div %c, %s : (tensor<4x8xf32>, tensor<4x1xf32>) -> tensor<4x8xf32>
  %sc = fygraph.mul %n, %w : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  %r = fygraph.add %sc, %b : (tensor<4x8xf32>, tensor<8xf32>) -> tensor<4x8xf32>
  return %r : tensor<4x8xf32>
}

// -----

// Every exported Linear: matmul(x, transpose(w)) -> matmul(x, w) {trans_b}.
// A flag already set toggles off; a transpose of other dims stays.
// CHECK-LABEL: func.func @linear
// CHECK-SAME: (%[[X:.*]]: tensor<2x3x4xf32>, %[[W:.*]]: tensor<5x4xf32>, %[[B:.*]]: tensor<2x4x3xf32>, %[[C:.*]]: tensor<2x3x5xf32>)
// CHECK: %[[Y:.*]] = fygraph.matmul %[[X]], %[[W]] {trans_b} : (tensor<2x3x4xf32>, tensor<5x4xf32>) -> tensor<2x3x5xf32>
// CHECK: %[[Z:.*]] = fygraph.matmul %[[B]], %[[C]] : (tensor<2x4x3xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
// CHECK: %[[P:.*]] = fygraph.transpose %[[C]] {perm = array<i64: 1, 0, 2>}
// CHECK: fygraph.matmul %[[P]], %[[W]] : (tensor<3x2x5xf32>, tensor<5x4xf32>) -> tensor<3x2x4xf32>
func.func @linear(%x: tensor<2x3x4xf32>, %w: tensor<5x4xf32>, %b: tensor<2x4x3xf32>, %c: tensor<2x3x5xf32>)
    -> (tensor<2x3x5xf32>, tensor<2x4x5xf32>, tensor<3x2x4xf32>) {
  %wt = fygraph.transpose %w {perm = array<i64: 1, 0>} : tensor<5x4xf32> -> tensor<4x5xf32>
  %y = fygraph.matmul %x, %wt : (tensor<2x3x4xf32>, tensor<4x5xf32>) -> tensor<2x3x5xf32>
  %bt = fygraph.transpose %b {perm = array<i64: 0, 2, 1>} : tensor<2x4x3xf32> -> tensor<2x3x4xf32>
  %z = fygraph.matmul %bt, %c {trans_a} : (tensor<2x3x4xf32>, tensor<2x3x5xf32>) -> tensor<2x4x5xf32>
  %p = fygraph.transpose %c {perm = array<i64: 1, 0, 2>} : tensor<2x3x5xf32> -> tensor<3x2x5xf32>
  %q = fygraph.matmul %p, %wt {trans_b} : (tensor<3x2x5xf32>, tensor<4x5xf32>) -> tensor<3x2x4xf32>
  return %y, %z, %q : tensor<2x3x5xf32>, tensor<2x4x5xf32>, tensor<3x2x4xf32>
}

// -----

// Attention as torch exports it: scores * c, masked_fill(mask == 0, -inf),
// softmax over the last dim -> one masked_softmax; the mul and where go.
// CHECK-LABEL: func.func @masked_softmax
// CHECK-SAME: (%[[S:.*]]: tensor<2x3x4x4xf32>, %[[B:.*]]: tensor<1x1x4x4xf32>)
// CHECK: %[[M:.*]] = fygraph.equal %[[B]]
// CHECK-NEXT: %[[Y:.*]] = fygraph.masked_softmax %[[S]], %[[M]] {scale = 2.500000e-01 : f32} : (tensor<2x3x4x4xf32>, tensor<1x1x4x4xi1>) -> tensor<2x3x4x4xf32>
// CHECK-NEXT: return %[[Y]]
func.func @masked_softmax(%s: tensor<2x3x4x4xf32>, %bias: tensor<1x1x4x4xf32>) -> tensor<2x3x4x4xf32> {
  %c = fygraph.constant dense<0.25> : tensor<f32>
  %z = fygraph.constant dense<0.0> : tensor<f32>
  %ninf = fygraph.constant dense<0xFF800000> : tensor<f32>
  %sc = fygraph.mul %s, %c : (tensor<2x3x4x4xf32>, tensor<f32>) -> tensor<2x3x4x4xf32>
  %m = fygraph.equal %bias, %z : (tensor<1x1x4x4xf32>, tensor<f32>) -> tensor<1x1x4x4xi1>
  %w = fygraph.where %m, %ninf, %sc : (tensor<1x1x4x4xi1>, tensor<f32>, tensor<2x3x4x4xf32>) -> tensor<2x3x4x4xf32>
  %y = fygraph.softmax %w {axis = -1 : i64} : tensor<2x3x4x4xf32>
  return %y : tensor<2x3x4x4xf32>
}

// -----

// No scaling (scale 1), a mask of one row, the constant on the left of the
// mul, and the axis written as a positive number.
// CHECK-LABEL: func.func @masked_softmax_forms
// CHECK-SAME: (%[[S:.*]]: tensor<5x7xf32>, %[[M:.*]]: tensor<7xi1>, %[[T:.*]]: tensor<2x5x7xf32>, %[[M2:.*]]: tensor<5x7xi1>)
// CHECK-NEXT: %[[A:.*]] = fygraph.masked_softmax %[[S]], %[[M]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: %[[B:.*]] = fygraph.masked_softmax %[[T]], %[[M2]] {scale = 5.000000e-01 : f32}
// CHECK-NEXT: return %[[A]], %[[B]]
func.func @masked_softmax_forms(%s: tensor<5x7xf32>, %m: tensor<7xi1>, %t: tensor<2x5x7xf32>, %m2: tensor<5x7xi1>)
    -> (tensor<5x7xf32>, tensor<2x5x7xf32>) {
  %ninf = fygraph.constant dense<0xFF800000> : tensor<f32>
  %half = fygraph.constant dense<0.5> : tensor<f32>
  %w = fygraph.where %m, %ninf, %s : (tensor<7xi1>, tensor<f32>, tensor<5x7xf32>) -> tensor<5x7xf32>
  %a = fygraph.softmax %w {axis = 1 : i64} : tensor<5x7xf32>
  %sc = fygraph.mul %half, %t : (tensor<f32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %w2 = fygraph.where %m2, %ninf, %sc : (tensor<5x7xi1>, tensor<f32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %b = fygraph.softmax %w2 {axis = -1 : i64} : tensor<2x5x7xf32>
  return %a, %b : tensor<5x7xf32>, tensor<2x5x7xf32>
}

// -----

// Attention as torch 2.x's SDPA decomposition writes it: softmax(scores + C),
// C a constant of 0 (kept) and the float's lowest (dropped), then the NaN
// guard where(p == p, p, 0). Every row keeps a score: one masked_softmax
// with C < 0 as a bool constant, and the guard goes.
// CHECK-LABEL: func.func @additive_mask
// CHECK-SAME: (%[[S:.*]]: tensor<2x3x3xf32>)
// CHECK-NEXT: %[[M:.*]] = fygraph.constant dense<{{\[}}[false, true, true], [false, false, true], [true, false, false]]> : tensor<3x3xi1>
// CHECK-NEXT: %[[Y:.*]] = fygraph.masked_softmax %[[S]], %[[M]] {scale = 1.000000e+00 : f32}
// CHECK-NEXT: return %[[Y]]
func.func @additive_mask(%s: tensor<2x3x3xf32>) -> tensor<2x3x3xf32> {
  %c = fygraph.constant dense<[[0.0, -3.40282347E+38, -3.40282347E+38], [0.0, 0.0, -3.40282347E+38], [0xFF800000, 0.0, 0.0]]> : tensor<3x3xf32>
  %z = fygraph.constant dense<0.0> : tensor<f32>
  %a = fygraph.add %s, %c : (tensor<2x3x3xf32>, tensor<3x3xf32>) -> tensor<2x3x3xf32>
  %p = fygraph.softmax %a {axis = -1 : i64} : tensor<2x3x3xf32>
  %e = fygraph.equal %p, %p : (tensor<2x3x3xf32>, tensor<2x3x3xf32>) -> tensor<2x3x3xi1>
  %y = fygraph.where %e, %p, %z : (tensor<2x3x3xi1>, tensor<2x3x3xf32>, tensor<f32>) -> tensor<2x3x3xf32>
  return %y : tensor<2x3x3xf32>
}

// -----

// The same mask expanded over the batch (as Hugging Face writes it): one
// [1, R, D] block.
// CHECK-LABEL: func.func @additive_mask_per_batch
// CHECK-NEXT: %[[M:.*]] = fygraph.constant dense<{{\[}}{{\[}}[false, true], [false, false]]]> : tensor<1x2x2xi1>
// CHECK-NEXT: fygraph.masked_softmax %{{.*}}, %[[M]]
func.func @additive_mask_per_batch(%s: tensor<2x2x2xf32>) -> tensor<2x2x2xf32> {
  %c = fygraph.constant dense<[[[0.0, -3.40282347E+38], [0.0, 0.0]], [[0.0, -3.40282347E+38], [0.0, 0.0]]]> : tensor<2x2x2xf32>
  %a = fygraph.add %s, %c : (tensor<2x2x2xf32>, tensor<2x2x2xf32>) -> tensor<2x2x2xf32>
  %p = fygraph.softmax %a {axis = -1 : i64} : tensor<2x2x2xf32>
  return %p : tensor<2x2x2xf32>
}

// -----

// Left alone: a row that keeps nothing (softmax(x + lowest) is uniform
// there, a masked softmax NaN), a mask entry neither 0 nor low enough
// (-1e4), and a constant whose batches differ.
// CHECK-LABEL: func.func @not_additive_mask
// CHECK-NOT: fygraph.masked_softmax
// CHECK: return
func.func @not_additive_mask(%s: tensor<2x2x2xf32>) -> (tensor<2x2x2xf32>, tensor<2x2x2xf32>, tensor<2x2x2xf32>) {
  %full = fygraph.constant dense<[[0.0, -3.40282347E+38], [-3.40282347E+38, -3.40282347E+38]]> : tensor<2x2xf32>
  %soft = fygraph.constant dense<[[0.0, -1.0e4], [0.0, 0.0]]> : tensor<2x2xf32>
  %batch = fygraph.constant dense<[[[0.0, -3.40282347E+38], [0.0, 0.0]], [[0.0, 0.0], [0.0, 0.0]]]> : tensor<2x2x2xf32>
  %a = fygraph.add %s, %full : (tensor<2x2x2xf32>, tensor<2x2xf32>) -> tensor<2x2x2xf32>
  %p = fygraph.softmax %a {axis = -1 : i64} : tensor<2x2x2xf32>
  %b = fygraph.add %s, %soft : (tensor<2x2x2xf32>, tensor<2x2xf32>) -> tensor<2x2x2xf32>
  %q = fygraph.softmax %b {axis = -1 : i64} : tensor<2x2x2xf32>
  %c = fygraph.add %batch, %s : (tensor<2x2x2xf32>, tensor<2x2x2xf32>) -> tensor<2x2x2xf32>
  %r = fygraph.softmax %c {axis = -1 : i64} : tensor<2x2x2xf32>
  return %p, %q, %r : tensor<2x2x2xf32>, tensor<2x2x2xf32>, tensor<2x2x2xf32>
}

// -----

// Left alone: a mask varying along the batch, a softmax over another dim,
// a fill that is not -inf, and -inf where the mask is false.
// CHECK-LABEL: func.func @not_masked_softmax
// CHECK-NOT: fygraph.masked_softmax
// CHECK: return
func.func @not_masked_softmax(%s: tensor<2x5x7xf32>, %mb: tensor<2x1x7xi1>, %m: tensor<5x7xi1>)
    -> (tensor<2x5x7xf32>, tensor<2x5x7xf32>, tensor<2x5x7xf32>, tensor<2x5x7xf32>) {
  %ninf = fygraph.constant dense<0xFF800000> : tensor<f32>
  %big = fygraph.constant dense<-1.0e9> : tensor<f32>
  %w1 = fygraph.where %mb, %ninf, %s : (tensor<2x1x7xi1>, tensor<f32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %a = fygraph.softmax %w1 {axis = -1 : i64} : tensor<2x5x7xf32>
  %w2 = fygraph.where %m, %ninf, %s : (tensor<5x7xi1>, tensor<f32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %b = fygraph.softmax %w2 {axis = 1 : i64} : tensor<2x5x7xf32>
  %w3 = fygraph.where %m, %big, %s : (tensor<5x7xi1>, tensor<f32>, tensor<2x5x7xf32>) -> tensor<2x5x7xf32>
  %c = fygraph.softmax %w3 {axis = -1 : i64} : tensor<2x5x7xf32>
  %w4 = fygraph.where %m, %s, %ninf : (tensor<5x7xi1>, tensor<2x5x7xf32>, tensor<f32>) -> tensor<2x5x7xf32>
  %d = fygraph.softmax %w4 {axis = -1 : i64} : tensor<2x5x7xf32>
  return %a, %b, %c, %d : tensor<2x5x7xf32>, tensor<2x5x7xf32>, tensor<2x5x7xf32>, tensor<2x5x7xf32>
}

// -----

// A bias add read only by a GELU: bias_gelu, the sum never written.
// CHECK-LABEL: func.func @bias_gelu
// CHECK-SAME: (%[[X:.*]]: tensor<2x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.bias_gelu %[[X]], %[[B]] {approximate = "tanh"} : tensor<2x8xf32>, tensor<8xf32>
// CHECK-NEXT: return %[[G]]
func.func @bias_gelu(%x: tensor<2x8xf32>, %b: tensor<8xf32>) -> tensor<2x8xf32> {
  %a = fygraph.add %b, %x : (tensor<8xf32>, tensor<2x8xf32>) -> tensor<2x8xf32>
  %g = fygraph.gelu %a {approximate = "tanh"} : tensor<2x8xf32>
  return %g : tensor<2x8xf32>
}

// -----

// The bias add through a reshape that keeps the last dim (GPT-2's Conv1D
// writes [B*T, F] and reshapes to [B, T, F]): bias_gelu before the reshape.
// CHECK-LABEL: func.func @bias_gelu_reshaped
// CHECK-SAME: (%[[X:.*]]: tensor<6x8xf32>, %[[B:.*]]: tensor<8xf32>)
// CHECK-NEXT: %[[G:.*]] = fygraph.bias_gelu %[[X]], %[[B]] {approximate = "tanh"} : tensor<6x8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[R:.*]] = fygraph.reshape %[[G]] : tensor<6x8xf32> -> tensor<2x3x8xf32>
// CHECK-NEXT: return %[[R]]
func.func @bias_gelu_reshaped(%x: tensor<6x8xf32>, %b: tensor<8xf32>) -> tensor<2x3x8xf32> {
  %a = fygraph.add %x, %b : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  %r = fygraph.reshape %a : tensor<6x8xf32> -> tensor<2x3x8xf32>
  %g = fygraph.gelu %r {approximate = "tanh"} : tensor<2x3x8xf32>
  return %g : tensor<2x3x8xf32>
}

// -----

// A reshape that moves the last dim, or one read elsewhere: no bias_gelu.
// CHECK-LABEL: func.func @bias_gelu_reshaped_not
// CHECK-NOT: bias_gelu
func.func @bias_gelu_reshaped_not(%x: tensor<6x8xf32>, %b: tensor<8xf32>) -> (tensor<2x24xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>) {
  %a = fygraph.add %x, %b : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  %r = fygraph.reshape %a : tensor<6x8xf32> -> tensor<2x24xf32>
  %g = fygraph.gelu %r : tensor<2x24xf32>
  %a2 = fygraph.add %x, %b : (tensor<6x8xf32>, tensor<8xf32>) -> tensor<6x8xf32>
  %r2 = fygraph.reshape %a2 : tensor<6x8xf32> -> tensor<2x3x8xf32>
  %g2 = fygraph.gelu %r2 : tensor<2x3x8xf32>
  return %g, %g2, %r2 : tensor<2x24xf32>, tensor<2x3x8xf32>, tensor<2x3x8xf32>
}

// -----

// The sum read elsewhere too, or an add that broadcasts more than a bias:
// they stay as they are.
// CHECK-LABEL: func.func @bias_gelu_not
// CHECK: fygraph.add
// CHECK: fygraph.gelu
// CHECK: fygraph.add
// CHECK: fygraph.gelu
// CHECK-NOT: bias_gelu
func.func @bias_gelu_not(%x: tensor<2x8xf32>, %b: tensor<8xf32>, %c: tensor<2x1xf32>) -> (tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>) {
  %a = fygraph.add %x, %b : (tensor<2x8xf32>, tensor<8xf32>) -> tensor<2x8xf32>
  %g = fygraph.gelu %a : tensor<2x8xf32>
  %a2 = fygraph.add %x, %c : (tensor<2x8xf32>, tensor<2x1xf32>) -> tensor<2x8xf32>
  %g2 = fygraph.gelu %a2 : tensor<2x8xf32>
  return %g, %a, %g2 : tensor<2x8xf32>, tensor<2x8xf32>, tensor<2x8xf32>
}
