// RUN: fuyou-opt %s -split-input-file --fy-fuse-norm-grad-add | FileCheck %s

// A norm's input gradient read only by the add that sums it into the
// residual's gradient (either order), the residual's gradient made before
// it: the add goes into the norm's gradient as its addend.
// CHECK-LABEL: func.func @residual
// CHECK-SAME: (%[[DY:.*]]: tensor<4x8xf32>, %[[X:.*]]: tensor<4x8xf32>, %[[S:.*]]: tensor<8xf32>, %[[M:.*]]: tensor<4x1xf32>, %[[R:.*]]: tensor<4x1xf32>, %[[G:.*]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[LN:[^,]*]], %[[LS:[^,]*]], %[[LB:[^ ]*]] = fygraph.layer_norm_grad %[[DY]], %[[X]], %[[S]], %[[M]], %[[R]], %[[G]] {axis = 1 : i64}
// CHECK-NEXT: %[[RMS:[^,]*]], %[[RS:[^ ]*]] = fygraph.rms_norm_grad %[[DY]], %[[X]], %[[S]], %[[R]], %[[LN]] {axis = 1 : i64}
// CHECK-NEXT: return %[[RMS]], %[[LS]], %[[LB]], %[[RS]] :
func.func @residual(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %s: tensor<8xf32>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %dx:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %sum = fygraph.add %g, %dx#0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %ex:2 = fygraph.rms_norm_grad %dy, %x, %s, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>)
  %sum2 = fygraph.add %ex#0, %sum : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %sum2, %dx#1, %dx#2, %ex#1 : tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// An addend made after the norm's gradient: not fused (the gradient goes
// to 16 bits before the add there, and the fused op could not stand where
// it stands); nor is a sum of two norms' gradients whose other operand is
// made later, while the one made first is fused into the second.
// CHECK-LABEL: func.func @later_addend
// CHECK: fygraph.layer_norm_grad %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^ ]*}} {axis = 1 : i64}
// CHECK: fygraph.neg
// CHECK-NEXT: fygraph.add
// CHECK: %[[A:[^,]*]], {{.*}} = fygraph.layer_norm_grad %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^,]*}}, %{{[^ ]*}} {axis = 1 : i64}
// CHECK-NEXT: %[[B:[^,]*]], {{.*}} = fygraph.layer_norm_grad {{.*}}, %[[A]] {axis = 1 : i64}
// CHECK-NOT: fygraph.add
// CHECK: return
func.func @later_addend(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %s: tensor<8xf32>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %h: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) {
  %dx:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %g = fygraph.neg %h : tensor<4x8xf32>
  %sum = fygraph.add %dx#0, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %a:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %b:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %both = fygraph.add %b#0, %a#0 : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %sum, %dx#1, %both : tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>
}

// -----

// Not when the gradient is read elsewhere too (it is stored anyway), when
// the add broadcasts, when the addend is made after the norm's gradient,
// or when the norm's gradient has an addend already.
// CHECK-LABEL: func.func @not_fused
// CHECK-COUNT-4: fygraph.add
func.func @not_fused(%dy: tensor<4x8xf32>, %x: tensor<4x8xf32>, %s: tensor<8xf32>, %m: tensor<4x1xf32>, %r: tensor<4x1xf32>, %g: tensor<4x8xf32>, %b: tensor<2x4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>) {
  %a:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s1 = fygraph.add %a#0, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %c:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s2 = fygraph.add %c#0, %b : (tensor<4x8xf32>, tensor<2x4x8xf32>) -> tensor<2x4x8xf32>
  %e:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %late = fygraph.neg %e#1 : tensor<8xf32>
  %h = fygraph.neg %g : tensor<4x8xf32>
  %s3 = fygraph.add %e#0, %h : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  %f:3 = fygraph.layer_norm_grad %dy, %x, %s, %m, %r, %g {axis = 1 : i64} : (tensor<4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x1xf32>, tensor<4x1xf32>, tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<8xf32>, tensor<8xf32>)
  %s4 = fygraph.add %f#0, %g : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4x8xf32>
  return %s1, %a#0, %s2, %s3, %late, %s4 : tensor<4x8xf32>, tensor<4x8xf32>, tensor<2x4x8xf32>, tensor<4x8xf32>, tensor<8xf32>, tensor<4x8xf32>
}
