// The loss of a Linear's logits on a CPU (the profile: products at 1e10
// flop/s, 1e9 softmax elements/s, 1e10 B/s, launches 1 us). N 1024 rows, D 64,
// V 65,536: a block of 128 MiB / (4 x 65,536) = 512 rows, 2 blocks.
// With the gradients: three products of 2 x 1024 x 65,536 x 64 =
// 8,589,934,592 flops, 2,576.98 ms; an exp a logit, 67,108,864 of them,
// 67.11 ms; dw read and written again for the second block, 8 x 65,536 x 64
// B, 3.36 ms: 2,647.45 ms. Without (eval_step's): one product and the exps,
// 926.10 ms. With the launches' 2 us: 3,573.55 ms.
// CE: predicted step: 3574 ms
// CE-NEXT: compute: busy 3574 ms (forward 2647 ms, backward 926.1 ms)
func.func @train_step(%x: !fysched.buffer<device, tensor<2x512x64xf32>>, %w: !fysched.buffer<device, tensor<65536x64xf32>>,
                      %t: !fysched.buffer<device, tensor<1024xi64>>) -> !fysched.buffer<device, tensor<f32>> {
  %l = fysched.alloc : <device, tensor<f32>>
  %dx = fysched.alloc : <device, tensor<2x512x64xf32>>
  %dw = fysched.alloc : <device, tensor<65536x64xf32>>
  %blk = fysched.alloc : <device, tensor<512x65536xf32>>
  fysched.launch "linear_cross_entropy" ins(%x, %w, %t : !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<1024xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<512x65536xf32>>) {args = [-100, true, true]}
  fysched.launch "linear_cross_entropy" ins(%x, %w, %t : !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<1024xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<512x65536xf32>>) {args = [-100, true, false]}
  return %l : !fysched.buffer<device, tensor<f32>>
}
