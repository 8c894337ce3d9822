// RUN: fuyou-opt %s -split-input-file --fy-half-activations | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-half-activations=dtype=fp16 | FileCheck %s --check-prefix=FP16
// RUN: not fuyou-opt %s -split-input-file --fy-half-activations=dtype=int8 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: fuyou-opt %s -split-input-file --fy-half-activations=native=matmul | FileCheck %s --check-prefix=NATIVE
// RUN: fuyou-opt %s -split-input-file "--fy-half-activations=product-copies=true native=matmul" | FileCheck %s --check-prefix=COPY
// RUN: fuyou-opt %s -split-input-file "--fy-half-activations=product-copies=true native=matmul,exp" | FileCheck %s --check-prefix=NARROW
// RUN: fuyou-opt %s -split-input-file "--fy-half-activations=native=matmul,neg,exp,add,linear_cross_entropy" | FileCheck %s --check-prefix=LCE16

// Activations (through views too) and their gradients that live while other
// launches run become bf16; the layer norm's statistics, the loss, a returned
// buffer, what the optimizer takes, the parts of a gradient summed for it, and
// scalars stay f32. Each kernel reads an f32 copy of a 16-bit operand, made
// just before it (one for an operand read twice), and writes an f32 result
// narrowed just after.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// CHECK-NEXT: %[[HW:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "matmul" ins({{.*}}) outs(%[[HW]] :
// CHECK-NEXT: fysched.launch "cast" ins(%[[HW]] : {{.*}}) outs(%[[H]] :
// CHECK-NEXT: %[[Y:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// CHECK-NEXT: %[[MEAN:.*]] = fysched.alloc : <device, tensor<4xf32>>
// CHECK-NEXT: %[[INV:.*]] = fysched.alloc : <device, tensor<4xf32>>
// CHECK-NEXT: %[[HX:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "cast" ins(%[[H]] : {{.*}}) outs(%[[HX]] :
// CHECK-NEXT: %[[YW:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "layer_norm_nobias" ins(%[[HX]], {{.*}}) outs(%[[YW]], %[[MEAN]], %[[INV]] :
// CHECK-NEXT: fysched.launch "cast" ins(%[[YW]] : {{.*}}) outs(%[[Y]] :
// CHECK: fysched.view %[[Y]] : <device, tensor<4x8xbf16>> -> <device, tensor<32xbf16>>
// CHECK: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK: %[[DY:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// CHECK: %[[G1:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// CHECK: fysched.launch "matmul" {{.*}} outs(%[[G1]] :
// CHECK-NEXT: %[[R:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK: %[[G2:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// CHECK-NEXT: %[[DW:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "cast" ins(%[[DY]] : {{.*}}) outs(%[[DW]] :
// CHECK-NEXT: fysched.launch "matmul" ins(%[[DW]], %[[DW]] : {{.*}}) outs(%[[G2]] :
// CHECK: %[[G:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// CHECK-NEXT: fysched.launch "add" ins(%[[G1]], %[[G2]]
// CHECK-NEXT: fysched.cpu_adamw @w, %[[G]]
// CHECK: return %[[L]], %[[R]]
// FP16: fysched.alloc : <device, tensor<4x8xf16>>
// A kernel the target lists as taking 16 bits itself gets no casts.
// NATIVE-LABEL: func.func @train_step
// NATIVE: %[[H:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// NATIVE-NEXT: fysched.launch "matmul" ins({{.*}}) outs(%[[H]] :
// BAD: fy-half-activations: dtype must be bf16 or fp16, got 'int8'
fygraph.param @w trainable : tensor<8x8xf32>
fygraph.param @s trainable : tensor<8xf32>
func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> (!fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<4x8xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<8x8xf32>>
  %s = fysched.get_param @s : !fysched.buffer<device, tensor<8xf32>>
  %h = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%h : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, false]}
  %y = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  %mean = fysched.alloc : !fysched.buffer<device, tensor<4xf32>>
  %inv = fysched.alloc : !fysched.buffer<device, tensor<4xf32>>
  fysched.launch "layer_norm_nobias" ins(%h, %s : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>) outs(%y, %mean, %inv : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<device, tensor<4xf32>>) {args = [1 : i64, 9.99999974E-6 : f32]}
  %v = fysched.view %y : !fysched.buffer<device, tensor<4x8xf32>> -> !fysched.buffer<device, tensor<32xf32>>
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  %lk = fysched.view %l : !fysched.buffer<device, tensor<f32>> -> !fysched.buffer<device, tensor<1xf32>>
  fysched.launch "reduce_mean" ins(%v : !fysched.buffer<device, tensor<32xf32>>) outs(%lk : !fysched.buffer<device, tensor<1xf32>>)
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%h : !fysched.buffer<device, tensor<4x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>)
  %g1 = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g1 : !fysched.buffer<device, tensor<8x8xf32>>) {args = [true, false]}
  %r = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%y : !fysched.buffer<device, tensor<4x8xf32>>) outs(%r : !fysched.buffer<device, tensor<4x8xf32>>)
  %g2 = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%dy, %dy : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g2 : !fysched.buffer<device, tensor<8x8xf32>>) {args = [true, false]}
  %g = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "add" ins(%g1, %g2 : !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%g : !fysched.buffer<device, tensor<8x8xf32>>)
  fysched.cpu_adamw @w, %g : !fysched.buffer<device, tensor<8x8xf32>>
  return %l, %r : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<4x8xf32>>
}

