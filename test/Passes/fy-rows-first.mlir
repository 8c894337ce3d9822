// RUN: fuyou-opt %s -split-input-file --fy-rows-first | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-rows-first --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC
// RUN: fuyou-opt %s -split-input-file --fy-rows-first=ahead=1 | FileCheck %s --check-prefix=AHEAD
// Where the compile turned rows first off (fy-program-attrs), nothing changes.
// RUN: fuyou-opt %s -split-input-file --fy-program-attrs=rows-first=false --fy-rows-first | FileCheck %s --check-prefix=OFF
// OFF: fy.schedule.rows_first = false
// OFF-NOT: group_wait_rows

// A tied embedding: the gather of the step's tokens waits for their rows
// only; the group_wait moves to the table's next read, the logits product.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDX:.*]]: !fysched.buffer<device, tensor<2x3xi64>>
// CHECK-NEXT: fysched.group_wait_rows @g1, @wte.weight[%[[IDX]] : <device, tensor<2x3xi64>>]
// CHECK-NEXT: %[[E:.*]] = fysched.get_param @wte.weight
// CHECK-NEXT: %[[ROWS:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "gather" ins(%[[E]], %[[IDX]]
// CHECK-NEXT: fysched.group_wait @g0
// CHECK-NEXT: %[[W:.*]] = fysched.get_param @h.0.w
// CHECK-NEXT: %[[Y:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[W]]
// CHECK-NEXT: %[[L:.*]] = fysched.alloc
// CHECK-NEXT: fysched.group_wait @g1
// CHECK-NEXT: fysched.launch "matmul" ins(%[[Y]], %[[E]]
// CHECK-NOT: fysched.group_wait
// CHECK: return

// The program calls the runtime with the group's and the table's indices;
// fy_declare names the table and the ids a step gathers (2x3), so that
// --cpu-mem counts the rows' buffers before the first step.
// EMITC: emitc.call_opaque "fy::rt::declare_group"(%{{.*}}) {args = [0 : index, #emitc.opaque<"{0}">]}
// EMITC-NEXT: emitc.call_opaque "fy::rt::declare_rows_first"(%{{.*}}) {args = [0 : index, #emitc.opaque<"1LL">, #emitc.opaque<"0LL">, #emitc.opaque<"6LL">]}
// EMITC-NOT: declare_gather_up
// EMITC-LABEL: emitc.func @fy_train_step
// EMITC: emitc.call_opaque "fy::rt::group_wait_rows"(%{{.*}}, %{{.*}}) {args = [0 : index, #emitc.opaque<"1LL">, #emitc.opaque<"0LL">, 1 : index]}

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fysched.group @g0 [@h.0.w] bytes 64
fysched.group @g1 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %x: !fysched.buffer<device, tensor<3x4xf32>>,
                      %gw: !fysched.buffer<device, tensor<4x4xf32>>, %ge: !fysched.buffer<device, tensor<8x4xf32>>)
    -> !fysched.buffer<device, tensor<3x8xf32>> {
  fysched.group_wait @g1
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %rows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%rows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  fysched.group_wait @g0
  %w = fysched.get_param @h.0.w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<3x4xf32>>) {args = [false, false]}
  %l = fysched.alloc : <device, tensor<3x8xf32>>
  fysched.launch "matmul" ins(%y, %e : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%l : !fysched.buffer<device, tensor<3x8xf32>>) {args = [false, true]}
  %o0 = fysched.grad_offload @g0(%gw : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0)
  %o1 = fysched.grad_offload @g1(%ge : !fysched.buffer<device, tensor<8x4xf32>>)
  %u1 = fysched.group_adamw @g1 after(%o1)
  return %l : !fysched.buffer<device, tensor<3x8xf32>>
}

// -----

// An untied embedding has no other read: nothing in the step waits for the
// rest of its update (the runtime's next grad_offload of the group does).
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: fysched.group_wait_rows @g0, @tok.weight
// CHECK-NOT: fysched.group_wait
// CHECK: return

