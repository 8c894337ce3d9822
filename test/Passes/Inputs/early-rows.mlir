// A tied table's rows early (fy-early-offload), with the profile of
// test-print-step-prediction.mlir but AdamW at 8 params/us: a table @g1 of
// 16 rows of 4 (the batch's 6 rows 3 us, the other 40 elements 5 us), read
// rows first and by the logits product, and one block @g0 (16 params, 2 us);
// every launch 1 us, copies free but for the rows' gather and scatter
// launches (1 us each). Four launches of the block's backward follow the
// logits' backward.
//
// With the early rows (t in us): step 1 hands the table's logits part over
// at 6; the next batch's rows among its 40 other elements (as many as a
// batch's, 24) are gathered down (a launch, 6-7) and updated first (7-10,
// up at 11); the part itself goes down behind them, and its 16 elements left
// run as a piece while the worker has nothing else to do (10-12); @g0 12-14;
// the table's gradient (its batch's rows) lands at 14, the rows 14-17, up at
// 18. Step 1 ends when that copy has landed (14: 1 us of waits for gradient
// copies); step 2 starts then, waits for the rows (4 us), and the logits
// product finds the whole table done (at 18): its backward ends at 31 and
// its last copy lands at 32, a step of 18 us.
// EARLY: predicted step: 0.018 ms
// EARLY: optimizer: busy 0.01 ms
// EARLY: waits for updates: 0.004 ms (@g1 rows 0.004 ms)
// EARLY-NEXT: waits for gradient copies: 0.001 ms
//
// Without them the table's rest runs after its rows, 17-22, and step 2's
// logits product waits for it (2 us more): 20 us.
// EARLY: predicted step: 0.02 ms
// EARLY: optimizer: busy 0.01 ms
// EARLY: waits for updates: 0.006 ms (@g1 rows 0.004 ms, @g1 0.002 ms)
// EARLY-NEXT: waits for gradient copies: 0.001 ms

fygraph.param @wte.weight trainable : tensor<16x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fysched.group @g0 [@h.0.w] bytes 64
fysched.group @g1 [@wte.weight] bytes 256

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %dz: !fysched.buffer<device, tensor<6x16xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %s0 = fysched.state_read @g0
  %s1 = fysched.state_read @g1
  fysched.group_wait_rows @g1, @wte.weight[%idx : <device, tensor<6xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<16x4xf32>>
  %x = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<16x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%x : !fysched.buffer<device, tensor<6x4xf32>>)
  fysched.group_wait @g0, @h.0.w
  %w = fysched.get_param @h.0.w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  fysched.group_wait @g1
  %z = fysched.alloc : <device, tensor<6x16xf32>>
  fysched.launch "matmul" ins(%y, %e : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<16x4xf32>>) outs(%z : !fysched.buffer<device, tensor<6x16xf32>>) {args = [false, true]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x16xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %dw = fysched.alloc : <device, tensor<16x4xf32>>
  fysched.launch "matmul" ins(%dz, %y : !fysched.buffer<device, tensor<6x16xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<16x4xf32>>) {args = [true, false]}
  %dy = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dz, %e : !fysched.buffer<device, tensor<6x16xf32>>, !fysched.buffer<device, tensor<16x4xf32>>) outs(%dy : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  fysched.grad_offload_early @g1, @wte.weight(%dw : <device, tensor<16x4xf32>>) except(%idx : <device, tensor<6xi64>>)
  %d1 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%dy, %dy : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d1 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d2 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d1, %d1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d2 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d3 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d2, %d2 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d3 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d4 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d3, %d3 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d4 : !fysched.buffer<device, tensor<6x4xf32>>)
  %gw = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %d4 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%gw : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o0 = fysched.grad_offload @g0(%gw : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0, %s0)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%d4, %w : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, true]}
  %ge = fysched.alloc : <device, tensor<16x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %dx, %idx : !fysched.buffer<device, tensor<16x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %o1 = fysched.grad_offload @g1(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %u1 = fysched.group_adamw @g1 after(%o1, %s1)
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

fygraph.param @wte.weight trainable : tensor<16x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fysched.group @g0 [@h.0.w] bytes 64
fysched.group @g1 [@wte.weight] bytes 256

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %dz: !fysched.buffer<device, tensor<6x16xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %s0 = fysched.state_read @g0
  %s1 = fysched.state_read @g1
  fysched.group_wait_rows @g1, @wte.weight[%idx : <device, tensor<6xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<16x4xf32>>
  %x = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<16x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%x : !fysched.buffer<device, tensor<6x4xf32>>)
  fysched.group_wait @g0, @h.0.w
  %w = fysched.get_param @h.0.w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  fysched.group_wait @g1
  %z = fysched.alloc : <device, tensor<6x16xf32>>
  fysched.launch "matmul" ins(%y, %e : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<16x4xf32>>) outs(%z : !fysched.buffer<device, tensor<6x16xf32>>) {args = [false, true]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x16xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %dw = fysched.alloc : <device, tensor<16x4xf32>>
  fysched.launch "matmul" ins(%dz, %y : !fysched.buffer<device, tensor<6x16xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%dw : !fysched.buffer<device, tensor<16x4xf32>>) {args = [true, false]}
  %dy = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dz, %e : !fysched.buffer<device, tensor<6x16xf32>>, !fysched.buffer<device, tensor<16x4xf32>>) outs(%dy : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %d1 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%dy, %dy : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d1 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d2 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d1, %d1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d2 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d3 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d2, %d2 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d3 : !fysched.buffer<device, tensor<6x4xf32>>)
  %d4 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%d3, %d3 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%d4 : !fysched.buffer<device, tensor<6x4xf32>>)
  %gw = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %d4 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%gw : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o0 = fysched.grad_offload @g0(%gw : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0, %s0)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%d4, %w : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, true]}
  %ge = fysched.alloc : <device, tensor<16x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %dx, %idx : !fysched.buffer<device, tensor<16x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %o1 = fysched.grad_offload @g1(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %u1 = fysched.group_adamw @g1 after(%o1, %s1)
  return %l : !fysched.buffer<device, tensor<f32>>
}
