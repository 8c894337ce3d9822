// A tied table's rows early (fy-early-offload), with the profile of
// test-print-step-prediction.mlir but AdamW at 8 params/us: a table @g1 of
// 16 rows of 4 (the batch's 6 rows 3 us, the other 40 elements 5 us), read
// rows first and by the logits product, and one block @g0 (16 params, 2 us);
// every launch 1 us, copies free but for the rows' gather and scatter
// launches (1 us each). Four launches of the block's backward follow the
// logits' backward.
//
// With the early rows, in the step replayed (t in us from its start; the
// slices of test-print-step-prediction timeline=1): it waits for the
// table's batch rows until 5, and hands the logits part over at 11, after
// the input gradient's product; the next batch's rows among its 40 other
// elements (as many as a batch's, 24) are gathered down (a launch, 11-12),
// updated first (12-15) and scattered up (15-16), the worker waiting for
// that launch, which reads them from its buffer; the part's 16 elements
// left run as a piece while the worker has nothing else to do (16-18),
// @g0 18-20; the table's gradient (its batch's rows) lands at 19, which
// ends the step; its rows are updated 20-23 and up at 24, where the next
// step's gather waits for them (5 us): 19 us a step.
// EARLY: predicted step: 0.019 ms
// EARLY: optimizer: busy 0.01 ms
// EARLY: waits for updates: 0.005 ms (@g1 rows 0.005 ms)
// EARLY-NEXT: waits for gradient copies: 0.001 ms
//
// Without them the table's rest runs after its rows, 23-28 in the replayed
// step, and the next step's logits product waits for it: 20 us.
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

// -----

// Held (fy-early-offload's default where the step reads the table after
// the part is written): handed over at 10, right after its product, the
// part's rows go down 10-11 and are updated 11-14, but go up only after
// the early_release (here late, at 17, after the block's gradient went
// down: the block's update, queued then, waits for the worker), 17-18; the
// worker then runs @g0 18-20, the table's batch rows 20-23 and the piece
// 23-25. The same 19 us a step, the release being late.
// HELD: slice device-to-host: down g1 early rows 10.00-11.00 us
// HELD: slice optimizer: adamw g1 early rows 11.00-14.00 us
// HELD-NEXT: slice host-to-device: up g1 early rows 17.00-18.00 us
// HELD-NEXT: slice optimizer: adamw g0 18.00-20.00 us
// HELD: slice optimizer: adamw g1 early piece 0 23.00-25.00 us

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
  fysched.grad_offload_early @g1, @wte.weight(%dw : <device, tensor<16x4xf32>>) except(%idx : <device, tensor<6xi64>>) held
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
  fysched.early_release @g1, @wte.weight
  %ge = fysched.alloc : <device, tensor<16x4xf32>>
  fysched.launch "gather_grad_add" ins(%dw, %dx, %idx : !fysched.buffer<device, tensor<16x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %o1 = fysched.grad_offload @g1(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %u1 = fysched.group_adamw @g1 after(%o1, %s1)
  return %l : !fysched.buffer<device, tensor<f32>>
}
