// RUN: fuyou-opt %s -split-input-file -verify-diagnostics --fy-param-waits | FileCheck %s
// RUN: fuyou-opt %s -split-input-file --fy-param-waits --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC
// Where the compile turned param waits off (fy-program-attrs), nothing changes.
// RUN: fuyou-opt %s -split-input-file --fy-program-attrs=param-waits=false --fy-param-waits | FileCheck %s --check-prefix=OFF
// OFF: fy.schedule.param_waits = false
// OFF-NOT: group_wait @{{[^,]*}}, @
// OFF: fysched.group_wait @g0{{$}}
// OFF-NOT: group_wait @{{[^,]*}}, @
// OFF: fy.schedule.param_waits = false

// A block's group in backward's order (its gradients land b2, w2, w1): each
// parameter is waited for right before its first read, a view's read
// counting as its parameter's, and the group (with its gradients in the
// grad_offload) goes in the order of those reads. @h.0.unused is not read
// after the wait: it keeps its place, last, with no wait.
// CHECK: fysched.group @g0 [@h.0.w1, @h.0.w2, @h.0.b2, @h.0.unused] bytes 164
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: (%[[X:[^:]*]]: {{.*}}, %[[GB2:[^:]*]]: {{.*}}, %[[GW2:[^:]*]]: {{.*}}, %[[GW1:[^:]*]]: {{.*}}, %[[GU:[^:]*]]: {{.*}})
// CHECK-NOT: fysched.group_wait
// CHECK: %[[W1:.*]] = fysched.get_param @h.0.w1
// CHECK-NEXT: %[[W2:.*]] = fysched.get_param @h.0.w2
// CHECK-NEXT: %[[B2:.*]] = fysched.get_param @h.0.b2
// CHECK-NEXT: %[[V1:.*]] = fysched.view %[[W1]]
// CHECK-NEXT: %[[Y:.*]] = fysched.alloc
// CHECK-NEXT: fysched.group_wait @g0, @h.0.w1
// CHECK-NEXT: fysched.launch "matmul" ins(%[[X]], %[[V1]]
// CHECK-NEXT: %[[Z:.*]] = fysched.alloc
// CHECK-NEXT: fysched.group_wait @g0, @h.0.w2
// CHECK-NEXT: fysched.launch "matmul" ins(%[[Y]], %[[W2]]
// CHECK-NEXT: fysched.alloc
// CHECK-NEXT: fysched.group_wait @g0, @h.0.b2
// CHECK-NEXT: fysched.launch "add" ins(%[[Z]], %[[B2]]
// CHECK-NOT: fysched.group_wait
// CHECK: fysched.grad_offload @g0(%[[GW1]], %[[GW2]], %[[GB2]], %[[GU]] :
// CHECK: return

// The program waits for one parameter by its index (w1 is parameter 2).
// EMITC: emitc.call_opaque "fy::rt::declare_group"(%{{.*}}) {args = [0 : index, #emitc.opaque<"{2, 1, 0, 3}">]}
// EMITC-LABEL: emitc.func @fy_train_step
// EMITC: emitc.call_opaque "fy::rt::group_wait_param"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"2LL">]}
// EMITC: emitc.call_opaque "fy::rt::group_wait_param"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"1LL">]}
// EMITC: emitc.call_opaque "fy::rt::group_wait_param"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">, #emitc.opaque<"0LL">]}
// EMITC-NOT: "fy::rt::group_wait"

fygraph.param @h.0.b2 trainable : tensor<4xf32>
fygraph.param @h.0.w2 trainable : tensor<4x4xf32>
fygraph.param @h.0.w1 trainable : tensor<4x4xf32>
fygraph.param @h.0.unused trainable : tensor<4xf32>
fysched.group @g0 [@h.0.b2, @h.0.w2, @h.0.w1, @h.0.unused] bytes 164

