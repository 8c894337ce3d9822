// Layer norm and RMS norm by their calibrated rates (norm_elems_per_s,
// norm_grad_elems_per_s), not by their bytes: on a CPU their row statistics
// bound them. With 65,536 elements a microsecond forward and half that rate
// backward, every launch 1 us more and memory free: a 256 x 256 layer norm
// 1 + 1 us, its gradient 2 + 1 us, an RMS norm 1 + 1 us and its gradient
// 2 + 1 us, a step of 10 us. (Without the two rates: four launches, 4 us.)
// NORM: predicted step: 0.01 ms
// NORM: costliest kernels: layer_norm_grad 0.003 ms, rms_norm_grad 0.003 ms, layer_norm 0.002 ms, rms_norm 0.002 ms

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %x: !fysched.buffer<device, tensor<256x256xf32>>,
                      %s: !fysched.buffer<device, tensor<256xf32>>, %b: !fysched.buffer<device, tensor<256xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %y = fysched.alloc : <device, tensor<256x256xf32>>
  %m = fysched.alloc : <device, tensor<256xf32>>
  %r = fysched.alloc : <device, tensor<256xf32>>
  fysched.launch "layer_norm" ins(%x, %s, %b : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>, !fysched.buffer<device, tensor<256xf32>>) outs(%y, %m, %r : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>, !fysched.buffer<device, tensor<256xf32>>) {args = [1, 1.0e-05]}
  %dx = fysched.alloc : <device, tensor<256x256xf32>>
  %ds = fysched.alloc : <device, tensor<256xf32>>
  %db = fysched.alloc : <device, tensor<256xf32>>
  fysched.launch "layer_norm_grad" ins(%y, %x, %s, %m, %r : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>, !fysched.buffer<device, tensor<256xf32>>, !fysched.buffer<device, tensor<256xf32>>) outs(%dx, %ds, %db : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>, !fysched.buffer<device, tensor<256xf32>>) {args = [1]}
  %z = fysched.alloc : <device, tensor<256x256xf32>>
  %q = fysched.alloc : <device, tensor<256xf32>>
  fysched.launch "rms_norm" ins(%dx, %s : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>) outs(%z, %q : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>) {args = [1, 1.0e-05]}
  %dz = fysched.alloc : <device, tensor<256x256xf32>>
  %dq = fysched.alloc : <device, tensor<256xf32>>
  fysched.launch "rms_norm_grad" ins(%z, %dx, %s, %q : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>, !fysched.buffer<device, tensor<256xf32>>) outs(%dz, %dq : !fysched.buffer<device, tensor<256x256xf32>>, !fysched.buffer<device, tensor<256xf32>>) {args = [1]}
  %l = fysched.alloc : <device, tensor<f32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}
