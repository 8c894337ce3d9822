// Fused attention by its calibrated rate (attention_flops_per_s), in flops of
// its products over the scores a row sees: 2 H x 128 x 64 heads, causal,
// 128 x 129 / 2 = 8,256 scores a head; forward 2 products, 2 x 2 x 2 x 8,256
// x 64 = 4,227,072 flops, 1 ms at 4.227072e9 flop/s; backward 5 products,
// 2.5 ms; a forward with a window of 32 sees 32 x (128 - 15.5) = 3,600 scores
// a head, 0.436 ms; the forward again with its heads inside its tokens
// (seq_major: [1, 128, 2, 64]) the same 1 ms. Launches 1 us each: 4.940 ms.
// Without the rate (the products at the profile's free matmul rate): the
// launches alone.
// ATT: predicted step: 4.94 ms
// FREE: predicted step: 0.004 ms

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %q: !fysched.buffer<device, tensor<1x2x128x64xf32>>,
                      %k: !fysched.buffer<device, tensor<1x2x128x64xf32>>,
                      %qs: !fysched.buffer<device, tensor<1x128x2x64xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %o = fysched.alloc : <device, tensor<1x2x128x64xf32>>
  %l = fysched.alloc : <device, tensor<1x2x128xf32>>
  fysched.launch "attention" ins(%q, %k, %k : !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>) outs(%o, %l : !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128xf32>>) {args = [1.250000e-01 : f32, 0, false]}
  %dq = fysched.alloc : <device, tensor<1x2x128x64xf32>>
  %dk = fysched.alloc : <device, tensor<1x2x128x64xf32>>
  %dv = fysched.alloc : <device, tensor<1x2x128x64xf32>>
  fysched.launch "attention_grad" ins(%q, %k, %k, %o, %l, %o : !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>) outs(%dq, %dk, %dv : !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>) {args = [1.250000e-01 : f32, 0, false]}
  %w = fysched.alloc : <device, tensor<1x2x128x64xf32>>
  %wl = fysched.alloc : <device, tensor<1x2x128xf32>>
  fysched.launch "attention" ins(%q, %k, %k : !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128x64xf32>>) outs(%w, %wl : !fysched.buffer<device, tensor<1x2x128x64xf32>>, !fysched.buffer<device, tensor<1x2x128xf32>>) {args = [1.250000e-01 : f32, 32, false]}
  %s = fysched.alloc : <device, tensor<1x128x2x64xf32>>
  %sl = fysched.alloc : <device, tensor<1x2x128xf32>>
  fysched.launch "attention" ins(%qs, %qs, %qs : !fysched.buffer<device, tensor<1x128x2x64xf32>>, !fysched.buffer<device, tensor<1x128x2x64xf32>>, !fysched.buffer<device, tensor<1x128x2x64xf32>>) outs(%s, %sl : !fysched.buffer<device, tensor<1x128x2x64xf32>>, !fysched.buffer<device, tensor<1x2x128xf32>>) {args = [1.250000e-01 : f32, 0, true]}
  %loss = fysched.alloc : <device, tensor<f32>>
  return %loss : !fysched.buffer<device, tensor<f32>>
}
