// RUN: fuyou-opt %s --fy-place-activations=policy=host | FileCheck %s
// RUN: fuyou-opt %s --fy-place-activations | FileCheck %s --check-prefix=KEEP
// RUN: not fuyou-opt %s --fy-place-activations=policy=disk 2>&1 | FileCheck %s --check-prefix=BAD
// RUN: fuyou-opt %s --fy-place-activations="policy=ssd read-ahead=1" | FileCheck %s --check-prefix=SSD
// RUN: fuyou-opt %s --fy-place-activations=policy=ssd | FileCheck %s --check-prefix=AHEAD
// RUN: not fuyou-opt %s --fy-place-activations="policy=ssd read-ahead=0" 2>&1 | FileCheck %s --check-prefix=AHEAD0
// RUN: fuyou-opt %s --fy-place-activations=policy=recompute | FileCheck %s --check-prefix=RE
// RUN: fuyou-opt %s --fy-place-activations=policy=keep,recompute | FileCheck %s --check-prefix=RE1
// RUN: fuyou-opt %s --fy-place-activations=policy=recompute,host | FileCheck %s --check-prefix=RE0
// RUN: not fuyou-opt %s --fy-place-activations=policy=keep,keep,host 2>&1 | FileCheck %s --check-prefix=COUNT
// RUN: fuyou-opt %s --fy-place-activations="policy=host ahead=1" | FileCheck %s --check-prefix=PRE
// RUN: not fuyou-opt %s --fy-place-activations="policy=host ahead=-1" 2>&1 | FileCheck %s --check-prefix=PRENEG
// RUN: fuyou-opt %S/Inputs/selective.mlir --fy-place-activations=policy=selective | FileCheck %S/Inputs/selective.mlir --check-prefix=SEL
// RUN: fuyou-opt %S/Inputs/selective.mlir --fy-place-activations=policy=selective,keep | FileCheck %S/Inputs/selective.mlir --check-prefix=SEL0
// RUN: fuyou-opt %S/Inputs/selective.mlir --fy-place-activations=policy=host,selective | FileCheck %S/Inputs/selective.mlir --check-prefix=SEL1


// policy=host: each of %a, %h and %b goes to host memory after its last
// forward use and comes back before its first backward use; %b's view, made
// in forward, is made again on the copy. %l (the loss) and backward's own
// buffers do not move.
// CHECK-LABEL: func.func @train_step
// CHECK: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "matmul"
// CHECK-NEXT: %[[H:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "gelu" ins(%[[A]] {{.*}} outs(%[[H]]
// CHECK-NEXT: %[[AO:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// CHECK-NEXT: fysched.copy %[[A]], %[[AO]] : <device, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// CHECK: %[[B:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.launch "matmul" ins(%[[H]],
// CHECK-NEXT: %[[HO:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// CHECK-NEXT: fysched.copy %[[H]], %[[HO]]
// CHECK-NEXT: fysched.view %[[B]]
// CHECK-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// CHECK-NEXT: fysched.launch "reduce_sum" ins(%[[B]]
// CHECK-NEXT: %[[BO:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// CHECK-NEXT: fysched.copy %[[B]], %[[BO]]
// CHECK-NEXT: %[[G1:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: %[[BI:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// CHECK-NEXT: fysched.copy %[[BO]], %[[BI]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// CHECK-NEXT: %[[BV2:.*]] = fysched.view %[[BI]] : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
// CHECK-NEXT: fysched.launch "unary_grad_gelu" ins(%[[BI]], %[[BV2]] {{.*}} outs(%[[G1]]
// CHECK-NEXT: %[[G0:.*]] = fysched.alloc
// CHECK-NEXT: %[[AI:.*]] = fysched.alloc
// CHECK-NEXT: fysched.copy %[[AO]], %[[AI]]
// CHECK-NEXT: %[[HI:.*]] = fysched.alloc
// CHECK-NEXT: fysched.copy %[[HO]], %[[HI]]
// CHECK-NEXT: fysched.launch "unary_grad_gelu" ins(%[[AI]], %[[HI]], %[[G1]] {{.*}} outs(%[[G0]]
// CHECK-NEXT: return %[[L]]

