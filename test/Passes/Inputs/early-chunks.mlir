// fy-choose-placement's input for a tied table of three update pieces
// (Inputs/tied-planner.mlir with 3 Mi rows of 4: 12 Mi parameters, 48 MiB):
// its early rows go down in three chunks of 16 MiB, paced or all at once.
fygraph.param @wte.weight trainable : tensor<3145728x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fysched.group @g0 [@h.0.w] bytes 64
fysched.group @g1 [@wte.weight] bytes 50331648

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %dz: !fysched.buffer<device, tensor<6x3145728xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %s0 = fysched.state_read @g0
  %s1 = fysched.state_read @g1
  fysched.group_wait @g1
  %e = fysched.get_param @wte.weight : <device, tensor<3145728x4xf32>>
  %x = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<3145728x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%x : !fysched.buffer<device, tensor<6x4xf32>>)
  fysched.group_wait @g0
  %w = fysched.get_param @h.0.w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %z = fysched.alloc : <device, tensor<6x3145728xf32>>
  fysched.launch "matmul" ins(%y, %e : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<3145728x4xf32>>) outs(%z : !fysched.buffer<device, tensor<6x3145728xf32>>) {args = [false, true]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x3145728xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %dw = fysched.alloc : <device, tensor<3145728x4xf32>>
  fysched.launch "matmul" ins(%dz, %y : !fysched.buffer<device, tensor<6x3145728xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<3145728x4xf32>>) {args = [true, false]}
  %dy = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dz, %e : !fysched.buffer<device, tensor<6x3145728xf32>>, !fysched.buffer<device, tensor<3145728x4xf32>>) outs(%dy : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %d1 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%dy, %dy : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d1 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d2 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d1, %d1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d2 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d3 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d2, %d2 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d3 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d4 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d3, %d3 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d4 : !fysched.buffer<device, tensor<6x4xf32>>)
  %gw = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %d4 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%gw : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o0 = fysched.grad_offload @g0(%gw : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0, %s0)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%d4, %w : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, true]}
  %ge = fysched.alloc : <device, tensor<3145728x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %dx, %idx : !fysched.buffer<device, tensor<3145728x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%ge : !fysched.buffer<device, tensor<3145728x4xf32>>)
  %o1 = fysched.grad_offload @g1(%ge : !fysched.buffer<device, tensor<3145728x4xf32>>)
  %u1 = fysched.group_adamw @g1 after(%o1, %s1)
  return %l : !fysched.buffer<device, tensor<f32>>
}