fygraph.param @tok.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@tok.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>) -> !fysched.buffer<device, tensor<2x3x4xf32>> {
  fysched.group_wait @g0
  %e = fysched.get_param @tok.weight : <device, tensor<8x4xf32>>
  %rows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%rows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  return %rows : !fysched.buffer<device, tensor<2x3x4xf32>>
}

// -----

// Where the split does not apply the group_wait stays: a gather by other
// ids (positions), a table whose first read is not a gather.
// CHECK-LABEL: func.func @train_step
// CHECK-NOT: group_wait_rows
// CHECK: fysched.group_wait @g0
// CHECK-NEXT: fysched.get_param @wpe.weight
// CHECK: fysched.group_wait @g1
// CHECK-NEXT: fysched.get_param @head.weight
// CHECK-NOT: group_wait_rows

fygraph.param @wpe.weight trainable : tensor<8x4xf32>
fygraph.param @head.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@wpe.weight] bytes 128
fysched.group @g1 [@head.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %pos: !fysched.buffer<device, tensor<2x3xi64>>,
                      %x: !fysched.buffer<device, tensor<3x4xf32>>) {
  fysched.group_wait @g0
  %p = fysched.get_param @wpe.weight : <device, tensor<8x4xf32>>
  %prows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%p, %pos : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%prows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  fysched.group_wait @g1
  %h = fysched.get_param @head.weight : <device, tensor<8x4xf32>>
  %l = fysched.alloc : <device, tensor<3x8xf32>>
  fysched.launch "matmul" ins(%x, %h : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%l : !fysched.buffer<device, tensor<3x8xf32>>) {args = [false, true]}
  return
}

// -----

// Streamed tables (masters in host memory): the gathers take the step's
// rows from the masters (gather_up) and wait only for them. The untied
// table's copy up goes; the tied table's copy, read by the logits product
// too, moves down to it with the group_wait (right before it, ahead=0, or
// `ahead` launches before it: AHEAD).
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[IDX:.*]]: !fysched.buffer<device, tensor<2x3xi64>>
// CHECK-NEXT: fysched.group_wait_rows @g0, @tok.weight[%[[IDX]] : <device, tensor<2x3xi64>>]
// CHECK-NEXT: %[[T:.*]] = fysched.get_param @tok.weight : <host, tensor<8x4xf32>>
// CHECK-NEXT: %[[R:.*]] = fysched.alloc : <device, tensor<2x3x4xf32>>
// CHECK-NEXT: fysched.launch "gather_up" ins(%[[T]], %[[IDX]] : !fysched.buffer<host, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%[[R]]
// CHECK-NEXT: fysched.group_wait_rows @g1, @wte.weight[%[[IDX]]
// CHECK-NEXT: %[[W:.*]] = fysched.get_param @wte.weight : <host
// CHECK-NEXT: %[[WR:.*]] = fysched.alloc
// CHECK-NEXT: fysched.launch "gather_up" ins(%[[W]], %[[IDX]] {{.*}} outs(%[[WR]]
// CHECK-NEXT: fysched.alloc
// CHECK-NEXT: fysched.launch "add"
// CHECK-NEXT: %[[L:.*]] = fysched.alloc : <device, tensor<3x8xf32>>
// CHECK-NEXT: fysched.group_wait @g1
// CHECK-NEXT: %[[WD:.*]] = fysched.alloc : <device, tensor<8x4xf32>>
// CHECK-NEXT: fysched.copy %[[W]], %[[WD]]
// CHECK-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[WD]] {{.*}} outs(%[[L]]
// CHECK-NOT: fysched.copy %[[T]]
// CHECK: return
// AHEAD: %[[W:.*]] = fysched.get_param @wte.weight : <host
// AHEAD: fysched.launch "gather_up" ins(%[[W]],
// AHEAD-NEXT: fysched.alloc
// AHEAD-NEXT: fysched.group_wait @g1
// AHEAD-NEXT: %[[WD:.*]] = fysched.alloc : <device, tensor<8x4xf32>>
// AHEAD-NEXT: fysched.copy %[[W]], %[[WD]]
// AHEAD-NEXT: fysched.launch "add"
// AHEAD-NEXT: fysched.alloc : <device, tensor<3x8xf32>>
// AHEAD-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[WD]]

