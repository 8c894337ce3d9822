// RUN: fuyou-opt %s --fy-plan-memory | FileCheck %s

// Parameters: 100 and 12 bytes, in the runtime's 64-byte granules: 128 + 64.
// Temporaries in program order: a (400 -> 448) and c (4 -> 64) live
// together with b (40 -> 64) at the peak: 448 + 64 + 64 = 576; d comes after
// a and c are gone.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: fysched.param_bytes = 192 : i64
// CHECK-SAME: fysched.peak_temp_bytes = 576 : i64

fygraph.param @w trainable : tensor<25xf32>
fygraph.param @b : tensor<3xf32>

func.func @train_step(%x: !fysched.buffer<device, tensor<100xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %a = fysched.alloc : <device, tensor<100xf32>>
  %c = fysched.constant dense<1.0> : tensor<f32> : <device, tensor<f32>>
  %b = fysched.alloc : <device, tensor<10xf32>>
  fysched.dealloc %a : !fysched.buffer<device, tensor<100xf32>>
  fysched.dealloc %c : !fysched.buffer<device, tensor<f32>>
  %d = fysched.alloc : <device, tensor<64xf32>>
  fysched.dealloc %d : !fysched.buffer<device, tensor<64xf32>>
  fysched.dealloc %b : !fysched.buffer<device, tensor<10xf32>>
  %l = fysched.alloc : <device, tensor<f32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}
