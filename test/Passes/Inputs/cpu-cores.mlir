// On the CPU target the kernels and the optimizer's pool share the cores,
// each measured using all of them: a step holds both one after the other.
// Profile: every launch 1 us, memory and copies free, target cpu. One group
// of 16 parameters; forward a product and the loss (2 us), backward a
// product (1 us), its gradient handed to the optimizer at 3 us, then four
// adds (3-7 us).
// At AdamW 2 params/us the update runs 3-11 us and the next step waits 4 us
// for it at its start: 11 us beside each other, 7 + 8 = 15 us in turn.
// CORES: predicted step: 0.015 ms
// CORES: compute: busy 0.007 ms
// CORES: optimizer: busy 0.008 ms
// CORES: waits for updates: 0.004 ms (@g0 0.004 ms)
// At 8 params/us (2 us, done before the adds): 7 us beside each other, 9 in turn.
// FAST: predicted step: 0.009 ms
// FAST: compute: busy 0.007 ms
// FAST: optimizer: busy 0.002 ms

fygraph.param @w trainable : tensor<4x4xf32>
fysched.group @g0 [@w] bytes 64

func.func @train_step(%x: !fysched.buffer<device, tensor<4x4xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %s0 = fysched.state_read @g0
  fysched.group_wait @g0
  %w = fysched.get_param @w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<4x4xf32>>) {args = [false, false]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%y : !fysched.buffer<device, tensor<4x4xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %g = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %y : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%g : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o0 = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0, %s0)
  fysched.state_write @g0 after(%u0)
  %a1 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "add" ins(%x, %x : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%a1 : !fysched.buffer<device, tensor<4x4xf32>>)
  %a2 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "add" ins(%a1, %a1 : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%a2 : !fysched.buffer<device, tensor<4x4xf32>>)
  %a3 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "add" ins(%a2, %a2 : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%a3 : !fysched.buffer<device, tensor<4x4xf32>>)
  %a4 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "add" ins(%a3, %a3 : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%a4 : !fysched.buffer<device, tensor<4x4xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
