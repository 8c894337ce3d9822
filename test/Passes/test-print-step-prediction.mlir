// RUN: fuyou-opt %s -split-input-file --test-print-step-prediction="profile=%S/Inputs/profile-slow-adamw-cuda.json" -o /dev/null | FileCheck %s
// RUN: fuyou-opt %S/Inputs/matmul-costs.mlir -split-input-file --test-print-step-prediction="profile=%S/Inputs/profile-bf16-cuda.json" -o /dev/null | FileCheck %s --check-prefix=MATMUL
// RUN: sed -e 's/"matmul_n": 1024,/"matmul_n": 2048, "matmul_n1024_flops_per_s": 7.158278826666667e11,/' -e 's/"matmul_flops_per_s": 7.158278826666667e11/"matmul_flops_per_s": 1.4316557653333334e12/' %S/Inputs/profile-bf16-cuda.json > %t.n2048.json
// RUN: fuyou-opt %S/Inputs/matmul-costs.mlir -split-input-file --test-print-step-prediction="profile=%t.n2048.json" -o /dev/null | FileCheck %s --check-prefix=MATMUL
// RUN: sed -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 8e6/' %S/Inputs/profile-slow-adamw-cuda.json > %t.adamw8.json
// RUN: fuyou-opt %S/Inputs/early-rows.mlir -split-input-file --test-print-step-prediction="profile=%t.adamw8.json" -o /dev/null | FileCheck %S/Inputs/early-rows.mlir --check-prefix=EARLY
// RUN: fuyou-opt %S/Inputs/early-rows.mlir -split-input-file --test-print-step-prediction="profile=%t.adamw8.json timeline=1" -o /dev/null | FileCheck %S/Inputs/early-rows.mlir --check-prefix=HELD
// RUN: fuyou-opt %S/Inputs/device-optimizer.mlir -split-input-file --test-print-step-prediction="profile=%S/Inputs/profile-slow-adamw-cuda.json" -o /dev/null | FileCheck %S/Inputs/device-optimizer.mlir --check-prefix=DEVOPT
// RUN: sed -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 2e6, "ssd_write_bytes_per_s": 4.096e8, "ssd_read_bytes_per_s": 4.096e8/' -e 's/"target": "cuda"/"target": "cpu"/' %S/Inputs/profile-slow-adamw-cuda.json > %t.ssd.json
// RUN: fuyou-opt %S/Inputs/ssd-writes.mlir --test-print-step-prediction="profile=%t.ssd.json" -o /dev/null | FileCheck %S/Inputs/ssd-writes.mlir --check-prefix=SSDW
// RUN: sed -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 2e6, "norm_elems_per_s": 6.5536e10, "norm_grad_elems_per_s": 3.2768e10/' -e 's/"target": "cuda"/"target": "cpu"/' %S/Inputs/profile-slow-adamw-cuda.json > %t.norm.json
// RUN: fuyou-opt %S/Inputs/norm-costs.mlir --test-print-step-prediction="profile=%t.norm.json" -o /dev/null | FileCheck %S/Inputs/norm-costs.mlir --check-prefix=NORM
// RUN: sed -e 's/"target": "cuda"/"target": "cpu"/' %S/Inputs/profile-slow-adamw-cuda.json > %t.cpu.json
// RUN: fuyou-opt %S/Inputs/cpu-cores.mlir --test-print-step-prediction="profile=%t.cpu.json" -o /dev/null | FileCheck %S/Inputs/cpu-cores.mlir --check-prefix=CORES
// RUN: sed -e 's/"target": "cuda"/"target": "cpu"/' -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 8e6/' %S/Inputs/profile-slow-adamw-cuda.json > %t.cpufast.json
// RUN: fuyou-opt %S/Inputs/cpu-cores.mlir --test-print-step-prediction="profile=%t.cpufast.json" -o /dev/null | FileCheck %S/Inputs/cpu-cores.mlir --check-prefix=FAST
// RUN: sed -e 's/"h2d_bytes_per_s": 1e18/"h2d_bytes_per_s": 9.6e7/' %S/Inputs/profile-slow-adamw-cuda.json > %t.h2d.json
// RUN: fuyou-opt %S/Inputs/gather-up.mlir --test-print-step-prediction="profile=%t.h2d.json" -o /dev/null | FileCheck %S/Inputs/gather-up.mlir --check-prefix=UP
// RUN: fuyou-opt %S/Inputs/gather-up.mlir --test-print-step-prediction="profile=%t.cpu.json" -o /dev/null | FileCheck %S/Inputs/gather-up.mlir --check-prefix=UPCPU
// RUN: sed -e 's/"target": "cuda"/"target": "cpu", "attention_flops_per_s": 4.227072e9/' %S/Inputs/profile-slow-adamw-cuda.json > %t.att.json
// RUN: fuyou-opt %S/Inputs/attention-costs.mlir --test-print-step-prediction="profile=%t.att.json" -o /dev/null | FileCheck %S/Inputs/attention-costs.mlir --check-prefix=ATT
// RUN: fuyou-opt %S/Inputs/attention-costs.mlir --test-print-step-prediction="profile=%t.cpu.json" -o /dev/null | FileCheck %S/Inputs/attention-costs.mlir --check-prefix=FREE
// RUN: sed -e 's/"target": "cuda"/"target": "cpu", "softmax_elems_per_s": 1e9/; s/"matmul_flops_per_s": 1e18/"matmul_flops_per_s": 1e10/; s/"device_mem_bytes_per_s": 1e18/"device_mem_bytes_per_s": 1e10/' %S/Inputs/profile-slow-adamw-cuda.json > %t.ce.json
// RUN: fuyou-opt %S/Inputs/cross-entropy-costs.mlir --test-print-step-prediction="profile=%t.ce.json" -o /dev/null | FileCheck %S/Inputs/cross-entropy-costs.mlir --check-prefix=CE
// RUN: sed -e 's/"target": "cuda"/"target": "cuda", "matmul_precision": "bf16", "softmax_elems_per_s": 1e9/; s/"matmul_flops_per_s": 1e18/"matmul_flops_per_s": 1e11/; s/"device_mem_bytes_per_s": 1e18/"device_mem_bytes_per_s": 1e10/' %S/Inputs/profile-slow-adamw-cuda.json > %t.cecuda.json
// RUN: fuyou-opt %S/Inputs/cross-entropy-costs-cuda.mlir -split-input-file --test-print-step-prediction="profile=%t.cecuda.json" -o /dev/null | FileCheck %S/Inputs/cross-entropy-costs-cuda.mlir --check-prefix=CE
// RUN: sed -e 's/"bf16",/"int8",/' %S/Inputs/profile-bf16-cuda.json > %t.json
// RUN: not fuyou-opt %S/Inputs/matmul-costs.mlir --test-print-step-prediction="profile=%t.json" -o /dev/null 2>&1 | FileCheck %s --check-prefix=BADPREC

