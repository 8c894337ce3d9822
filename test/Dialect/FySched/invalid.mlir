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

func.func @copy_async_ssd(%a: !fysched.buffer<ssd, tensor<4xf32>>, %b: !fysched.buffer<host, tensor<4xf32>>) {
  // A read from SSD is settled where its host buffer is next used, not waited for.
  // expected-error @+1 {{only a copy between host and device, or from host to SSD, runs asynchronously, not ssd to host}}
  %t = fysched.copy %a, %b : !fysched.buffer<ssd, tensor<4xf32>>, !fysched.buffer<host, tensor<4xf32>> -> !fysched.token
  fysched.wait %t
  return
}

// -----

func.func @copy_async_unwaited(%a: !fysched.buffer<host, tensor<4xf32>>, %b: !fysched.buffer<device, tensor<4xf32>>) {
  // expected-error @+1 {{an asynchronous copy's token has one use, a fysched.wait}}
  %t = fysched.copy %a, %b : !fysched.buffer<host, tensor<4xf32>>, !fysched.buffer<device, tensor<4xf32>> -> !fysched.token
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

// -----

func.func @adamw_needs_offload() {
  %r = fysched.state_read @g0
  // expected-error @+1 {{needs one grad_offload and at most one state_read, got 0 and 1}}
  %u = fysched.group_adamw @g0 after(%r)
  return
}

// -----

func.func @adamw_two_reads(%g: !fysched.buffer<device, tensor<4xf32>>) {
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<4xf32>>)
  %r = fysched.state_read @g0
  %s = fysched.state_read @g0
  // expected-error @+1 {{needs one grad_offload and at most one state_read, got 1 and 2}}
  %u = fysched.group_adamw @g0 after(%o, %r, %s)
  return
}

// -----

func.func @adamw_other_group(%g: !fysched.buffer<device, tensor<4xf32>>) {
  %o = fysched.grad_offload @g1(%g : !fysched.buffer<device, tensor<4xf32>>)
  // expected-error @+1 {{of @g0 depends on an op of @g1}}
  %u = fysched.group_adamw @g0 after(%o)
  return
}

// -----

func.func @adamw_after_update(%g: !fysched.buffer<device, tensor<4xf32>>) {
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<4xf32>>)
  %u = fysched.group_adamw @g0 after(%o)
  // expected-error @+1 {{depends only on a grad_offload and a state_read}}
  %v = fysched.group_adamw @g0 after(%u)
  return
}

// -----

func.func @write_after_read() {
  %r = fysched.state_read @g0
  // expected-error @+1 {{writes back after a group_adamw}}
  fysched.state_write @g0 after(%r)
  return
}

// -----

func.func @write_other_group(%g: !fysched.buffer<device, tensor<4xf32>>) {
  %o = fysched.grad_offload @g1(%g : !fysched.buffer<device, tensor<4xf32>>)
  %u = fysched.group_adamw @g1 after(%o)
  // expected-error @+1 {{of @g0 follows the group_adamw of @g1}}
  fysched.state_write @g0 after(%u)
  return
}

// -----

fysched.group @g0 [@w] bytes 128
func.func @rows_of_another_param(%ids: !fysched.buffer<device, tensor<2x3xi64>>) {
  // expected-error @+1 {{@v is not a parameter of @g0}}
  fysched.group_wait_rows @g0, @v[%ids : !fysched.buffer<device, tensor<2x3xi64>>]
  return
}

// -----

fysched.group @g0 [@w] bytes 128
func.func @wait_for_another_param() {
  // expected-error @+1 {{@v is not a parameter of @g0}}
  fysched.group_wait @g0, @v
  return
}

// -----

fysched.group @g0 [@w] bytes 128
func.func @rows_by_float_ids(%ids: !fysched.buffer<device, tensor<2x3xf32>>) {
  // expected-error @+1 {{ids must be i64}}
  fysched.group_wait_rows @g0, @w[%ids : !fysched.buffer<device, tensor<2x3xf32>>]
  return
}

// -----

fysched.group @g0 [@w] bytes 128
func.func @early_rows_of_a_vector(%ids: !fysched.buffer<device, tensor<2x3xi64>>, %g: !fysched.buffer<device, tensor<32xf32>>) {
  // expected-error @+1 {{grad must be a 2-D f32 table}}
  fysched.grad_offload_early @g0, @w(%g : !fysched.buffer<device, tensor<32xf32>>) except(%ids : !fysched.buffer<device, tensor<2x3xi64>>)
  return
}

// -----

fysched.group @g0 [@w] bytes 128
func.func @early_rows_of_another_param(%ids: !fysched.buffer<device, tensor<2x3xi64>>, %g: !fysched.buffer<device, tensor<8x4xf32>>) {
  // expected-error @+1 {{@v is not a parameter of @g0}}
  fysched.grad_offload_early @g0, @v(%g : !fysched.buffer<device, tensor<8x4xf32>>) except(%ids : !fysched.buffer<device, tensor<2x3xi64>>)
  return
}

// -----

// Held and never released: the table's update would never run.
fysched.group @g0 [@w] bytes 128
func.func @early_rows_held_forever(%ids: !fysched.buffer<device, tensor<2x3xi64>>, %g: !fysched.buffer<device, tensor<8x4xf32>>) {
  // expected-error @+1 {{is held, but no fysched.early_release of @w follows it}}
  fysched.grad_offload_early @g0, @w(%g : !fysched.buffer<device, tensor<8x4xf32>>) except(%ids : !fysched.buffer<device, tensor<2x3xi64>>) held
  return
}

// -----

// A release before its hand-over (or of one not held) releases nothing.
fysched.group @g0 [@w] bytes 128
func.func @early_release_first(%ids: !fysched.buffer<device, tensor<2x3xi64>>, %g: !fysched.buffer<device, tensor<8x4xf32>>) {
  // expected-error @+1 {{releases @w, which no held fysched.grad_offload_early before it hands over}}
  fysched.early_release @g0, @w
  fysched.grad_offload_early @g0, @w(%g : !fysched.buffer<device, tensor<8x4xf32>>) except(%ids : !fysched.buffer<device, tensor<2x3xi64>>)
  return
}

// -----

// A parameter twice would leave another's update unrewritten (found by
// mutating fy-async-optimizer's test).
// expected-error @+1 {{names parameter @w twice}}
fysched.group @g0 [@w, @w] bytes 128

// -----

// grad_landed frees what a grad_offload of its group copies.
fysched.group @g0 [@w] bytes 64
fysched.group @g1 [@v] bytes 64
func.func @landed_other_group(%g: !fysched.buffer<device, tensor<4x4xf32>>) {
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<4x4xf32>>)
  // expected-error @+1 {{takes a token of @g1's fysched.grad_offload}}
  fysched.grad_landed @g1(%o)
  return
}

// -----

fysched.group @g0 [@w] bytes 64
func.func @landed_no_offload() {
  %r = fysched.state_read @g0
  // expected-error @+1 {{takes a token of @g0's fysched.grad_offload}}
  fysched.grad_landed @g0(%r)
  return
}

// -----

// Freed twice: the runtime would find no copy in flight the second time.
fysched.group @g0 [@w] bytes 64
func.func @landed_twice(%g: !fysched.buffer<device, tensor<4x4xf32>>) {
  %o = fysched.grad_offload @g0(%g : !fysched.buffer<device, tensor<4x4xf32>>)
  fysched.grad_landed @g0(%o)
  // expected-error @+1 {{frees @g0's gradients twice: one fysched.grad_landed a grad_offload}}
  fysched.grad_landed @g0(%o)
  return
}
