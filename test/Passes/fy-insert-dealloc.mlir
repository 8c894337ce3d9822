// RUN: fuyou-opt %s -split-input-file --fy-insert-dealloc | FileCheck %s

// Each alloc and constant dies right after its last use; a read through a
// view keeps the viewed buffer alive; parameters and arguments are never
// freed; the returned buffer is left to the caller.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:.*]]: !fysched.buffer<device, tensor<4x8xf32>>)
// CHECK: %[[W:.*]] = fysched.get_param @w
// CHECK: %[[C:.*]] = fysched.constant
// CHECK: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "add" ins(%[[X]], %[[W]] :
// CHECK-NEXT: %[[B:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "mul" ins(%[[A]], %[[C]] :
// CHECK-DAG: fysched.dealloc %[[C]] : <device, tensor<f32>>
// CHECK-DAG: fysched.dealloc %[[A]] : <device, tensor<4x8xf32>>
// CHECK: %[[V:.*]] = fysched.view %[[B]]
// CHECK-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK-NEXT: %[[LK:.*]] = fysched.view %[[L]]
// CHECK-NEXT: fysched.launch "reduce_mean" ins(%[[V]] : {{.*}}) outs(%[[LK]] :
// CHECK-NEXT: %[[G:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "exp" ins(%[[B]] : {{.*}}) outs(%[[G]] :
// CHECK-NEXT: fysched.dealloc %[[B]] : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.cpu_adamw @w, %[[G]]
// CHECK-NEXT: fysched.dealloc %[[G]] : <device, tensor<4x8xf32>>
// CHECK-NEXT: return %[[L]]
// CHECK-NOT: fysched.dealloc
fygraph.param @w trainable : tensor<4x8xf32>
func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<4x8xf32>>
  %c = fysched.constant dense<2.0> : tensor<f32> : !fysched.buffer<device, tensor<f32>>
  %a = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "add" ins(%x, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%a : !fysched.buffer<device, tensor<4x8xf32>>)
  %b = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "mul" ins(%a, %c : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<f32>>) outs(%b : !fysched.buffer<device, tensor<4x8xf32>>)
  %v = fysched.view %b : !fysched.buffer<device, tensor<4x8xf32>> -> !fysched.buffer<device, tensor<32xf32>>
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  %lk = fysched.view %l : !fysched.buffer<device, tensor<f32>> -> !fysched.buffer<device, tensor<1xf32>>
  fysched.launch "reduce_mean" ins(%v : !fysched.buffer<device, tensor<32xf32>>) outs(%lk : !fysched.buffer<device, tensor<1xf32>>)
  %g = fysched.alloc : !fysched.buffer<device, tensor<4x8xf32>>
  fysched.launch "exp" ins(%b : !fysched.buffer<device, tensor<4x8xf32>>) outs(%g : !fysched.buffer<device, tensor<4x8xf32>>)
  fysched.cpu_adamw @w, %g : !fysched.buffer<device, tensor<4x8xf32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// The last use through a view of a view counts; returning a view of a
// buffer keeps the buffer; a buffer nobody uses dies at once.
// CHECK-LABEL: func.func @views
// CHECK: %[[A:.*]] = fysched.alloc : <device, tensor<2x6xf32>>
// CHECK-NEXT: fysched.launch "neg"
// CHECK-NEXT: %[[U:.*]] = fysched.alloc : <host, tensor<3xf32>>
// CHECK-NEXT: fysched.dealloc %[[U]] : <host, tensor<3xf32>>
// CHECK-NEXT: %[[V1:.*]] = fysched.view %[[A]]
// CHECK-NEXT: %[[V2:.*]] = fysched.view %[[V1]]
// CHECK-NEXT: %[[R:.*]] = fysched.alloc : <device, tensor<12xf32>>
// CHECK-NEXT: fysched.launch "exp" ins(%[[V2]] : {{.*}}) outs(%[[R]] :
// CHECK-NEXT: fysched.dealloc %[[A]] : <device, tensor<2x6xf32>>
// CHECK-NEXT: %[[RV:.*]] = fysched.view %[[R]]
// CHECK-NEXT: return %[[RV]]
// CHECK-NOT: fysched.dealloc
func.func @views(%x: !fysched.buffer<device, tensor<2x6xf32>>) -> !fysched.buffer<device, tensor<3x4xf32>> {
  %a = fysched.alloc : !fysched.buffer<device, tensor<2x6xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<2x6xf32>>) outs(%a : !fysched.buffer<device, tensor<2x6xf32>>)
  %u = fysched.alloc : !fysched.buffer<host, tensor<3xf32>>
  %v1 = fysched.view %a : !fysched.buffer<device, tensor<2x6xf32>> -> !fysched.buffer<device, tensor<12xf32>>
  %v2 = fysched.view %v1 : !fysched.buffer<device, tensor<12xf32>> -> !fysched.buffer<device, tensor<12xf32>>
  %r = fysched.alloc : !fysched.buffer<device, tensor<12xf32>>
  fysched.launch "exp" ins(%v2 : !fysched.buffer<device, tensor<12xf32>>) outs(%r : !fysched.buffer<device, tensor<12xf32>>)
  %rv = fysched.view %r : !fysched.buffer<device, tensor<12xf32>> -> !fysched.buffer<device, tensor<3x4xf32>>
  return %rv : !fysched.buffer<device, tensor<3x4xf32>>
}
