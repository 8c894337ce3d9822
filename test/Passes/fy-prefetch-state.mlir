// RUN: fuyou-opt %s --fy-prefetch-state=distance=2 | FileCheck %s --check-prefix=D2
// RUN: fuyou-opt %s --fy-prefetch-state | FileCheck %s --check-prefix=D3
// RUN: fuyou-opt %s --fy-prefetch-state=distance=0 | FileCheck %s --check-prefix=D0
// RUN: not fuyou-opt %s --fy-prefetch-state=distance=-1 2>&1 | FileCheck %s --check-prefix=NEG

// Four groups updated in the order g0, g1, g2, g3 (backward order). With
// distance 2 the reads of the first two go to the start of the step, in
// order; g2's goes right after g0's update and g3's right after g1's.
// D2-LABEL: func.func @train_step
// D2-NEXT: %[[R0:.*]] = fysched.state_read @g0
// D2-NEXT: %[[R1:.*]] = fysched.state_read @g1
// D2-NEXT: fysched.group_wait @g3
// D2: %[[U0:.*]] = fysched.group_adamw @g0 after(%{{.*}}, %[[R0]])
// D2-NEXT: %[[R2:.*]] = fysched.state_read @g2
// D2-NEXT: fysched.state_write @g0 after(%[[U0]])
// D2: %[[U1:.*]] = fysched.group_adamw @g1 after(%{{.*}}, %[[R1]])
// D2-NEXT: %[[R3:.*]] = fysched.state_read @g3
// D2-NEXT: fysched.state_write @g1 after(%[[U1]])
// D2: fysched.group_adamw @g2 after(%{{.*}}, %[[R2]])
// D2: fysched.group_adamw @g3 after(%{{.*}}, %[[R3]])
// D2-NOT: fysched.state_read

// The default distance is 3: three reads at the start, g3's after g0's update.
// D3-LABEL: func.func @train_step
// D3-NEXT: fysched.state_read @g0
// D3-NEXT: fysched.state_read @g1
// D3-NEXT: fysched.state_read @g2
// D3-NEXT: fysched.group_wait @g3
// D3: fysched.group_adamw @g0
// D3-NEXT: fysched.state_read @g3
// D3-NOT: fysched.state_read

// Distance 0 leaves every read right before its update.
// D0-LABEL: func.func @train_step
// D0-NEXT: fysched.group_wait @g3
// D0: fysched.grad_offload @g0
// D0-NEXT: fysched.state_read @g0
// D0-NEXT: fysched.group_adamw @g0
// D0: fysched.grad_offload @g3
// D0-NEXT: fysched.state_read @g3
// D0-NEXT: fysched.group_adamw @g3

// NEG: error: fy-prefetch-state: distance must be at least 0

fygraph.param @a trainable : tensor<4xf32>
fygraph.param @b trainable : tensor<4xf32>
fygraph.param @c trainable : tensor<4xf32>
fygraph.param @d trainable : tensor<4xf32>
fysched.group @g0 [@d] bytes 16
fysched.group @g1 [@c] bytes 16
fysched.group @g2 [@b] bytes 16
fysched.group @g3 [@a] bytes 16

func.func @train_step(%ga: !fysched.buffer<device, tensor<4xf32>>, %gb: !fysched.buffer<device, tensor<4xf32>>,
                      %gc: !fysched.buffer<device, tensor<4xf32>>, %gd: !fysched.buffer<device, tensor<4xf32>>) {
  fysched.group_wait @g3
  %a = fysched.get_param @a : <device, tensor<4xf32>>
  fysched.group_wait @g2
  %b = fysched.get_param @b : <device, tensor<4xf32>>
  fysched.group_wait @g1
  %c = fysched.get_param @c : <device, tensor<4xf32>>
  fysched.group_wait @g0
  %d = fysched.get_param @d : <device, tensor<4xf32>>
  %o0 = fysched.grad_offload @g0(%gd : !fysched.buffer<device, tensor<4xf32>>)
  %r0 = fysched.state_read @g0
  %u0 = fysched.group_adamw @g0 after(%o0, %r0)
  fysched.state_write @g0 after(%u0)
  %o1 = fysched.grad_offload @g1(%gc : !fysched.buffer<device, tensor<4xf32>>)
  %r1 = fysched.state_read @g1
  %u1 = fysched.group_adamw @g1 after(%o1, %r1)
  fysched.state_write @g1 after(%u1)
  %o2 = fysched.grad_offload @g2(%gb : !fysched.buffer<device, tensor<4xf32>>)
  %r2 = fysched.state_read @g2
  %u2 = fysched.group_adamw @g2 after(%o2, %r2)
  fysched.state_write @g2 after(%u2)
  %o3 = fysched.grad_offload @g3(%ga : !fysched.buffer<device, tensor<4xf32>>)
  %r3 = fysched.state_read @g3
  %u3 = fysched.group_adamw @g3 after(%o3, %r3)
  fysched.state_write @g3 after(%u3)
  return
}
