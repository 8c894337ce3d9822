// RUN: fuyou-opt %s --fy-async-copies=window=2 | FileCheck %s
// RUN: fuyou-opt %s --fy-async-copies=window=0 | FileCheck %s --check-prefix=ZERO
// RUN: fuyou-opt %s --fy-async-copies | FileCheck %s --check-prefix=WIDE
// RUN: not fuyou-opt %s --fy-async-copies=window=-1 2>&1 | FileCheck %s --check-prefix=NEG

fygraph.param @w trainable : tensor<8xf32>
fygraph.param @u trainable : tensor<8xf32>

// CHECK-LABEL: func.func @train_step
func.func @train_step(%x: !fysched.buffer<device, tensor<8xf32>>) -> !fysched.buffer<device, tensor<8xf32>> {
  // A streamed weight: the wait goes right before its first reader, the
  // launches between run while it is copied, more than the window (the
  // master is not freed, so nothing is held longer).
  // CHECK: %[[MW:.*]] = fysched.get_param @w : <host, tensor<8xf32>>
  // CHECK-NEXT: %[[W:.*]] = fysched.alloc
  // CHECK-NEXT: %[[TW:.*]] = fysched.copy %[[MW]], %[[W]] : <host, tensor<8xf32>>, <device, tensor<8xf32>> -> !fysched.token
  // CHECK-NEXT: %[[A:.*]] = fysched.alloc
  // CHECK-NEXT: fysched.launch "exp" ins(%{{.*}}) outs(%[[A]]
  // CHECK-NEXT: fysched.launch "sqrt" ins(%{{.*}}) outs(%[[A]]
  // CHECK-NEXT: fysched.launch "exp" ins(%{{.*}}) outs(%[[A]]
  // CHECK-NEXT: %[[B:.*]] = fysched.alloc
  // CHECK-NEXT: fysched.wait %[[TW]]
  // CHECK-NEXT: fysched.launch "mul" ins(%[[A]], %[[W]]
  %mw = fysched.get_param @w : !fysched.buffer<host, tensor<8xf32>>
  %w = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.copy %mw, %w : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<device, tensor<8xf32>>
  %a = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%a : !fysched.buffer<device, tensor<8xf32>>)
  fysched.launch "sqrt" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%a : !fysched.buffer<device, tensor<8xf32>>)
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%a : !fysched.buffer<device, tensor<8xf32>>)
  %b = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.launch "mul" ins(%a, %w : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<device, tensor<8xf32>>) outs(%b : !fysched.buffer<device, tensor<8xf32>>)
  fysched.dealloc %w : !fysched.buffer<device, tensor<8xf32>>

  // An activation to the host, its device buffer freed right after: the
  // free waits with the copy, two launches later (the window), not for the
  // host buffer's reader far below.
  // CHECK: %[[HA:.*]] = fysched.alloc : <host, tensor<8xf32>>
  // CHECK-NEXT: %[[TA:.*]] = fysched.copy %[[A]], %[[HA]] : <device, tensor<8xf32>>, <host, tensor<8xf32>> -> !fysched.token
  // CHECK-NEXT: %[[C:.*]] = fysched.alloc
  // CHECK-NEXT: fysched.launch "neg" ins(%[[B]] : {{.*}}) outs(%[[C]]
  // CHECK-NEXT: fysched.launch "neg" ins(%[[C]] : {{.*}}) outs(%[[B]]
  // CHECK-NEXT: fysched.wait %[[TA]]
  // CHECK-NEXT: fysched.dealloc %[[A]]
  // CHECK-NEXT: fysched.launch "exp" ins(%[[B]] {{.*}}) outs(%[[C]]
  %ha = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  fysched.copy %a, %ha : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<host, tensor<8xf32>>
  fysched.dealloc %a : !fysched.buffer<device, tensor<8xf32>>
  %c = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.launch "neg" ins(%b : !fysched.buffer<device, tensor<8xf32>>) outs(%c : !fysched.buffer<device, tensor<8xf32>>)
  fysched.launch "neg" ins(%c : !fysched.buffer<device, tensor<8xf32>>) outs(%b : !fysched.buffer<device, tensor<8xf32>>)
  fysched.launch "exp" ins(%b : !fysched.buffer<device, tensor<8xf32>>) outs(%c : !fysched.buffer<device, tensor<8xf32>>)

  // A source written again (through a view) before the window ends: the
  // wait goes before the write.
  // CHECK: %[[HC:.*]] = fysched.alloc : <host, tensor<8xf32>>
  // CHECK-NEXT: %[[TC:.*]] = fysched.copy %[[C]], %[[HC]] {{.*}} -> !fysched.token
  // CHECK-NEXT: %[[CV:.*]] = fysched.view %[[C]]
  // CHECK-NEXT: fysched.wait %[[TC]]
  // CHECK-NEXT: fysched.launch "zero" outs(%[[CV]]
  %hc = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  fysched.copy %c, %hc : !fysched.buffer<device, tensor<8xf32>>, !fysched.buffer<host, tensor<8xf32>>
  %cv = fysched.view %c : !fysched.buffer<device, tensor<8xf32>> -> !fysched.buffer<device, tensor<2x4xf32>>
  fysched.launch "zero" outs(%cv : !fysched.buffer<device, tensor<2x4xf32>>)

  // The host buffer going on to SSD: that copy stays synchronous (only
  // host<->device copies run on copy streams). Its source was waited for
  // within the window above; with a wider one the wait comes here (WIDE).
  // CHECK: %[[S:.*]] = fysched.alloc : <ssd, tensor<8xf32>>
  // CHECK-NEXT: fysched.copy %[[HA]], %[[S]] : <host, tensor<8xf32>>, <ssd, tensor<8xf32>>{{$}}
  %s = fysched.alloc : !fysched.buffer<ssd, tensor<8xf32>>
  fysched.copy %ha, %s : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<ssd, tensor<8xf32>>

  // A master read by a copy is written by its parameter's update: the wait
  // goes before the update, however far the first reader.
  // CHECK: %[[MU:.*]] = fysched.get_param @u : <host, tensor<8xf32>>
  // CHECK-NEXT: %[[U:.*]] = fysched.alloc
  // CHECK-NEXT: %[[TU:.*]] = fysched.copy %[[MU]], %[[U]]
  // CHECK-NEXT: fysched.alloc : <host, tensor<8xf32>>
  // CHECK-NEXT: fysched.wait %[[TU]]
  // CHECK-NEXT: fysched.cpu_adamw @u
  %mu = fysched.get_param @u : !fysched.buffer<host, tensor<8xf32>>
  %u = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.copy %mu, %u : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<device, tensor<8xf32>>
  %g = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  fysched.cpu_adamw @u, %g : !fysched.buffer<host, tensor<8xf32>>
  fysched.launch "exp" ins(%u : !fysched.buffer<device, tensor<8xf32>>) outs(%b : !fysched.buffer<device, tensor<8xf32>>)

  // A copy whose target is returned is waited for before the return.
  // CHECK: %[[TR:.*]] = fysched.copy %[[HC]], %[[R:.*]] : <host, tensor<8xf32>>, <device, tensor<8xf32>> -> !fysched.token
  // CHECK-NEXT: fysched.wait %[[TR]]
  // CHECK-NEXT: return %[[R]]
  %r = fysched.alloc : !fysched.buffer<device, tensor<8xf32>>
  fysched.copy %hc, %r : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<device, tensor<8xf32>>
  return %r : !fysched.buffer<device, tensor<8xf32>>
}

// window=0: every wait right after its copy; the frees stay where they were.
// ZERO: %[[TW:.*]] = fysched.copy {{.*}} -> !fysched.token
// ZERO-NEXT: fysched.wait %[[TW]]
// ZERO: %[[TA:.*]] = fysched.copy %[[A:.*]], %{{.*}} : <device, tensor<8xf32>>, <host, tensor<8xf32>> -> !fysched.token
// ZERO-NEXT: fysched.wait %[[TA]]
// ZERO-NEXT: fysched.dealloc %[[A]]
// ZERO-NOT: fysched.wait %[[TA]]

// The default window (4) reaches past the three launches to the SSD copy:
// the activation's device buffer is freed there.
// WIDE: %[[TA:.*]] = fysched.copy %[[A:.*]], %[[HA:.*]] : <device, tensor<8xf32>>, <host, tensor<8xf32>> -> !fysched.token
// WIDE: fysched.launch "zero"
// WIDE: fysched.wait %[[TA]]
// WIDE-NEXT: fysched.dealloc %[[A]]
// WIDE-NEXT: fysched.copy %[[HA]], %{{.*}} : <host, tensor<8xf32>>, <ssd, tensor<8xf32>>{{$}}

// NEG: fy-async-copies: window must be at least 0, got -1
