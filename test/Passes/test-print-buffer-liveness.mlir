// RUN: fuyou-opt %s -split-input-file --test-print-buffer-liveness -verify-diagnostics -o /dev/null

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

// -----

// A gradient handed to grad_offload may still be copying until its
// grad_landed (fy-grad-landed): it lives until then; without one, until
// the op before the terminator (the runtime waits at the step's end).
fygraph.param @p trainable : tensor<4xf32>
fygraph.param @q trainable : tensor<4xf32>
fysched.group @g0 [@p] bytes 16
fysched.group @g1 [@q] bytes 16

func.func @offloads(%x: !fysched.buffer<device, tensor<4xf32>>) {
  // expected-remark @+1 {{16 bytes live [0, 6]}}
  %gp = fysched.alloc : <device, tensor<4xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%gp : !fysched.buffer<device, tensor<4xf32>>)
  %o0 = fysched.grad_offload @g0(%gp : !fysched.buffer<device, tensor<4xf32>>)
  // expected-remark @+1 {{16 bytes live [3, 8]}}
  %gq = fysched.alloc : <device, tensor<4xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%gq : !fysched.buffer<device, tensor<4xf32>>)
  %o1 = fysched.grad_offload @g1(%gq : !fysched.buffer<device, tensor<4xf32>>)
  fysched.grad_landed @g0(%o0)
  %u0 = fysched.group_adamw @g0 after(%o0)
  %u1 = fysched.group_adamw @g1 after(%o1)
  return
}

// -----

// Both buffers of an asynchronous copy are used until the wait for it.
func.func @async_copy(%x: !fysched.buffer<device, tensor<4xf32>>, %y: !fysched.buffer<device, tensor<4xf32>>) {
  // expected-remark @+1 {{16 bytes live [0, 5]}}
  %a = fysched.alloc : <device, tensor<4xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%a : !fysched.buffer<device, tensor<4xf32>>)
  // expected-remark @+1 {{16 bytes live [2, 5]}}
  %h = fysched.alloc : <host, tensor<4xf32>>
  %t = fysched.copy %a, %h : !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<host, tensor<4xf32>> -> !fysched.token
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<4xf32>>) outs(%y : !fysched.buffer<device, tensor<4xf32>>)
  fysched.wait %t
  fysched.dealloc %a : !fysched.buffer<device, tensor<4xf32>>
  fysched.dealloc %h : !fysched.buffer<host, tensor<4xf32>>
  return
}

// -----

// A table's early part (grad_offload_early) goes down in chunks until its
// own group's grad_offload, past another group's (@g1 here): it lives until
// then (position 8), not until the next grad_offload (5).
fygraph.param @wte trainable : tensor<4x4xf32>
fygraph.param @wpe trainable : tensor<4x4xf32>
fygraph.param @q trainable : tensor<4xf32>
fysched.group @g0 [@wte, @wpe] bytes 128
fysched.group @g1 [@q] bytes 16

func.func @train_step(%idx: !fysched.buffer<device, tensor<2xi64>>, %x: !fysched.buffer<device, tensor<4x4xf32>>,
                      %gq: !fysched.buffer<device, tensor<4xf32>>, %gp: !fysched.buffer<device, tensor<4x4xf32>>) {
  // expected-remark @+1 {{64 bytes live [0, 8]}}
  %dw = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "neg" ins(%x : !fysched.buffer<device, tensor<4x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<4x4xf32>>)
  fysched.grad_offload_early @g0, @wte(%dw : <device, tensor<4x4xf32>>) except(%idx : <device, tensor<2xi64>>)
  %o1 = fysched.grad_offload @g1(%gq : !fysched.buffer<device, tensor<4xf32>>)
  // expected-remark @+1 {{64 bytes live [4, 9]}}
  %g = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "neg" ins(%dw : !fysched.buffer<device, tensor<4x4xf32>>) outs(%g : !fysched.buffer<device, tensor<4x4xf32>>)
  fysched.dealloc %dw : !fysched.buffer<device, tensor<4x4xf32>>
  %u1 = fysched.group_adamw @g1 after(%o1)
  %o0 = fysched.grad_offload @g0(%g, %gp : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0)
  return
}