// policy=ssd read-ahead=1: the same through host memory on to SSD and back;
// each host buffer serves one transfer. Shown for %b, whose view is made
// again; the read of %a, needed next, starts before %b's backward op runs.
// SSD-LABEL: func.func @train_step
// SSD: %[[AS:.*]] = fysched.alloc : <ssd, tensor<4x8xf32>>
// SSD: fysched.launch "reduce_sum" ins(%[[B:[0-9]+]]
// SSD-NEXT: %[[BO:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %[[B]], %[[BO]] : <device, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// SSD-NEXT: %[[BS:.*]] = fysched.alloc : <ssd, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %[[BO]], %[[BS]] : <host, tensor<4x8xf32>>, <ssd, tensor<4x8xf32>>
// SSD-NEXT: %[[G1:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SSD-NEXT: %[[BH:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %[[BS]], %[[BH]] : <ssd, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// SSD-NEXT: %[[BI:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %[[BH]], %[[BI]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// SSD-NEXT: %[[BV:.*]] = fysched.view %[[BI]]
// SSD-NEXT: %[[AH:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %[[AS]], %[[AH]] : <ssd, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// SSD-NEXT: fysched.launch "unary_grad_gelu" ins(%[[BI]], %[[BV]]
// SSD-NEXT: fysched.alloc : <device, tensor<4x8xf32>>
// SSD-NEXT: %[[AI:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %[[AH]], %[[AI]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// SSD-NEXT: %[[HH:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// SSD-NEXT: fysched.copy %{{.*}}, %[[HH]] : <ssd, tensor<4x8xf32>>, <host, tensor<4x8xf32>>

// The default reads 4 ahead: all three reads start before the first
// backward op, the one that needs %b.
// AHEAD-LABEL: func.func @train_step
// AHEAD-COUNT-3: fysched.copy %{{.*}}, %{{.*}} : <ssd, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// AHEAD: fysched.launch "unary_grad_gelu"
// AHEAD-NOT: <ssd, tensor<4x8xf32>>, <host
// AHEAD0: fy-place-activations: read-ahead must be at least 1, got 0

// ahead=1: each copy back is issued one launch before its first backward
// use, but not before backward starts or the copies back placed before it:
// %b's has no launch to pass (it goes right after %b's copy out, the first
// op of backward), %a's and %h's pass the first unary_grad_gelu; the views
// backward reads are still made at the first use.
// PRE: fysched.launch "reduce_sum"
// PRE-NEXT: %[[BO:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// PRE-NEXT: fysched.copy %[[B:.*]], %[[BO]]
// PRE-NEXT: %[[BI:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// PRE-NEXT: fysched.copy %[[BO]], %[[BI]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// PRE-NEXT: %[[G1:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// PRE-NEXT: %[[BV2:.*]] = fysched.view %[[BI]]
// PRE-NEXT: %[[AI:.*]] = fysched.alloc
// PRE-NEXT: fysched.copy %{{.*}}, %[[AI]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// PRE-NEXT: %[[HI:.*]] = fysched.alloc
// PRE-NEXT: fysched.copy %{{.*}}, %[[HI]] : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// PRE-NEXT: fysched.launch "unary_grad_gelu" ins(%[[BI]], %[[BV2]] {{.*}} outs(%[[G1]]
// PRE-NEXT: %[[G0:.*]] = fysched.alloc
// PRE-NEXT: fysched.launch "unary_grad_gelu" ins(%[[AI]], %[[HI]], %[[G1]]
// PRENEG: fy-place-activations: ahead must be at least 0, got -1

// KEEP-NOT: fysched.copy
// BAD: fy-place-activations: a policy is keep, host, ssd, recompute or selective, got 'disk'