// Matrix products on a GPU at bf16 (Inputs/matmul-costs.mlir, one a step):
// the profile's n = 1024 product takes 3 ms at 7.158e11 flop/s, measured
// with its operands' bf16 copies: 12 n^2 bytes at 1.2582912e10 B/s, 1 ms; so
// the product alone runs at 2^31 flop / 2 ms. Launches 1 us. Every product
// here has 2^31 flops, so the same figures come out when the profile's large
// cube is n = 2048 (twice the rate) and n = 1024 is an extra point (%t.n2048.json).
// 1. The same product: copies 1 ms + product 2 ms (its 16-bit operands and
//    fp32 result, 8 MiB, would take 0.67 ms): the calibration back.
// MATMUL: predicted step: 3.001 ms
// 2. 2048x1024 by 1024x512, the same flops: copies of 2.5 Mi elements, 6 B
//    each, 1.25 ms + 2 ms.
// MATMUL: predicted step: 3.251 ms
// 3. The same at fp32: no copies, the measured rate, 3 ms.
// MATMUL: predicted step: 3.001 ms
// 4. 16384x8192 by 8192x8: its copies (256 MiB) exceed the runtime's
//    128 MiB scratch; one GEMM, the runtime runs it in blocks that fit, so
//    still copies, 805,699,584 B = 64.03 ms, then the product, bound by
//    moving its bf16 operands and result (269,090,816 B = 21.39 ms).
// MATMUL: predicted step: 85.42 ms
// 5. The same a in two batches against a batched b: too large and not one
//    GEMM, so fp32 operands without copies, bound by moving them and the
//    result: 537,919,488 B = 42.75 ms.
// MATMUL: predicted step: 42.75 ms
// BADPREC: profile '{{.*}}': 'matmul_precision' must be bf16, fp16 or fp32


