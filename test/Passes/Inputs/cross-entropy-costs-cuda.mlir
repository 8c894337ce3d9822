// The loss of a Linear's logits on a GPU at bf16 (fy.precision; the
// profile: products at 1e11 flop/s, 1e9 softmax elements/s, 1e10 B/s,
// launches 1 us). Each product's time is its flops; the kernels between
// them and the roundings of fp32 operands to 16 bits add, by their bytes.
//
// 1. fp32 logits, N 1024, D 64, V 65,536: blocks of 512 rows, 2 of them.
//    Three products of 8,589,934,592 flops, 257.70 ms; the softmax, an
//    element a logit, 67.11 ms; its gradient read and written (8 B a logit)
//    and rounded for each of the two products that read it (6 B each), 20 x
//    67,108,864 B; x rounded by two products (12 x 65,536 B) and w by two a
//    block (24 x 4,194,304 B); 1,443,627,008 B, 144.36 ms; dw read and
//    written again for the second block, 3.36 ms. With the launch, 472.53 ms.
// CE: predicted step: 472.5 ms
module attributes {fy.precision = "bf16"} {
  func.func @train_step(%x: !fysched.buffer<device, tensor<2x512x64xf32>>, %w: !fysched.buffer<device, tensor<65536x64xf32>>,
                        %t: !fysched.buffer<device, tensor<1024xi64>>) -> !fysched.buffer<device, tensor<f32>> {
    %l = fysched.alloc : <device, tensor<f32>>
    %dx = fysched.alloc : <device, tensor<2x512x64xf32>>
    %dw = fysched.alloc : <device, tensor<65536x64xf32>>
    %blk = fysched.alloc : <device, tensor<512x65536xf32>>
    fysched.launch "linear_cross_entropy" ins(%x, %w, %t : !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<1024xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<512x65536xf32>>) {args = [-100, true, true]}
    return %l : !fysched.buffer<device, tensor<f32>>
  }
}

// -----

// 2. The same with bf16 logits: 1,024 rows a block, one block. x and w
//    rounded once, 6 x (65,536 + 4,194,304) B; one kernel reads the logits
//    twice and writes their gradient, 6 x 67,108,864 B; 428,212,224 B,
//    42.82 ms. With the products, 300.52 ms.
// CE: predicted step: 300.5 ms
module attributes {fy.precision = "bf16"} {
  func.func @train_step(%x: !fysched.buffer<device, tensor<2x512x64xf32>>, %w: !fysched.buffer<device, tensor<65536x64xf32>>,
                        %t: !fysched.buffer<device, tensor<1024xi64>>) -> !fysched.buffer<device, tensor<f32>> {
    %l = fysched.alloc : <device, tensor<f32>>
    %dx = fysched.alloc : <device, tensor<2x512x64xf32>>
    %dw = fysched.alloc : <device, tensor<65536x64xf32>>
    %blk = fysched.alloc : <device, tensor<1024x65536xbf16>>
    fysched.launch "linear_cross_entropy" ins(%x, %w, %t : !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<1024xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<2x512x64xf32>>, !fysched.buffer<device, tensor<65536x64xf32>>, !fysched.buffer<device, tensor<1024x65536xbf16>>) {args = [-100, true, true]}
    return %l : !fysched.buffer<device, tensor<f32>>
  }
}

// -----

// 3. bf16 logits whose x and w copies exceed the products' 128 MiB scratch
//    (N 512, D 256, V 262,144: w's alone is 128 MiB): x's rows rounded once
//    a block (6 x 131,072 B), w by two products a block, of 256 rows, 2
//    blocks (24 x 67,108,864 B); the logits' kernel 6 x 134,217,728 B;
//    2,416,705,536 B, 241.67 ms. Products 2,061.58 ms; dw again for the
//    second block, 53.69 ms. 2,356.94 ms.
// CE: predicted step: 2357 ms
module attributes {fy.precision = "bf16"} {
  func.func @train_step(%x: !fysched.buffer<device, tensor<512x256xf32>>, %w: !fysched.buffer<device, tensor<262144x256xf32>>,
                        %t: !fysched.buffer<device, tensor<512xi64>>) -> !fysched.buffer<device, tensor<f32>> {
    %l = fysched.alloc : <device, tensor<f32>>
    %dx = fysched.alloc : <device, tensor<512x256xf32>>
    %dw = fysched.alloc : <device, tensor<262144x256xf32>>
    %blk = fysched.alloc : <device, tensor<256x262144xbf16>>
    fysched.launch "linear_cross_entropy" ins(%x, %w, %t : !fysched.buffer<device, tensor<512x256xf32>>, !fysched.buffer<device, tensor<262144x256xf32>>, !fysched.buffer<device, tensor<512xi64>>) outs(%l, %dx, %dw, %blk : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<512x256xf32>>, !fysched.buffer<device, tensor<262144x256xf32>>, !fysched.buffer<device, tensor<256x262144xbf16>>) {args = [-100, true, true]}
    return %l : !fysched.buffer<device, tensor<f32>>
  }
}
