// One batched product, 64 slices of 64x64 by 64x64 (2^25 flops in all, the
// flops of one 256^3 product), priced by fy-choose-placement.mlir.
func.func @train_step(%a: !fysched.buffer<device, tensor<64x64x64xf32>>, %b: !fysched.buffer<device, tensor<64x64x64xf32>>) -> !fysched.buffer<device, tensor<64x64x64xf32>> {
  %c = fysched.alloc : <device, tensor<64x64x64xf32>>
  fysched.launch "matmul" ins(%a, %b : !fysched.buffer<device, tensor<64x64x64xf32>>, !fysched.buffer<device, tensor<64x64x64xf32>>) outs(%c : !fysched.buffer<device, tensor<64x64x64xf32>>) {args = [false, false]}
  return %c : !fysched.buffer<device, tensor<64x64x64xf32>>
}