// The optimizer's queue as the runtime runs it. An untied table (@g2, 16 rows
// of 4, the next batch's 6 rows first) and two blocks (@g0 then @g1 in
// backward order), with every launch 1 us, copies free but for the rows'
// gather and scatter launches (1 us each), and AdamW at 2 params/us: @g0 and
// @g1 8 us each, the table's rows 12 us and its rest 20 us.
//
// Step 1 (t in us): backward offloads @g0 at 8, @g1 at 10, @g2 at 12; @g0's
// update runs 8-16. @g2's offload is the last: the queue (@g1) is reordered
// for the next forward, the table first. Its rows' gradient lands at 13: the
// rows run 16-28 (up at 29), then @g1 28-36, then the table's rest 36-56.
// The step's end waits for its last gradient copy, the rows' gather (13).
// Step 2 starts at 13 and waits for the rows (16 us), gathers 29-30, adds
// 30-33, waits for @g1 (3 us); backward offloads @g0 at 40 and @g1 at 42, and
// @g2's at 44 waits for the table's previous update (12 us). The queue then
// holds @g0 and @g1 (the worker busy until 56): reordered, the table's rows
// land at 57, so @g1 (landed) runs first 56-64, the rows 64-76, @g0 76-84,
// the rest 84-104. Step 2 ends at 57 (that copy again: 1 us of waits for
// gradient copies): 44 us, less than the optimizer's 48 us of work, which
// is then the step.
// (In program order instead, @g1 would run before the table's rows, and the
// rows wait would be 25 us.)
// CHECK: predicted step: 0.048 ms
// CHECK: device-to-host: busy 0.001 ms
// CHECK: optimizer: busy 0.048 ms
// CHECK: waits for updates: 0.031 ms (@g2 rows 0.016 ms, @g1 0.003 ms, @g2 before its gradient goes down 0.012 ms)
// CHECK-NEXT: waits for gradient copies: 0.001 ms