// The largest gather_up's rows (2x3x4 floats): a GPU stages them in host
// memory, which the run's --cpu-mem counts.
// EMITC: emitc.call_opaque "fy::rt::declare_gather_up"(%{{.*}}) {args = [0 : index, #emitc.opaque<"96LL">]}
// EMITC: emitc.func @fy_train_step
// EMITC: emitc.call_opaque "fy::rt::gather_up"

fygraph.param @tok.weight trainable : tensor<8x4xf32>
fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g0 [@tok.weight] bytes 128
fysched.group @g1 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %x: !fysched.buffer<device, tensor<3x4xf32>>) {
  fysched.group_wait @g0
  %t = fysched.get_param @tok.weight : <host, tensor<8x4xf32>>
  %td = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.copy %t, %td : <host, tensor<8x4xf32>>, <device, tensor<8x4xf32>>
  %trows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%td, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%trows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  fysched.group_wait @g1
  %w = fysched.get_param @wte.weight : <host, tensor<8x4xf32>>
  %wd = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.copy %w, %wd : <host, tensor<8x4xf32>>, <device, tensor<8x4xf32>>
  %wrows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%wd, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%wrows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %sum = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "add" ins(%trows, %wrows : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>) outs(%sum : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %l = fysched.alloc : <device, tensor<3x8xf32>>
  fysched.launch "matmul" ins(%x, %wd : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%l : !fysched.buffer<device, tensor<3x8xf32>>) {args = [false, true]}
  return
}

// -----

// A tied streamed table whose group holds another parameter read before the
// logits product: the group_wait stays above that read (its master must be
// final before its copy); the table's copy still moves down.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: fysched.group_wait_rows @g0, @wte.weight
// CHECK-NEXT: %[[W:.*]] = fysched.get_param @wte.weight : <host
// CHECK-NEXT: fysched.alloc
// CHECK-NEXT: fysched.launch "gather_up" ins(%[[W]],
// CHECK-NEXT: %[[P:.*]] = fysched.get_param @wte.pos : <host
// CHECK-NEXT: %[[PD:.*]] = fysched.alloc : <device, tensor<3x4xf32>>
// CHECK-NEXT: fysched.group_wait @g0
// CHECK-NEXT: fysched.copy %[[P]], %[[PD]]
// CHECK: fysched.launch "add"
// CHECK-NEXT: fysched.alloc : <device, tensor<3x8xf32>>
// CHECK-NEXT: %[[WD:.*]] = fysched.alloc : <device, tensor<8x4xf32>>
// CHECK-NEXT: fysched.copy %[[W]], %[[WD]]
// CHECK-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[WD]]

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fygraph.param @wte.pos trainable : tensor<3x4xf32>
fysched.group @g0 [@wte.weight, @wte.pos] bytes 176

func.func @train_step(%idx: !fysched.buffer<device, tensor<1x3xi64>>) {
  fysched.group_wait @g0
  %w = fysched.get_param @wte.weight : <host, tensor<8x4xf32>>
  %wd = fysched.alloc : <device, tensor<8x4xf32>>
  fysched.copy %w, %wd : <host, tensor<8x4xf32>>, <device, tensor<8x4xf32>>
  %rows = fysched.alloc : <device, tensor<1x3x4xf32>>
  fysched.launch "gather" ins(%wd, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<1x3xi64>>) outs(%rows : !fysched.buffer<device, tensor<1x3x4xf32>>)
  %p = fysched.get_param @wte.pos : <host, tensor<3x4xf32>>
  %pd = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.copy %p, %pd : <host, tensor<3x4xf32>>, <device, tensor<3x4xf32>>
  %x = fysched.view %rows : <device, tensor<1x3x4xf32>> -> <device, tensor<3x4xf32>>
  %y = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.launch "add" ins(%x, %pd : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<3x4xf32>>) outs(%y : !fysched.buffer<device, tensor<3x4xf32>>)
  %l = fysched.alloc : <device, tensor<3x8xf32>>
  fysched.launch "matmul" ins(%y, %wd : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%l : !fysched.buffer<device, tensor<3x8xf32>>) {args = [false, true]}
  return
}