func.func @train_step(%x: !fysched.buffer<device, tensor<3x4xf32>>, %gb2: !fysched.buffer<device, tensor<4xf32>>,
                      %gw2: !fysched.buffer<device, tensor<4x4xf32>>, %gw1: !fysched.buffer<device, tensor<4x4xf32>>,
                      %gu: !fysched.buffer<device, tensor<4xf32>>)
    -> !fysched.buffer<device, tensor<3x4xf32>> {
  fysched.group_wait @g0
  %w1 = fysched.get_param @h.0.w1 : <device, tensor<4x4xf32>>
  %w2 = fysched.get_param @h.0.w2 : <device, tensor<4x4xf32>>
  %b2 = fysched.get_param @h.0.b2 : <device, tensor<4xf32>>
  %v1 = fysched.view %w1 : !fysched.buffer<device, tensor<4x4xf32>> -> !fysched.buffer<device, tensor<16xf32>>
  %y = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.launch "matmul" ins(%x, %v1 : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<16xf32>>) outs(%y : !fysched.buffer<device, tensor<3x4xf32>>) {args = [false, false]}
  %z = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.launch "matmul" ins(%y, %w2 : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%z : !fysched.buffer<device, tensor<3x4xf32>>) {args = [false, false]}
  %out = fysched.alloc : <device, tensor<3x4xf32>>
  fysched.launch "add" ins(%z, %b2 : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<4xf32>>) outs(%out : !fysched.buffer<device, tensor<3x4xf32>>)
  %o = fysched.grad_offload @g0(%gb2, %gw2, %gw1, %gu : !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4xf32>>)
  %u = fysched.group_adamw @g0 after(%o)
  return %out : !fysched.buffer<device, tensor<3x4xf32>>
}

// -----

// A tied table read rows first (after fy-rows-first): its get_param is
// above the group_wait, which stands before the table's next read, the
// logits product; that read is the table's, and a group of one parameter
// keeps its order. A group_wait_rows stays as it is.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: fysched.group_wait_rows @g1, @wte.weight
// CHECK-NEXT: %[[E:.*]] = fysched.get_param @wte.weight
// CHECK-NEXT: fysched.alloc
// CHECK-NEXT: fysched.launch "gather"
// CHECK-NEXT: %[[L:.*]] = fysched.alloc
// CHECK-NEXT: fysched.group_wait @g1, @wte.weight
// CHECK-NEXT: fysched.launch "matmul" ins(%{{.*}}, %[[E]]
// CHECK-NOT: fysched.group_wait
// CHECK: return

fygraph.param @wte.weight trainable : tensor<8x4xf32>
fysched.group @g1 [@wte.weight] bytes 128

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %y: !fysched.buffer<device, tensor<3x4xf32>>)
    -> !fysched.buffer<device, tensor<3x8xf32>> {
  fysched.group_wait_rows @g1, @wte.weight[%idx : !fysched.buffer<device, tensor<2x3xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<8x4xf32>>
  %rows = fysched.alloc : <device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<8x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%rows : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %l = fysched.alloc : <device, tensor<3x8xf32>>
  fysched.group_wait @g1
  fysched.launch "matmul" ins(%y, %e : !fysched.buffer<device, tensor<3x4xf32>>, !fysched.buffer<device, tensor<8x4xf32>>) outs(%l : !fysched.buffer<device, tensor<3x8xf32>>) {args = [false, true]}
  return %l : !fysched.buffer<device, tensor<3x8xf32>>
}

// -----

// A streamed parameter's first read is the copy of its master up; a wait
// that already names a parameter stays as it is.
// CHECK-LABEL: func.func @train_step
// CHECK-NEXT: fysched.group_wait @g0, @b
// CHECK-NEXT: %[[M:.*]] = fysched.get_param @w : <host
// CHECK-NEXT: %[[D:.*]] = fysched.alloc
// CHECK-NEXT: fysched.group_wait @g0, @w
// CHECK-NEXT: fysched.copy %[[M]], %[[D]]
// CHECK-NOT: fysched.group_wait
// CHECK: return

fygraph.param @w trainable : tensor<4x4xf32>
fygraph.param @b trainable : tensor<4xf32>
fysched.group @g0 [@w, @b] bytes 80

func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>) -> !fysched.buffer<device, tensor<4x4xf32>> {
  fysched.group_wait @g0, @b
  fysched.group_wait @g0
  %m = fysched.get_param @w : <host, tensor<4x4xf32>>
  %d = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.copy %m, %d : !fysched.buffer<host, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>
  return %d : !fysched.buffer<device, tensor<4x4xf32>>
}
