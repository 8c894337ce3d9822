// One matrix product a step, priced by --test-print-step-prediction with
// Inputs/profile-bf16-cuda.json: the checks and the arithmetic are in
// test-print-step-prediction.mlir.

module attributes {fy.precision = "bf16"} {
func.func @train_step(%a: !fysched.buffer<device, tensor<1024x1024xf32>>, %b: !fysched.buffer<device, tensor<1024x1024xf32>>) -> !fysched.buffer<device, tensor<1024x1024xf32>> {
  %c = fysched.alloc : <device, tensor<1024x1024xf32>>
  fysched.launch "matmul" ins(%a, %b : !fysched.buffer<device, tensor<1024x1024xf32>>, !fysched.buffer<device, tensor<1024x1024xf32>>) outs(%c : !fysched.buffer<device, tensor<1024x1024xf32>>) {args = [false, false]}
  return %c : !fysched.buffer<device, tensor<1024x1024xf32>>
}
}

// -----

module attributes {fy.precision = "bf16"} {
func.func @train_step(%a: !fysched.buffer<device, tensor<2048x1024xf32>>, %b: !fysched.buffer<device, tensor<1024x512xf32>>) -> !fysched.buffer<device, tensor<2048x512xf32>> {
  %c = fysched.alloc : <device, tensor<2048x512xf32>>
  fysched.launch "matmul" ins(%a, %b : !fysched.buffer<device, tensor<2048x1024xf32>>, !fysched.buffer<device, tensor<1024x512xf32>>) outs(%c : !fysched.buffer<device, tensor<2048x512xf32>>) {args = [false, false]}
  return %c : !fysched.buffer<device, tensor<2048x512xf32>>
}
}

// -----

module attributes {fy.precision = "fp32"} {
func.func @train_step(%a: !fysched.buffer<device, tensor<2048x1024xf32>>, %b: !fysched.buffer<device, tensor<1024x512xf32>>) -> !fysched.buffer<device, tensor<2048x512xf32>> {
  %c = fysched.alloc : <device, tensor<2048x512xf32>>
  fysched.launch "matmul" ins(%a, %b : !fysched.buffer<device, tensor<2048x1024xf32>>, !fysched.buffer<device, tensor<1024x512xf32>>) outs(%c : !fysched.buffer<device, tensor<2048x512xf32>>) {args = [false, false]}
  return %c : !fysched.buffer<device, tensor<2048x512xf32>>
}
}

// -----

module attributes {fy.precision = "bf16"} {
func.func @train_step(%a: !fysched.buffer<device, tensor<16384x8192xf32>>, %b: !fysched.buffer<device, tensor<8192x8xf32>>) -> !fysched.buffer<device, tensor<16384x8xf32>> {
  %c = fysched.alloc : <device, tensor<16384x8xf32>>
  fysched.launch "matmul" ins(%a, %b : !fysched.buffer<device, tensor<16384x8192xf32>>, !fysched.buffer<device, tensor<8192x8xf32>>) outs(%c : !fysched.buffer<device, tensor<16384x8xf32>>) {args = [false, false]}
  return %c : !fysched.buffer<device, tensor<16384x8xf32>>
}
}

// -----

module attributes {fy.precision = "bf16"} {
func.func @train_step(%a: !fysched.buffer<device, tensor<2x8192x8192xf32>>, %b: !fysched.buffer<device, tensor<2x8192x8xf32>>) -> !fysched.buffer<device, tensor<2x8192x8xf32>> {
  %c = fysched.alloc : <device, tensor<2x8192x8xf32>>
  fysched.launch "matmul" ins(%a, %b : !fysched.buffer<device, tensor<2x8192x8192xf32>>, !fysched.buffer<device, tensor<2x8192x8xf32>>) outs(%c : !fysched.buffer<device, tensor<2x8192x8xf32>>) {args = [false, false]}
  return %c : !fysched.buffer<device, tensor<2x8192x8xf32>>
}
}