// -----

// A kernel that only moves elements takes 16-bit operands as they are when
// all its float operands share the dtype; from an f32 weight it writes an
// f32 copy narrowed after.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// CHECK: %[[WT:.*]] = fysched.alloc : <device, tensor<8x8xbf16>>
// CHECK-NEXT: %[[WTW:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// CHECK-NEXT: fysched.launch "transpose" ins(%{{.*}} : {{.*}}) outs(%[[WTW]] :
// CHECK-NEXT: fysched.launch "cast" ins(%[[WTW]] : {{.*}}) outs(%[[WT]] :
// CHECK-NEXT: %[[T:.*]] = fysched.alloc : <device, tensor<8x4xbf16>>
// CHECK-NEXT: fysched.launch "transpose" ins(%[[H]] : {{.*}}) outs(%[[T]] :
fygraph.param @w trainable : tensor<8x8xf32>
func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> (!fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<4x8xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<8x8xf32>>
  %h = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%h : !fysched.buffer<device, tensor<4x8xf32>>)
  %wt = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "transpose" ins(%w : !fysched.buffer<device, tensor<8x8xf32>>) outs(%wt : !fysched.buffer<device, tensor<8x8xf32>>) {args = [array<i64: 1, 0>]}
  %t = fysched.alloc : !fysched.buffer<device, tensor<8x4xf32>>
  fysched.launch "transpose" ins(%h : !fysched.buffer<device, tensor<4x8xf32>>) outs(%t : !fysched.buffer<device, tensor<8x4xf32>>) {args = [array<i64: 1, 0>]}
  %z = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%z : !fysched.buffer<device, tensor<4x8xf32>>)
  %p = fysched.alloc : !fysched.buffer<device, tensor<8x4xf32>>
  fysched.launch "matmul" ins(%wt, %t : !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%p : !fysched.buffer<device, tensor<8x4xf32>>) {args = [false, false]}
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  %lk = fysched.view %l : !fysched.buffer<device, tensor<f32>> -> !fysched.buffer<device, tensor<1x1xf32>>
  fysched.launch "reduce_sum" ins(%p : !fysched.buffer<device, tensor<8x4xf32>>) outs(%lk : !fysched.buffer<device, tensor<1x1xf32>>)
  return %l, %z : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<4x8xf32>>
}

// -----

