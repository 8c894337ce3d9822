// A gather from a streamed table's host master (fy-rows-first's gather_up).
// On a GPU the host gathers the step's rows (2x3 ids of a 4-float table, 96
// B) into a page-locked buffer and they go up: priced as two passes of them
// at the host-to-device rate (9.6e7 B/s here, 2 us) and a launch (1 us), and
// the buffer counts in host memory beside the host arena's 1000 B.
// UP: host: 1096 B
// UP: predicted step: 0.003 ms
// On the CPU target it is the plain gather, in host memory already: a launch
// (memory free), no staging.
// UPCPU: host: 1000 B
// UPCPU: predicted step: 0.001 ms

fygraph.param @tok.weight trainable : tensor<8x4xf32>

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>) attributes {fysched.host_arena_bytes = 1000 : i64} {
  %t = fysched.get_param @tok.weight : <host, tensor<8x4xf32>>
  %r = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather_up" ins(%t, %idx : !fysched.buffer<host, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%r : !fysched.buffer<device, tensor<2x3x4xf32>>)
  fysched.dealloc %r : <device, tensor<2x3x4xf32>>
  return
}
