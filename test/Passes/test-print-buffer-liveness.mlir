// RUN: fuyou-opt %s --test-print-buffer-liveness -verify-diagnostics -o /dev/null

// Positions count every op of the block. A view extends its buffer's life;
// a dealloc does not count as a use; the returned buffer escapes.
func.func @train_step(%x: !fysched.buffer<device, tensor<4x4xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  // expected-remark @+1 {{64 bytes live [0, 5]}}
  %a = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x4xf32>>) outs(%a : !fysched.buffer<device, tensor<4x4xf32>>)
  %v = fysched.view %a : <device, tensor<4x4xf32>> -> <device, tensor<16xf32>>
  // expected-remark @+1 {{4 bytes live [3, 5]}}
  %c = fysched.constant dense<2.0> : tensor<f32> : <device, tensor<f32>>
  // expected-remark @+1 {{64 bytes live [4, 8]}}
  %b = fysched.alloc : <device, tensor<16xf32>>
  fysched.launch "mul" ins(%v, %c : !fysched.buffer<device, tensor<16xf32>>, !fysched.buffer<device, tensor<f32>>) outs(%b : !fysched.buffer<device, tensor<16xf32>>)
  fysched.dealloc %c : !fysched.buffer<device, tensor<f32>>
  // expected-remark @+1 {{4 bytes live [7, 8], escapes}}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%b : !fysched.buffer<device, tensor<16xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