// policy=recompute: Two segments: @w1's (%a, %h) and @w2's (%b, %c). Backward reads %a, %h
// and %b (through a view made in forward). %h is read by the second
// segment's matmul: a checkpoint, never recomputed. Recomputing %b runs its
// matmul again from %h; recomputing %a, its matmul from the input. The
// per-segment lists recompute one segment and keep (RE1) or move (RE0) the
// other's.
// RE-LABEL: func.func @train_step
// RE: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE: %[[H:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE: %[[B:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE: %[[L:.*]] = fysched.alloc : <device, tensor<f32>>
// RE-NEXT: fysched.launch "reduce_sum"
// RE-NEXT: %[[G1:.*]] = fysched.alloc
// RE-NEXT: %[[B2:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE-NEXT: fysched.launch "matmul" ins(%[[H]], %{{.*}}) outs(%[[B2]] {{.*}} {args = [false, true]}
// RE-NEXT: %[[BV2:.*]] = fysched.view %[[B2]] : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
// RE-NEXT: fysched.launch "unary_grad_gelu" ins(%[[B2]], %[[BV2]] {{.*}} outs(%[[G1]]
// RE-NEXT: %[[G0:.*]] = fysched.alloc
// RE-NEXT: %[[A2:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE-NEXT: fysched.launch "matmul" ins(%arg0, %{{.*}}) outs(%[[A2]]
// RE-NEXT: fysched.launch "unary_grad_gelu" ins(%[[A2]], %[[H]], %[[G1]] {{.*}} outs(%[[G0]]
// RE-NEXT: return %[[L]]

// RE1-LABEL: func.func @train_step
// RE1: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE1: fysched.launch "reduce_sum"
// RE1-NEXT: fysched.alloc
// RE1-NEXT: %[[B2:.*]] = fysched.alloc
// RE1-NEXT: fysched.launch "matmul"
// RE1: fysched.launch "unary_grad_gelu" ins(%[[B2]],
// RE1-NOT: "matmul"
// RE1: fysched.launch "unary_grad_gelu" ins(%[[A]],

// RE0-LABEL: func.func @train_step
// RE0-NOT: <host,
// RE0: fysched.get_param @w2
// RE0-NEXT: %[[B:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE0-NEXT: fysched.launch "matmul" ins(%[[H:[0-9]+]],
// RE0: fysched.launch "reduce_sum"
// RE0-NEXT: %[[BH:.*]] = fysched.alloc : <host, tensor<4x8xf32>>
// RE0-NEXT: fysched.copy %[[B]], %[[BH]]
// RE0-NEXT: %[[G1:.*]] = fysched.alloc
// RE0-NEXT: %[[B2:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// RE0-NEXT: fysched.copy %[[BH]], %[[B2]]
// RE0-NEXT: fysched.view %[[B2]]
// RE0-NEXT: fysched.launch "unary_grad_gelu" ins(%[[B2]],
// RE0-NEXT: fysched.alloc
// RE0-NEXT: %[[A2:.*]] = fysched.alloc
// RE0-NEXT: fysched.launch "matmul" ins(%arg0, {{.*}} outs(%[[A2]]
// RE0-NEXT: fysched.launch "unary_grad_gelu" ins(%[[A2]], %[[H]], %[[G1]]

// COUNT: fy-place-activations: 3 policies given for 2 forward segments

fygraph.param @w1 trainable : tensor<8x8xf32>
fygraph.param @w2 trainable : tensor<8x8xf32>
fysched.group @g0 [@w2] bytes 256
fysched.group @g1 [@w1] bytes 256

func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %w1 = fysched.get_param @w1 : <device, tensor<8x8xf32>>
  %a = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%x, %w1 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%a : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  %h = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "gelu" ins(%a : !fysched.buffer<device, tensor<4x8xf32>>) outs(%h : !fysched.buffer<device, tensor<4x8xf32>>)
  %w2 = fysched.get_param @w2 : <device, tensor<8x8xf32>>
  %b = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%h, %w2 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%b : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  %bv = fysched.view %b : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%b : !fysched.buffer<device, tensor<4x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %g1 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%b, %bv : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<32xf32>>) outs(%g1 : !fysched.buffer<device, tensor<4x8xf32>>)
  %g0 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%a, %h, %g1 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g0 : !fysched.buffer<device, tensor<4x8xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
