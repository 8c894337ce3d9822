// RUN: fuyou-opt %s --fy-grad-landed | FileCheck %s --check-prefix=NEAR
// RUN: fuyou-opt %s --fy-grad-landed="distance=2" | FileCheck %s --check-prefix=FAR
// RUN: sed 's/^module {$/module attributes {fysched.plan = #fysched.plan<activations = "keep", grad_landing = 2>} {/' %s | fuyou-opt --fy-grad-landed | FileCheck %s --check-prefix=FAR
// RUN: fuyou-opt %s --fy-grad-landed="distance=2" --fy-insert-dealloc | FileCheck %s --check-prefix=LIVE
// RUN: fuyou-opt %s --fy-grad-landed="distance=2" --fy-insert-dealloc --fy-convert-fysched-to-emitc | FileCheck %s --check-prefix=EMITC
// RUN: sed -e 's/"d2h_bytes_per_s": 1e18/"d2h_bytes_per_s": 1.6384e9/' -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 1e12/' %S/Inputs/profile-slow-adamw-cuda.json > %t.link.json
// RUN: fuyou-opt %s --fy-grad-landed --test-print-step-prediction="profile=%t.link.json" -o /dev/null | FileCheck %s --check-prefix=PRED1
// RUN: fuyou-opt %s --fy-grad-landed="distance=2" --test-print-step-prediction="profile=%t.link.json" -o /dev/null | FileCheck %s --check-prefix=PRED2
// RUN: not fuyou-opt %s --fy-grad-landed="distance=-1" 2>&1 | FileCheck %s --check-prefix=BAD

// A head's large gradient (@g0, 16 KiB), a norm's small one right after it
// (@g1) and a block's after twelve more kernels (@g2).
// Distance 1 (the default, and the runtime's rule before the op): each
// group's gradients are freed at the next group's grad_offload, the last
// ones before the return.
// NEAR: %[[O0:.*]] = fysched.grad_offload @g0
// NEAR: %[[O1:.*]] = fysched.grad_offload @g1
// NEAR-NEXT: fysched.grad_landed @g0(%[[O0]])
// NEAR: %[[O2:.*]] = fysched.grad_offload @g2
// NEAR-NEXT: fysched.grad_landed @g1(%[[O1]])
// NEAR-NOT: grad_landed
// NEAR: fysched.grad_landed @g2(%[[O2]])
// NEAR-NEXT: return

// Distance 2 (given, or the plan's grad_landing): @g0's at @g2's
// grad_offload; the others' before the return, in their order.
// FAR: %[[O0:.*]] = fysched.grad_offload @g0
// FAR: %[[O1:.*]] = fysched.grad_offload @g1
// FAR-NOT: grad_landed
// FAR: %[[O2:.*]] = fysched.grad_offload @g2
// FAR-NEXT: fysched.grad_landed @g0(%[[O0]])
// FAR-NOT: grad_landed
// FAR: fysched.grad_landed @g1(%[[O1]])
// FAR-NEXT: fysched.grad_landed @g2(%[[O2]])
// FAR-NEXT: return

// The gradients stay allocated up to their grad_landed (BufferLiveness):
// the head's through the block's twelve kernels.
// LIVE: %[[GH:.*]] = fysched.alloc : <device, tensor<64x64xf32>>
// LIVE: %[[O0:.*]] = fysched.grad_offload @g0(%[[GH]]
// LIVE-NOT: fysched.dealloc %[[GH]]
// LIVE: fysched.grad_offload @g2
// LIVE-NEXT: fysched.grad_landed @g0(%[[O0]])
// LIVE-NEXT: fysched.dealloc %[[GH]]

// The program calls the runtime by group index.
// EMITC: emitc.call_opaque "fy::rt::grad_offload"(%{{.*}}) {args = [0 : index, #emitc.opaque<"2LL">, 1 : index]}
// EMITC-NEXT: emitc.call_opaque "fy::rt::grad_landed"(%{{.*}}) {args = [0 : index, #emitc.opaque<"0LL">]}