fygraph.param @wte.weight trainable : tensor<16x4xf32>
fygraph.param @h.0.w trainable : tensor<4x4xf32>
fygraph.param @h.1.w trainable : tensor<4x4xf32>
fysched.group @g0 [@h.1.w] bytes 64
fysched.group @g1 [@h.0.w] bytes 64
fysched.group @g2 [@wte.weight] bytes 256

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %dz: !fysched.buffer<device, tensor<6x4xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %s0 = fysched.state_read @g0
  %s1 = fysched.state_read @g1
  %s2 = fysched.state_read @g2
  fysched.group_wait_rows @g2, @wte.weight[%idx : <device, tensor<6xi64>>]
  %e = fysched.get_param @wte.weight : <device, tensor<16x4xf32>>
  %x = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "gather" ins(%e, %idx : !fysched.buffer<device, tensor<16x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%x : !fysched.buffer<device, tensor<6x4xf32>>)
  %x1 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%x, %x : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%x1 : !fysched.buffer<device, tensor<6x4xf32>>)
  %x2 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%x1, %x1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%x2 : !fysched.buffer<device, tensor<6x4xf32>>)
  %x3 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%x2, %x2 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%x3 : !fysched.buffer<device, tensor<6x4xf32>>)
  fysched.group_wait @g1
  %w0 = fysched.get_param @h.0.w : <device, tensor<4x4xf32>>
  %y = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%x3, %w0 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  fysched.group_wait @g0
  %w1 = fysched.get_param @h.1.w : <device, tensor<4x4xf32>>
  %z = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%y, %w1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%z : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x4xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %gw1 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%y, %dz : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%gw1 : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o0 = fysched.grad_offload @g0(%gw1 : !fysched.buffer<device, tensor<4x4xf32>>)
  %u0 = fysched.group_adamw @g0 after(%o0, %s0)
  fysched.state_write @g0 after(%u0)
  %dy = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dz, %w1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%dy : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, true]}
  %gw0 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x3, %dy : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%gw0 : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o1 = fysched.grad_offload @g1(%gw0 : !fysched.buffer<device, tensor<4x4xf32>>)
  %u1 = fysched.group_adamw @g1 after(%o1, %s1)
  fysched.state_write @g1 after(%u1)
  %dx = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dy, %w0 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%dx : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, true]}
  %ge = fysched.alloc : <device, tensor<16x4xf32>>
  fysched.launch "gather_grad" ins(%dx, %idx : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6xi64>>) outs(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %o2 = fysched.grad_offload @g2(%ge : !fysched.buffer<device, tensor<16x4xf32>>)
  %u2 = fysched.group_adamw @g2 after(%o2, %s2)
  fysched.state_write @g2 after(%u2)
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// Waits per parameter (fy-param-waits): one block whose group updates w1
// (16 params, 8 us) before w2 (48 params, 24 us), the order the forward
// reads them in, with three launches between the two reads.
//
// Step 1 (t in us): nine launches 0-9, the offload at 9, the update 9-41:
// w1 usable at 17, w2 at 41. Step 2 starts at 9, waits for w1 until 17
// (8 us), runs the first product and the three adds 17-21, waits for w2
// until 41 (20 us), then the five launches left 41-46: a step of 37 us,
// of which 28 waiting. (Waiting for the whole group at the first read, as
// a plain group_wait does: until 41, then nine launches, 41 us.)
// CHECK: predicted step: 0.037 ms
// CHECK: optimizer: busy 0.032 ms
// CHECK: waits for updates: 0.028 ms (@g0 parameters 0.028 ms)

fygraph.param @h.0.w1 trainable : tensor<4x4xf32>
fygraph.param @h.0.w2 trainable : tensor<4x12xf32>
fysched.group @g0 [@h.0.w1, @h.0.w2] bytes 256

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %x: !fysched.buffer<device, tensor<6x4xf32>>,
                      %dz: !fysched.buffer<device, tensor<6x12xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %w1 = fysched.get_param @h.0.w1 : <device, tensor<4x4xf32>>
  %w2 = fysched.get_param @h.0.w2 : <device, tensor<4x12xf32>>
  %y = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.group_wait @g0, @h.0.w1
  fysched.launch "matmul" ins(%x, %w1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x4xf32>>) outs(%y : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, false]}
  %y1 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%y, %y : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%y1 : !fysched.buffer<device, tensor<6x4xf32>>)
  %y2 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%y1, %y1 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%y2 : !fysched.buffer<device, tensor<6x4xf32>>)
  %y3 = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "add" ins(%y2, %y2 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%y3 : !fysched.buffer<device, tensor<6x4xf32>>)
  %z = fysched.alloc : <device, tensor<6x12xf32>>
  fysched.group_wait @g0, @h.0.w2
  fysched.launch "matmul" ins(%y3, %w2 : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<4x12xf32>>) outs(%z : !fysched.buffer<device, tensor<6x12xf32>>) {args = [false, false]}
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%z : !fysched.buffer<device, tensor<6x12xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %gw2 = fysched.alloc : <device, tensor<4x12xf32>>
  fysched.launch "matmul" ins(%y3, %dz : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x12xf32>>) outs(%gw2 : !fysched.buffer<device, tensor<4x12xf32>>) {args = [true, false]}
  %dy = fysched.alloc : <device, tensor<6x4xf32>>
  fysched.launch "matmul" ins(%dz, %w2 : !fysched.buffer<device, tensor<6x12xf32>>, !fysched.buffer<device, tensor<4x12xf32>>) outs(%dy : !fysched.buffer<device, tensor<6x4xf32>>) {args = [false, true]}
  %gw1 = fysched.alloc : <device, tensor<4x4xf32>>
  fysched.launch "matmul" ins(%x, %dy : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<6x4xf32>>) outs(%gw1 : !fysched.buffer<device, tensor<4x4xf32>>) {args = [true, false]}
  %o = fysched.grad_offload @g0(%gw1, %gw2 : !fysched.buffer<device, tensor<4x4xf32>>, !fysched.buffer<device, tensor<4x12xf32>>)
  %u = fysched.group_adamw @g0 after(%o)
  return %l : !fysched.buffer<device, tensor<f32>>
}
