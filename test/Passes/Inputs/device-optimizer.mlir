// A group updated on the device (fy-device-optimizer), with the profile of
// test-print-step-prediction.mlir (every launch 1 us, memory and copies
// free, AdamW on the CPU at 2 params/us): the block's two products (1 us
// each) and its update on the GPU's stream (1 us: its 28 B a parameter take
// no time at this rate), 3 us a step, no optimizer work; the device holds
// the parameter (64 B), the arena (64 B) and the moments (128 B).
// DEVOPT: AdamW on the device: @g0 (their moments in device memory)
// DEVOPT: device: 256 B
// DEVOPT: predicted step: 0.003 ms
// DEVOPT: compute: busy 0.003 ms
// DEVOPT: optimizer: busy 0 ms
// DEVOPT: waits for updates: 0 ms
//
// The same update inline on the CPU (fysched.cpu_adamw without on_device):
// 16 parameters at 2 params/us, 8 us on the program's thread: 10 us.
// DEVOPT-NOT: AdamW on the device
// DEVOPT: device: 128 B
// DEVOPT: predicted step: 0.01 ms
// DEVOPT: compute: busy 0.01 ms

fygraph.param @w trainable : tensor<4x4xf32>
fysched.group @g0 [@w] bytes 64 on_device

func.func @train_step(%x: !fysched.buffer<device, tensor<4x4xf32>>) -> !fysched.buffer<device, tensor<4x4xf32>>
    attributes {fysched.param_bytes = 64 : i64, fysched.arena_bytes = 64 : i64} {
  %w = fysched.get_param @w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<4x4xf32>>) {args = [false, false]}
  %g = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %y : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%g : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  fysched.cpu_adamw @w, %g group @g0 on_device : !fysched.buffer<device, tensor<4x4xf32>>
  return %y : !fysched.buffer<device, tensor<4x4xf32>>
}

// -----

fygraph.param @w trainable : tensor<4x4xf32>
fysched.group @g0 [@w] bytes 64

func.func @train_step(%x: !fysched.buffer<device, tensor<4x4xf32>>) -> !fysched.buffer<device, tensor<4x4xf32>>
    attributes {fysched.param_bytes = 64 : i64, fysched.arena_bytes = 64 : i64} {
  %w = fysched.get_param @w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<4x4xf32>>) {args = [false, false]}
  %g = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %y : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%g : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  fysched.cpu_adamw @w, %g group @g0 : !fysched.buffer<device, tensor<4x4xf32>>
  return %y : !fysched.buffer<device, tensor<4x4xf32>>
}