// On a GPU (launches 1 us, the link down 1.6384e9 B/s: 10 us for each
// 16 KiB gradient). Distance 1: the head's product 0-1 us, its copy 1-11,
// the norm's kernel 1-2; its grad_offload frees the head's gradient, so the
// kernels wait for that copy until 11 (9 us); the block's 12 kernels and
// product 11-24, its copy 24-34, waited for at the return (10 us): 34 us.
// PRED1: predicted step: 0.034 ms
// PRED1: device-to-host: busy 0.02016 ms
// PRED1: waits for gradient copies: 0.019 ms
// Distance 2: the block's kernels run 2-15 while the head's copy crosses;
// its copy 15-25, waited for at the return: 25 us.
// PRED2: predicted step: 0.025 ms
// PRED2: device-to-host: busy 0.02016 ms
// PRED2: waits for gradient copies: 0.01 ms

// BAD: fy-grad-landed: distance must be at least 1, got -1

module {
  fygraph.param @head trainable : tensor<64x64xf32>
  fygraph.param @norm trainable : tensor<64xf32>
  fygraph.param @w trainable : tensor<64x64xf32>
  fysched.group @g0 [@head] bytes 16384
  fysched.group @g1 [@norm] bytes 256
  fysched.group @g2 [@w] bytes 16384

  func.func @train_step(%x: !fysched.buffer<device, tensor<64x64xf32>>, %dz: !fysched.buffer<device, tensor<64x64xf32>>, %dn: !fysched.buffer<device, tensor<64xf32>>) {
    %s0 = fysched.state_read @g0
    %s1 = fysched.state_read @g1
    %s2 = fysched.state_read @g2
    %h = fysched.get_param @head : <device, tensor<64x64xf32>>
    %w = fysched.get_param @w : <device, tensor<64x64xf32>>
    %gh = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "matmul" ins(%x, %dz : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%gh : !fysched.buffer<device, tensor<64x64xf32>>) {args = [true, false]}
    %o0 = fysched.grad_offload @g0(%gh : !fysched.buffer<device, tensor<64x64xf32>>)
    %u0 = fysched.group_adamw @g0 after(%o0, %s0)
    fysched.state_write @g0 after(%u0)
    %gn = fysched.alloc : <device, tensor<64xf32>>
    fysched.launch "add" ins(%dn, %dn : !fysched.buffer<device, tensor<64xf32>>, !fysched.buffer<device, tensor<64xf32>>) outs(%gn : !fysched.buffer<device, tensor<64xf32>>)
    %o1 = fysched.grad_offload @g1(%gn : !fysched.buffer<device, tensor<64xf32>>)
    %u1 = fysched.group_adamw @g1 after(%o1, %s1)
    fysched.state_write @g1 after(%u1)
    %b1 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%dz, %dz : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b1 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b2 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b1, %b1 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b2 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b3 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b2, %b2 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b3 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b4 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b3, %b3 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b4 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b5 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b4, %b4 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b5 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b6 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b5, %b5 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b6 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b7 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b6, %b6 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b7 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b8 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b7, %b7 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b8 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b9 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b8, %b8 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b9 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b10 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b9, %b9 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b10 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b11 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b10, %b10 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b11 : !fysched.buffer<device, tensor<64x64xf32>>)
    %b12 = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "add" ins(%b11, %b11 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%b12 : !fysched.buffer<device, tensor<64x64xf32>>)
    %gw = fysched.alloc : <device, tensor<64x64xf32>>
    fysched.launch "matmul" ins(%x, %b12 : !fysched.buffer<device, tensor<64x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%gw : !fysched.buffer<device, tensor<64x64xf32>>) {args = [true, false]}
    %o2 = fysched.grad_offload @g2(%gw : !fysched.buffer<device, tensor<64x64xf32>>)
    %u2 = fysched.group_adamw @g2 after(%o2, %s2)
    fysched.state_write @g2 after(%u2)
    return
  }
}
