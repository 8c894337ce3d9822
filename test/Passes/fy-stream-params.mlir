// RUN: fuyou-opt %s --fy-stream-params=policy=stream | FileCheck %s
// RUN: fuyou-opt %s --fy-stream-params | FileCheck %s --check-prefix=KEEP
// RUN: not fuyou-opt %s --fy-stream-params=policy=ssd 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: fuyou-opt %s --fy-stream-params="policy=stream ahead=1" | FileCheck %s --check-prefix=AHEAD
// RUN: fuyou-opt %s --fy-stream-params="policy=stream ahead=5" | FileCheck %s --check-prefix=FLOOR
// RUN: not fuyou-opt %s --fy-stream-params="policy=stream ahead=-1" 2>&1 | FileCheck %s --check-prefix=NEG

// @w is read in forward (directly and through %wv, a view made in forward)
// and in backward (after the loss is written), through %wv again: its host
// master is read where its first copy is issued, copied to the device right
// before its first forward use and again right before its first backward
// use, where the view is made again on the second copy. @b is read in
// forward only, after its group's group_wait: one copy.
// CHECK: module attributes {fysched.streamed_params}
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: %[[T:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: %[[MW:.*]] = fysched.get_param @w : <host, tensor<8x8xf32>>
// CHECK-NEXT: %[[W1:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// CHECK-NEXT: fysched.copy %[[MW]], %[[W1]] : <host, tensor<8x8xf32>>, <device, tensor<8x8xf32>>
// CHECK-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[W1]] {{.*}} outs(%[[T]]
// CHECK-NEXT: %[[WV:.*]] = fysched.view %[[W1]]
// CHECK-NEXT: %[[U:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.group_wait @g0
// CHECK-NEXT: %[[MB:.*]] = fysched.get_param @b : <host, tensor<8xf32>>
// CHECK-NEXT: %[[B1:.*]] = fysched.alloc : <device, tensor<8xf32>>
// CHECK-NEXT: fysched.copy %[[MB]], %[[B1]]
// CHECK-NEXT: fysched.launch "add" ins(%[[T]], %[[WV]], %[[B1]]
// CHECK-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK-NEXT: fysched.launch "reduce_sum" ins(%[[U]] {{.*}} outs(%[[L]]
// CHECK-NEXT: %[[G:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: %[[W2:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// CHECK-NEXT: fysched.copy %[[MW]], %[[W2]] : <host, tensor<8x8xf32>>, <device, tensor<8x8xf32>>
// CHECK-NEXT: %[[WV2:.*]] = fysched.view %[[W2]] : <device, tensor<8x8xf32>> -> <device, tensor<64xf32>>
// CHECK-NEXT: fysched.launch "mul" ins(%[[T]], %[[WV2]]
// CHECK-NOT: fysched.copy
// CHECK: return %[[L]]

// ahead=1: @w's forward copy has no launch before its use and goes first,
// with its master read; @w's backward one goes before reduce_sum (its view
// again right after it). @b's stays right after its group's group_wait: its
// master is final only once the update of the step before is done.
// AHEAD-LABEL: func.func @train_step
// AHEAD-NEXT: %[[MW:.*]] = fysched.get_param @w : <host, tensor<8x8xf32>>
// AHEAD-NEXT: %[[W1:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// AHEAD-NEXT: fysched.copy %[[MW]], %[[W1]]
// AHEAD-NEXT: %[[T:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// AHEAD-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[W1]]
// AHEAD-NEXT: %[[WV:.*]] = fysched.view %[[W1]]
// AHEAD-NEXT: %[[U:.*]] = fysched.alloc
// AHEAD-NEXT: fysched.group_wait @g0
// AHEAD-NEXT: %[[MB:.*]] = fysched.get_param @b : <host, tensor<8xf32>>
// AHEAD-NEXT: %[[B1:.*]] = fysched.alloc : <device, tensor<8xf32>>
// AHEAD-NEXT: fysched.copy %[[MB]], %[[B1]]
// AHEAD-NEXT: fysched.launch "add" ins(%[[T]], %[[WV]], %[[B1]]
// AHEAD-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// AHEAD-NEXT: %[[W2:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// AHEAD-NEXT: fysched.copy %[[MW]], %[[W2]]
// AHEAD-NEXT: %[[WV2:.*]] = fysched.view %[[W2]]
// AHEAD-NEXT: fysched.launch "reduce_sum" ins(%[[U]]
// AHEAD-NEXT: %[[G:.*]] = fysched.alloc
// AHEAD-NEXT: fysched.launch "mul" ins(%[[T]], %[[WV2]]

// ahead=5, more launches than there are: @w's forward copy goes first, @b's
// stops at the group_wait, and @w's backward copy stops after its last
// forward use (the add reads it through %wv), so the two device copies of
// @w never overlap.
// FLOOR-LABEL: func.func @train_step
// FLOOR-NEXT: %[[MW:.*]] = fysched.get_param @w
// FLOOR-NEXT: fysched.alloc
// FLOOR-NEXT: fysched.copy %[[MW]]
// FLOOR: fysched.group_wait @g0
// FLOOR-NEXT: %[[MB:.*]] = fysched.get_param @b
// FLOOR-NEXT: fysched.alloc
// FLOOR-NEXT: fysched.copy %[[MB]]
// FLOOR-NEXT: fysched.launch "add"
// FLOOR-NEXT: %[[W2:.*]] = fysched.alloc : <device, tensor<8x8xf32>>
// FLOOR-NEXT: fysched.copy %[[MW]], %[[W2]]

// NEG: fy-stream-params: ahead must be at least 0, got -1

// KEEP-NOT: fysched.copy
// KEEP-NOT: <host
// BAD: fy-stream-params: policy must be keep or stream, got 'ssd'

fygraph.param @w trainable : tensor<8x8xf32>
fygraph.param @b trainable : tensor<8xf32>
fysched.group @g0 [@b] bytes 32

func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %t = fysched.alloc : <device, tensor<4x8xf32>>
  %w = fysched.get_param @w : <device, tensor<8x8xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%t : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, false]}
  %wv = fysched.view %w : <device, tensor<8x8xf32>> -> <device, tensor<64xf32>>
  %u = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.group_wait @g0
  %b = fysched.get_param @b : <device, tensor<8xf32>>
  fysched.launch "add" ins(%t, %wv, %b : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<64xf32>>, !fysched.buffer<device, tensor<8xf32>>) outs(%u : !fysched.buffer<device, tensor<4x8xf32>>)
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%u : !fysched.buffer<device, tensor<4x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %g = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "mul" ins(%t, %wv : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<64xf32>>) outs(%g : !fysched.buffer<device, tensor<4x8xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
