// Input of fy-place-activations.mlir's selective runs. Two segments: @w1's
// (%a, %h, %r) and @w2's (%b, %u, %t, %p, %s, %z). Backward reads %a, %h, %b,
// %t, %s and %z; %r is the checkpoint the second segment starts from; %u and
// %p are read by forward only. %z is a product of two activations (as
// attention's are), the other products read a weight.

// policy=selective: the weight products' outputs %a and %b stay; %h is made
// again from %a, %t from %b through %u, and %z from %b and the remade %t,
// before %z's first backward use (%t's twin then serves its own); %s stays,
// since making it again needs %p, a weight product (its operand is made
// from @w2 alone). Nothing copied out.
// SEL-LABEL: func.func @train_step
// SEL-NOT: <host,
// SEL: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL-NEXT: fysched.launch "matmul"
// SEL: fysched.launch "add"
// SEL-NEXT: fysched.get_param @w2
// SEL-NEXT: %[[B:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL-NEXT: fysched.launch "matmul"
// SEL-NEXT: fysched.alloc
// SEL-NEXT: fysched.launch "gelu"
// SEL-NEXT: fysched.alloc
// SEL-NEXT: fysched.launch "gelu"
// SEL-NEXT: fysched.alloc
// SEL-NEXT: fysched.launch "transpose"
// SEL-NEXT: fysched.alloc
// SEL-NEXT: fysched.launch "matmul"
// SEL-NEXT: %[[S:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL-NEXT: fysched.launch "gelu"
// SEL: fysched.launch "reduce_sum" ins(%[[S]]
// SEL-NEXT: %[[GZ:.*]] = fysched.alloc : <device, tensor<f32>>
// SEL-NEXT: %[[U2:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL-NEXT: fysched.launch "gelu" ins(%[[B]] {{.*}} outs(%[[U2]]
// SEL-NEXT: %[[T2:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL-NEXT: fysched.launch "gelu" ins(%[[U2]] {{.*}} outs(%[[T2]]
// SEL-NEXT: %[[Z2:.*]] = fysched.alloc : <device, tensor<4x4xf32>>
// SEL-NEXT: fysched.launch "matmul" ins(%[[B]], %[[T2]] {{.*}} outs(%[[Z2]]
// SEL-NEXT: fysched.launch "reduce_sum" ins(%[[Z2]] {{.*}} outs(%[[GZ]]
// SEL-NEXT: %[[G3:.*]] = fysched.alloc
// SEL-NEXT: fysched.launch "unary_grad_gelu" ins(%[[S]], {{.*}} outs(%[[G3]]
// SEL-NEXT: %[[G2:.*]] = fysched.alloc
// SEL-NEXT: fysched.launch "unary_grad_gelu" ins(%[[T2]], %[[G3]] {{.*}} outs(%[[G2]]
// SEL-NEXT: %[[G1:.*]] = fysched.alloc
// SEL-NEXT: fysched.launch "unary_grad_gelu" ins(%[[B]], %[[G2]] {{.*}} outs(%[[G1]]
// SEL-NEXT: %[[G0:.*]] = fysched.alloc
// SEL-NEXT: %[[H2:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL-NEXT: fysched.launch "gelu" ins(%[[A]] {{.*}} outs(%[[H2]]
// SEL-NEXT: fysched.launch "unary_grad_gelu" ins(%[[A]], %[[H2]], %[[G1]] {{.*}} outs(%[[G0]]
// SEL-NEXT: return

// Per segment: selective for the first only remakes %h alone; host for the
// first with selective for the second remakes %t (and %z, one product
// after the two gelus), and %a and %h wait in host memory.
// SEL0-LABEL: func.func @train_step
// SEL0-NOT: <host,
// SEL0: %[[A:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL0-NEXT: fysched.launch "matmul"
// SEL0: fysched.launch "reduce_sum"
// SEL0-NOT: fysched.launch "matmul"
// SEL0-NOT: fysched.launch "gelu"
// SEL0: fysched.launch "gelu" ins(%[[A]] {{.*}} outs(%[[H2:[0-9]+]]
// SEL0-NEXT: fysched.launch "unary_grad_gelu" ins(%[[A]], %[[H2]],
// SEL0-NEXT: return
// SEL1-LABEL: func.func @train_step
// SEL1: fysched.get_param @w2
// SEL1-NEXT: %[[B:.*]] = fysched.alloc : <device, tensor<4x8xf32>>
// SEL1: fysched.launch "reduce_sum"
// SEL1-NOT: fysched.launch "matmul"{{.*}}tensor<8x8xf32>
// SEL1: fysched.launch "gelu" ins(%[[B]]
// SEL1-NEXT: fysched.alloc
// SEL1-NEXT: fysched.launch "gelu"
// SEL1-NEXT: fysched.alloc
// SEL1-NEXT: fysched.launch "matmul" ins(%[[B]],
// SEL1-NOT: fysched.launch "matmul"{{.*}}tensor<8x8xf32>
// SEL1: fysched.copy %{{.*}}, %{{.*}} : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// SEL1: fysched.copy %{{.*}}, %{{.*}} : <host, tensor<4x8xf32>>, <device, tensor<4x8xf32>>
// SEL1-NOT: fysched.launch "gelu"
// SEL1-NOT: fysched.launch "matmul"
// SEL1: return

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
  %r = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "add" ins(%h, %x : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%r : !fysched.buffer<device, tensor<4x8xf32>>)
  %w2 = fysched.get_param @w2 : <device, tensor<8x8xf32>>
  %b = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%r, %w2 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%b : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  %u = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "gelu" ins(%b : !fysched.buffer<device, tensor<4x8xf32>>) outs(%u : !fysched.buffer<device, tensor<4x8xf32>>)
  %t = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "gelu" ins(%u : !fysched.buffer<device, tensor<4x8xf32>>) outs(%t : !fysched.buffer<device, tensor<4x8xf32>>)
  %w2t = fysched.alloc : <device, tensor<8x8xf32>>
  fysched.launch "transpose" ins(%w2 : !fysched.buffer<device, tensor<8x8xf32>>) outs(%w2t : !fysched.buffer<device, tensor<8x8xf32>>)
  %p = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%t, %w2t : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%p : !fysched.buffer<device, tensor<4x8xf32>>)
  %s = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "gelu" ins(%p : !fysched.buffer<device, tensor<4x8xf32>>) outs(%s : !fysched.buffer<device, tensor<4x8xf32>>)
  %z = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%b, %t : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%z : !fysched.buffer<device, tensor<4x4xf32>>) {args = [false, true]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%s : !fysched.buffer<device, tensor<4x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %gz = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<4x4xf32>>) outs(%gz : !fysched.buffer<device, tensor<f32>>)
  %g3 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%s, %x : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g3 : !fysched.buffer<device, tensor<4x8xf32>>)
  %g2 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%t, %g3 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g2 : !fysched.buffer<device, tensor<4x8xf32>>)
  %g1 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%b, %g2 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g1 : !fysched.buffer<device, tensor<4x8xf32>>)
  %g0 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%a, %h, %g1 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g0 : !fysched.buffer<device, tensor<4x8xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