// An activation's gradient handed straight from its kernel to the bias's
// reduce_sum and two products stays f32; with product-copies the products
// read one bf16 copy (through the views they read), which the reduce_sum
// makes as it reads the f32 buffer (reduce_sum_cast). A buffer one product
// reads gets none.
// CHECK-LABEL: func.func @copies
// CHECK-NOT: bf16
// CHECK: return
// COPY-LABEL: func.func @copies
// COPY: %[[DY:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// COPY-NEXT: fysched.launch "exp" ins(%{{.*}} : {{.*}}) outs(%[[DY]] :
// COPY: %[[DB:.*]] = fysched.alloc : <device, tensor<1x8xf32>>
// COPY-NEXT: %[[C:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// COPY-NEXT: fysched.launch "reduce_sum_cast" ins(%[[DY]] : !fysched.buffer<device, tensor<4x8xf32>>) outs(%[[DB]], %[[C]] :
// COPY-NEXT: %[[G:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// COPY-NEXT: %[[CV:.*]] = fysched.view %[[C]] : <device, tensor<4x8xbf16>> -> <device, tensor<1x4x8xbf16>>
// COPY-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[C]] : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xbf16>>) outs(%[[G]] :
// COPY: fysched.launch "matmul" ins(%[[CV]], %{{.*}} : !fysched.buffer<device, tensor<1x4x8xbf16>>,
// COPY: %[[ONE:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// COPY-NOT: bf16
// COPY: fysched.launch "matmul" ins(%[[ONE]], %{{.*}} : !fysched.buffer<device, tensor<4x8xf32>>,
// COPY-NOT: bf16
// COPY: return
fygraph.param @w trainable : tensor<8x8xf32>
func.func @copies(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> (!fysched.buffer<device, tensor<1x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<1x4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<8x8xf32>>
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>)
  %dyv = fysched.view %dy : !fysched.buffer<device, tensor<4x8xf32>> -> !fysched.buffer<device, tensor<1x4x8xf32>>
  %db = fysched.alloc : !fysched.buffer<device, tensor<1x8xf32>>
  fysched.launch "reduce_sum" ins(%dy : !fysched.buffer<device, tensor<4x8xf32>>) outs(%db : !fysched.buffer<device, tensor<1x8xf32>>)
  %g = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<8x8xf32>>) {args = [true, false]}
  %dx = fysched.alloc : !fysched.buffer<device, tensor<1x4x8xf32>>
  fysched.launch "matmul" ins(%dyv, %w : !fysched.buffer<device, tensor<1x4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%dx : !fysched.buffer<device, tensor<1x4x8xf32>>) {args = [false, true]}
  %one = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%one : !fysched.buffer<device, tensor<4x8xf32>>)
  %p = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%one, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%p : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, false]}
  return %db, %g, %dx, %p : !fysched.buffer<device, tensor<1x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<1x4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>
}

// -----

// Without a reduce_sum before them (no bias; or its sum after them), a
// cast before the first product makes the copy.
// COPY-LABEL: func.func @copies_cast
// COPY: %[[DY:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// COPY-NEXT: fysched.launch "exp"
// COPY: %[[G:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// COPY-NEXT: %[[C:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// COPY-NEXT: fysched.launch "cast" ins(%[[DY]] : !fysched.buffer<device, tensor<4x8xf32>>) outs(%[[C]] :
// COPY-NEXT: %[[CV:.*]] = fysched.view %[[C]] : <device, tensor<4x8xbf16>> -> <device, tensor<1x4x8xbf16>>
// COPY-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[C]] :
// COPY: fysched.launch "matmul" ins(%[[CV]], %{{.*}} :
// COPY: fysched.launch "reduce_sum" ins(%[[DY]] :
fygraph.param @w trainable : tensor<8x8xf32>
func.func @copies_cast(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> (!fysched.buffer<device, tensor<1x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<1x4x8xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<8x8xf32>>
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>)
  %dyv = fysched.view %dy : !fysched.buffer<device, tensor<4x8xf32>> -> !fysched.buffer<device, tensor<1x4x8xf32>>
  %g = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<8x8xf32>>) {args = [true, false]}
  %dx = fysched.alloc : !fysched.buffer<device, tensor<1x4x8xf32>>
  fysched.launch "matmul" ins(%dyv, %w : !fysched.buffer<device, tensor<1x4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%dx : !fysched.buffer<device, tensor<1x4x8xf32>>) {args = [false, true]}
  %db = fysched.alloc : !fysched.buffer<device, tensor<1x8xf32>>
  fysched.launch "reduce_sum" ins(%dy : !fysched.buffer<device, tensor<4x8xf32>>) outs(%db : !fysched.buffer<device, tensor<1x8xf32>>)
  return %db, %g, %dx : !fysched.buffer<device, tensor<1x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<1x4x8xf32>>
}

// -----

