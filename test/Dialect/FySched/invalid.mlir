// RUN: fuyou-opt %s -split-input-file -verify-diagnostics

// expected-error @+1 {{unknown memory space 'gpu' (device, host, ssd)}}
func.func @unknown_space(%b: !fysched.buffer<gpu, tensor<4xf32>>) {
  return
}

// -----

// expected-error @+1 {{buffers hold statically shaped tensors}}
func.func @dynamic(%b: !fysched.buffer<device, tensor<?x4xf32>>) {
  return
}

// -----

func.func @view_count(%b: !fysched.buffer<device, tensor<2x4xf32>>) {
  // expected-error @+1 {{a view keeps the memory space, element type and element count}}
  %v = fysched.view %b : !fysched.buffer<device, tensor<2x4xf32>> -> !fysched.buffer<device, tensor<9xf32>>
  return
}

// -----

func.func @view_space(%b: !fysched.buffer<device, tensor<2x4xf32>>) {
  // expected-error @+1 {{a view keeps the memory space, element type and element count}}
  %v = fysched.view %b : !fysched.buffer<device, tensor<2x4xf32>> -> !fysched.buffer<host, tensor<8xf32>>
  return
}

// -----

func.func @view_elem(%b: !fysched.buffer<device, tensor<2x4xf32>>) {
  // expected-error @+1 {{a view keeps the memory space, element type and element count}}
  %v = fysched.view %b : !fysched.buffer<device, tensor<2x4xf32>> -> !fysched.buffer<device, tensor<8xi64>>
  return
}

// -----

func.func @in_place(%b: !fysched.buffer<device, tensor<4xf32>>) {
  // expected-error @+1 {{a buffer is both read and written; kernels do not work in place}}
  fysched.launch "exp" ins(%b : !fysched.buffer<device, tensor<4xf32>>) outs(%b : !fysched.buffer<device, tensor<4xf32>>)
  return
}

// -----

func.func @no_outs(%b: !fysched.buffer<device, tensor<4xf32>>) {
  // expected-error @+1 {{a kernel writes at least one buffer}}
  "fysched.launch"(%b) <{kernel = "exp", operandSegmentSizes = array<i32: 1, 0>}> : (!fysched.buffer<device, tensor<4xf32>>) -> ()
  return
}

// -----

func.func @copy_count(%a: !fysched.buffer<device, tensor<4xf32>>, %b: !fysched.buffer<host, tensor<5xf32>>) {
  // expected-error @+1 {{source and target differ in element count or type}}
  fysched.copy %a, %b : !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<host, tensor<5xf32>>
  return
}

// -----

func.func @copy_type(%a: !fysched.buffer<device, tensor<4xf32>>, %b: !fysched.buffer<host, tensor<4xi64>>) {
  // expected-error @+1 {{source and target differ in element count or type}}
  fysched.copy %a, %b : !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<host, tensor<4xi64>>
  return
}

// -----

func.func @constant_shape() {
  // expected-error @+1 {{value type differs from the buffer's tensor type}}
  %c = fysched.constant dense<1.0> : tensor<4xf32> : !fysched.buffer<device, tensor<2x2xf32>>
  return
}

// -----

func.func @constant_elem() {
  // expected-error @+1 {{value type differs from the buffer's tensor type}}
  %c = fysched.constant dense<1> : tensor<4xi64> : !fysched.buffer<device, tensor<4xf32>>
  return
}
