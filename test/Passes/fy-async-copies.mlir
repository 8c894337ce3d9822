// RUN: fuyou-opt %s -split-input-file --fy-async-copies="window=2 write-behind=2" | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-async-copies=window=0 | FileCheck %s --check-prefix=ZERO
// RUN: fuyou-opt %s -split-input-file --fy-async-copies | FileCheck %s --check-prefix=WIDE
// RUN: fuyou-opt %s -split-input-file --fy-async-copies=write-behind=1 | FileCheck %s --check-prefix=BEHIND1
// RUN: fuyou-opt %s -split-input-file --fy-async-copies=write-behind=0 | FileCheck %s --check-prefix=BEHIND1
// RUN: not fuyou-opt %s -split-input-file --fy-async-copies=window=-1 2>&1 | FileCheck %s --check-prefix=NEG
// RUN: not fuyou-opt %s -split-input-file --fy-async-copies=write-behind=-1 2>&1 | FileCheck %s --check-prefix=NEGW

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

  // The host buffer going on to SSD: the write starts, and as its source
  // lives on and the SSD buffer is not read again, it is waited for at the
  // return. Its own source was waited for within the window above; with a
  // wider one the wait comes here (WIDE).
  // CHECK: %[[S:.*]] = fysched.alloc : <ssd, tensor<8xf32>>
  // CHECK-NEXT: %[[TS:.*]] = fysched.copy %[[HA]], %[[S]] : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
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
  // CHECK-NEXT: fysched.wait %[[TS]]
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
// WIDE-NEXT: fysched.copy %[[HA]], %{{.*}} : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token

// NEG: fy-async-copies: window must be at least 0, got -1
// NEGW: fy-async-copies: write-behind must be at least 0, got -1

// -----

// Activations on their way to SSD, each through a host buffer freed right
// after its write starts. With write-behind 2 (the window's run) the free
// waits for the write two later; forward's last writes are waited for
// where backward starts (after the loss's reduce_sum), not where they are
// read back, so their host buffers do not stay through backward. With 4
// (WIDE) every wait comes there; with 1 (BEHIND1) each write is waited for
// before the next one starts; so it is with write-behind=0, which takes
// the planner's choice (the plan's write_behind, here 1), and only then.
module attributes {fysched.plan = #fysched.plan<activations = "ssd", write_behind = 1>} {
fygraph.param @w trainable : tensor<8xf32>

// CHECK-LABEL: func.func @train_step
func.func @train_step(%x: !fysched.buffer<device, tensor<8xf32>>, %y: !fysched.buffer<device, tensor<8xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  // CHECK: %[[T1:.*]] = fysched.copy %[[H1:.*]], %[[S1:.*]] : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
  // CHECK-NEXT: fysched.launch "exp"
  // CHECK: %[[T2:.*]] = fysched.copy %[[H2:.*]], %[[S2:.*]] : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
  // CHECK-NEXT: fysched.launch "exp"
  // CHECK: fysched.alloc : <host
  // CHECK-NEXT: fysched.alloc : <ssd
  // CHECK-NEXT: fysched.wait %[[T1]]
  // CHECK-NEXT: fysched.dealloc %[[H1]]
  // CHECK-NEXT: %[[T3:.*]] = fysched.copy %[[H3:.*]], %[[S3:.*]] : {{.*}} -> !fysched.token
  // CHECK-NEXT: fysched.launch "exp"
  // CHECK: fysched.launch "reduce_sum"
  // CHECK-NEXT: fysched.wait %[[T2]]
  // CHECK-NEXT: fysched.dealloc %[[H2]]
  // CHECK-NEXT: fysched.wait %[[T3]]
  // CHECK-NEXT: fysched.dealloc %[[H3]]
  // CHECK-NEXT: fysched.launch "neg"
  // CHECK-NEXT: fysched.alloc : <host
  // CHECK-NEXT: fysched.copy %[[S2]]
  // CHECK-NOT: fysched.wait
  // CHECK: return
  %h1 = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  %s1 = fysched.alloc : !fysched.buffer<ssd, tensor<8xf32>>
  fysched.copy %h1, %s1 : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<ssd, tensor<8xf32>>
  fysched.dealloc %h1 : !fysched.buffer<host, tensor<8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%y : !fysched.buffer<device, tensor<8xf32>>)
  %h2 = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  %s2 = fysched.alloc : !fysched.buffer<ssd, tensor<8xf32>>
  fysched.copy %h2, %s2 : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<ssd, tensor<8xf32>>
  fysched.dealloc %h2 : !fysched.buffer<host, tensor<8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%y : !fysched.buffer<device, tensor<8xf32>>)
  %h3 = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  %s3 = fysched.alloc : !fysched.buffer<ssd, tensor<8xf32>>
  fysched.copy %h3, %s3 : !fysched.buffer<host, tensor<8xf32>>, !fysched.buffer<ssd, tensor<8xf32>>
  fysched.dealloc %h3 : !fysched.buffer<host, tensor<8xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%y : !fysched.buffer<device, tensor<8xf32>>)
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%y : !fysched.buffer<device, tensor<8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<8xf32>>) outs(%y : !fysched.buffer<device, tensor<8xf32>>)
  %b2 = fysched.alloc : !fysched.buffer<host, tensor<8xf32>>
  fysched.copy %s2, %b2 : !fysched.buffer<ssd, tensor<8xf32>>, !fysched.buffer<host, tensor<8xf32>>
  fysched.dealloc %s2 : !fysched.buffer<ssd, tensor<8xf32>>
  fysched.dealloc %b2 : !fysched.buffer<host, tensor<8xf32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}
}

// WIDE: // -----
// WIDE: %[[T1:.*]] = fysched.copy %[[H1:.*]], %{{.*}} : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
// WIDE: %[[T2:.*]] = fysched.copy %[[H2:.*]], %[[S2:.*]] : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
// WIDE: %[[T3:.*]] = fysched.copy %[[H3:.*]], %{{.*}} : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
// WIDE: fysched.launch "reduce_sum"
// WIDE-NEXT: fysched.wait %[[T1]]
// WIDE-NEXT: fysched.dealloc %[[H1]]
// WIDE-NEXT: fysched.wait %[[T2]]
// WIDE-NEXT: fysched.dealloc %[[H2]]
// WIDE-NEXT: fysched.wait %[[T3]]
// WIDE-NEXT: fysched.dealloc %[[H3]]
// WIDE-NEXT: fysched.launch "neg"

// BEHIND1: // -----
// BEHIND1: %[[T1:.*]] = fysched.copy %[[H1:.*]], %{{.*}} : <host, tensor<8xf32>>, <ssd, tensor<8xf32>> -> !fysched.token
// BEHIND1-NEXT: fysched.launch "exp"
// BEHIND1-NEXT: fysched.alloc : <host
// BEHIND1-NEXT: fysched.alloc : <ssd
// BEHIND1-NEXT: fysched.wait %[[T1]]
// BEHIND1-NEXT: fysched.dealloc %[[H1]]
// BEHIND1-NEXT: %[[T2:.*]] = fysched.copy
// BEHIND1: fysched.wait %[[T2]]
// BEHIND1-NEXT: fysched.dealloc
// BEHIND1-NEXT: %[[T3:.*]] = fysched.copy
// BEHIND1: fysched.launch "reduce_sum"
// BEHIND1-NEXT: fysched.wait %[[T3]]
// BEHIND1-NEXT: fysched.dealloc
// BEHIND1-NEXT: fysched.launch "neg"
