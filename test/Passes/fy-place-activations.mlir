// RUN: fuyou-opt %s --fy-place-activations=policy=host | FileCheck %s
// RUN: fuyou-opt %s --fy-place-activations | FileCheck %s --check-prefix=KEEP
// RUN: not fuyou-opt %s --fy-place-activations=policy=ssd 2>&1 | FileCheck %s --check-prefix=BAD

// %h is written in forward and read in backward (after the loss is written),
// also through %hv, a view made in forward: it goes to host memory after its
// last forward use (the matmul) and comes back before its first backward use,
// where the view is made again on the copy. %t is forward-only and %g is
// backward's own: neither moves.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[H:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "gelu" {{.*}} outs(%[[H]]
// CHECK-NEXT: %[[HV:.*]] = fysched.view %[[H]]
// CHECK-NEXT: %[[T:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "matmul" ins(%[[H]], {{.*}}) outs(%[[T]]
// CHECK-NEXT: %[[OUT:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// CHECK-NEXT: fysched.copy %[[H]], %[[OUT]] : <device, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// CHECK-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK-NEXT: fysched.launch "reduce_sum" ins(%[[T]] {{.*}} outs(%[[L]]
// CHECK-NEXT: %[[G:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: %[[IN:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.copy %[[OUT]], %[[IN]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// CHECK-NEXT: %[[HV2:.*]] = fysched.view %[[IN]] : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
// CHECK-NEXT: fysched.launch "unary_grad_gelu" ins(%[[IN]], %[[HV2]]
// CHECK-NOT: fysched.copy
// CHECK: return %[[L]]

// KEEP-NOT: fysched.copy
// BAD: fy-place-activations: policy must be keep or host, got 'ssd'

fygraph.param @w trainable : tensor<8x8xf32>

func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %w = fysched.get_param @w : <device, tensor<8x8xf32>>
  %h = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "gelu" ins(%x : !fysched.buffer<device, tensor<4x8xf32>>) outs(%h : !fysched.buffer<device, tensor<4x8xf32>>)
  %hv = fysched.view %h : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
  %t = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%h, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%t : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, false]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%t : !fysched.buffer<device, tensor<4x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %g = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%h, %hv : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<32xf32>>) outs(%g : !fysched.buffer<device, tensor<4x8xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