// Products whose fp32 operands' 16-bit copies exceed the CUDA matmul's
// scratch (128 MiB) run in blocks: a copy would change their path, so none.
// COPY-LABEL: func.func @too_large
// COPY-NOT: bf16
// COPY: return
fygraph.param @w trainable : tensor<16x8192xf32>
func.func @too_large(%x: !fysched.buffer<device, tensor<8192x16xf32>>) -> (!fysched.buffer<device, tensor<8192x16xf32>>, !fysched.buffer<device, tensor<16x8192xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<16x8192xf32>>
  %dy = fysched.alloc : !fysched.buffer<device, tensor<8192x8192xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<8192x16xf32>>, !fysched.buffer<device, tensor<16x8192xf32>>) outs(%dy : !fysched.buffer<device, tensor<8192x8192xf32>>) {args = [false, false]}
  %dx = fysched.alloc : !fysched.buffer<device, tensor<8192x16xf32>>
  fysched.launch "matmul" ins(%dy, %w : !fysched.buffer<device, tensor<8192x8192xf32>>, !fysched.buffer<device, tensor<16x8192xf32>>) outs(%dx : !fysched.buffer<device, tensor<8192x16xf32>>) {args = [false, true]}
  %dw = fysched.alloc : !fysched.buffer<device, tensor<16x8192xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<8192x16xf32>>, !fysched.buffer<device, tensor<8192x8192xf32>>) outs(%dw : !fysched.buffer<device, tensor<16x8192xf32>>) {args = [true, false]}
  return %dx, %dw : !fysched.buffer<device, tensor<8192x16xf32>>, !fysched.buffer<device, tensor<16x8192xf32>>
}

// -----

// The residual's gradient summed by a norm's gradient (layer_norm_grad_add)
// is one of a parameter gradient's fp32 parts, as the add's inputs were:
// kept f32 when the sum is (returned here), not through the scale's
// gradient (@scale_only), and the norm's dy is not such a part.
// CHECK-LABEL: func.func @residual_sum
// CHECK: %[[G:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK: %[[DY:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// CHECK: fysched.launch "layer_norm_grad_add" ins(%{{.*}}, {{.*}}, %[[G]] :
// CHECK-LABEL: func.func @scale_only
// CHECK: %[[G:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
fygraph.param @s trainable : tensor<8xf32>
func.func @residual_sum(%x: !fysched.buffer<device, tensor<4x8xf32>>, %m: !fysched.buffer<device, tensor<4x1xf32>>, %r: !fysched.buffer<device, tensor<4x1xf32>>) -> (!fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>) {
  %s = fysched.get_param @s : !fysched.buffer<device, tensor<8xf32>>
  %g = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<4x8xf32>>)
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>)
  %z = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "tanh" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%z : !fysched.buffer<device, tensor<4x8xf32>>)
  %dx = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  %ds = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  %db = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.launch "layer_norm_grad_add" ins(%dy, %x, %s, %m, %r, %g : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<4x1xf32>>, !fysched.buffer<device, tensor<4x1xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%dx, %ds, %db : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<8xf32>>) {args = [1 : i64]}
  return %dx, %ds : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>
}
func.func @scale_only(%x: !fysched.buffer<device, tensor<4x8xf32>>, %m: !fysched.buffer<device, tensor<4x1xf32>>, %r: !fysched.buffer<device, tensor<4x1xf32>>) -> (!fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) {
  %s = fysched.get_param @s : !fysched.buffer<device, tensor<8xf32>>
  %g = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<4x8xf32>>)
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>)
  %dx = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  %ds = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  %db = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.launch "layer_norm_grad_add" ins(%dy, %x, %s, %m, %r, %g : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<4x1xf32>>, !fysched.buffer<device, tensor<4x1xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%dx, %ds, %db : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<8xf32>>) {args = [1 : i64]}
  %t = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "neg" ins(%dx : !fysched.buffer<device, tensor<4x8xf32>>) outs(%t : !fysched.buffer<device, tensor<4x8xf32>>)
  return %ds, %t : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>
}

// -----

// The loss of a Linear's logits keeps its block of logits f32, a kernel's
// scratch, and reads an f32 copy of a 16-bit x; where the target's kernel
// takes them in 16 bits (native), x reaches it as it is and the block is
// bf16, as autocast's logits, with twice the rows in the same bytes
// (abi/sizes.h: 256 f32 rows of 131072, 512 bf16 ones).
// CHECK-LABEL: func.func @linear_loss
// CHECK: %[[B:.*]] = fysched.alloc : <device, tensor<256x131072xf32>>
// CHECK: fysched.launch "cast" ins(%{{.*}} : !fysched.buffer<device, tensor<1024x4xbf16>>) outs(%[[X:.*]] :
// CHECK-NEXT: fysched.launch "linear_cross_entropy" ins(%[[X]], {{.*}}) outs({{.*}}, %[[B]] :
// LCE16-LABEL: func.func @linear_loss
// LCE16-NOT: "cast"
// LCE16: %[[B:.*]] = fysched.alloc : <device, tensor<512x131072xbf16>>
// LCE16-NEXT: fysched.launch "linear_cross_entropy" ins(%{{.*}}, %{{.*}}, %{{.*}} : !fysched.buffer<device, tensor<1024x4xbf16>>, !fysched.buffer<device, tensor<131072x4xf32>>, !fysched.buffer<device, tensor<1024xi64>>) outs(%{{.*}}, %{{.*}}, %{{.*}}, %[[B]] : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<1024x4xf32>>, !fysched.buffer<device, tensor<131072x4xf32>>, !fysched.buffer<device, tensor<512x131072xbf16>>)
// LCE16-NOT: "cast"
// LCE16: return
fygraph.param @w trainable : tensor<131072x4xf32>
func.func @linear_loss(%a: !fysched.buffer<device, tensor<1024x4xf32>>, %lbl: !fysched.buffer<device, tensor<1024xi64>>) -> (!fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<131072x4xf32>>, !fysched.buffer<device, tensor<1024x4xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<131072x4xf32>>
  %x = fysched.alloc : !fysched.buffer<device, tensor<1024x4xf32>>
  fysched.launch "neg" ins(%a : !fysched.buffer<device, tensor<1024x4xf32>>) outs(%x : !fysched.buffer<device, tensor<1024x4xf32>>)
  %y = fysched.alloc : !fysched.buffer<device, tensor<1024x4xf32>>
  fysched.launch "exp" ins(%a : !fysched.buffer<device, tensor<1024x4xf32>>) outs(%y : !fysched.buffer<device, tensor<1024x4xf32>>)
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  %dx = fysched.alloc : !fysched.buffer<device, tensor<1024x4xf32>>
  %dw = fysched.alloc : !fysched.buffer<device, tensor<131072x4xf32>>
  %blk = fysched.alloc : !fysched.buffer<device, tensor<256x131072xf32>>
  fysched.launch "linear_cross_entropy" ins(%x, %w, %lbl : !fysched.buffer<device, tensor<1024x4xf32>>, !fysched.buffer<device, tensor<131072x4xf32>>, !fysched.buffer<device, tensor<1024xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<1024x4xf32>>, !fysched.buffer<device, tensor<131072x4xf32>>, !fysched.buffer<device, tensor<256x131072xf32>>) {args = [-100 : i64, true, true]}
  %z = fysched.alloc : !fysched.buffer<device, tensor<1024x4xf32>>
  fysched.launch "add" ins(%dx, %y : !fysched.buffer<device, tensor<1024x4xf32>>, !fysched.buffer<device, tensor<1024x4xf32>>) outs(%z : !fysched.buffer<device, tensor<1024x4xf32>>)
  return %l, %dw, %z : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<131072x4xf32>>, !fysched.buffer<device, tensor<1024x4xf32>>
}

// -----

// Read by the products alone and written by a kernel that stores 16 bits
// itself (`exp`, native in the NARROW run): the buffer is bf16 from its
// writer on, no copy. Not so where the writer is a product (@product_writer:
// its algorithm may change with its result's format) or is not native (the
// COPY run: a cast makes the copy).
// NARROW-LABEL: func.func @narrowed
// NARROW-NOT: "cast"
// NARROW: %[[DY:.*]] = fysched.alloc : <device, tensor<4x8xbf16>>
// NARROW-NEXT: fysched.launch "exp" ins(%arg0 : !fysched.buffer<device, tensor<4x8xf32>>) outs(%[[DY]] : !fysched.buffer<device, tensor<4x8xbf16>>)
// NARROW: fysched.launch "matmul" ins(%arg0, %[[DY]] :
// NARROW: fysched.launch "matmul" ins(%[[DY]], %{{.*}} :
// NARROW-NOT: "cast"
// NARROW-LABEL: func.func @product_writer
// NARROW: fysched.launch "cast"
// COPY-LABEL: func.func @narrowed
// COPY: fysched.launch "cast"
fygraph.param @w trainable : tensor<8x8xf32>
func.func @narrowed(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> (!fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<8x8xf32>>
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>)
  %g = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<8x8xf32>>) {args = [true, false]}
  %dx = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%dy, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%dx : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  return %g, %dx : !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>
}
func.func @product_writer(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> (!fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<8x8xf32>>
  %dy = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%dy : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, false]}
  %g = fysched.alloc : !fysched.buffer<device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<8x8xf32>>) {args = [true, false]}
  %dx = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%dy, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%dx : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  return %g, %dx : !fysched.buffer<device, tensor<8x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>
}
