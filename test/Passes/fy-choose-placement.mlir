// RUN: fuyou-opt %s --fy-choose-placement="profile=%S/Inputs/profile-cpu.json" | FileCheck %s --check-prefix=FREE
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=1000 profile=%S/Inputs/profile-cpu.json" | FileCheck %s --check-prefix=STREAM
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 copy-window=0 profile=%S/Inputs/profile-cpu.json" | FileCheck %s --check-prefix=HOST
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 copy-window=0 profile=%S/Inputs/profile-cpu.json search=exhaustive" | FileCheck %s --check-prefix=EXH
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 copy-window=0 profile=%S/Inputs/profile-cpu.json" --fy-place-activations=policy=auto --fy-stream-params=policy=auto --fy-insert-dealloc --fy-plan-memory | FileCheck %s --check-prefix=APPLIED
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 copy-window=0 profile=%S/Inputs/profile-cpu.json search=exhaustive state=memory" | FileCheck %s --check-prefix=NOSSD
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 profile=%S/Inputs/profile-cpu.json" | FileCheck %s --check-prefix=INFLIGHT
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 write-behind=0 profile=%S/Inputs/profile-cpu.json" | FileCheck %s --check-prefix=BEHIND
// RUN: fuyou-opt %s --fy-choose-placement="gpu-mem=700 copy-window=0 write-behind=0 profile=%S/Inputs/profile-cpu.json" | FileCheck %s --check-prefix=HOSTAUTO
// RUN: not fuyou-opt %s --fy-choose-placement="write-behind=-1 profile=%S/Inputs/profile-cpu.json" 2>&1 | FileCheck %s --check-prefix=BADBEHIND
// RUN: sed -e 's/"device_mem_bytes_per_s": 1e9/"device_mem_bytes_per_s": 8.192e7/' -e 's/"ssd_read_bytes_per_s": 1e8/"ssd_read_bytes_per_s": 4.096e8/' -e 's/"ssd_write_bytes_per_s": 1e8/"ssd_write_bytes_per_s": 2.048e7/' %S/Inputs/profile-cpu.json > %t.slowwrite.json
// RUN: fuyou-opt %S/Inputs/write-behind-planner.mlir --fy-choose-placement="gpu-mem=28736 params=keep read-ahead=1 write-behind=0 profile=%t.slowwrite.json" | FileCheck %S/Inputs/write-behind-planner.mlir --check-prefix=WB
// RUN: fuyou-opt %S/Inputs/write-behind-planner.mlir --fy-choose-placement="gpu-mem=28736 cpu-mem=8192 params=keep read-ahead=1 write-behind=0 profile=%t.slowwrite.json" | FileCheck %S/Inputs/write-behind-planner.mlir --check-prefix=WB1
// RUN: fuyou-opt %S/Inputs/write-behind-planner.mlir --fy-choose-placement="activations=ssd params=keep read-ahead=1 write-behind=0 profile=%t.slowwrite.json" | FileCheck %S/Inputs/write-behind-planner.mlir --check-prefix=GIVEN
// RUN: fuyou-opt %S/Inputs/write-behind-planner.mlir --fy-choose-placement="activations=ssd cpu-mem=8192 params=keep read-ahead=1 write-behind=0 profile=%t.slowwrite.json" | FileCheck %S/Inputs/write-behind-planner.mlir --check-prefix=GIVEN1
// RUN: fuyou-opt %S/Inputs/write-behind-planner.mlir --fy-choose-placement="activations=keep gpu-mem=100 read-ahead=1 write-behind=0 profile=%t.slowwrite.json" | FileCheck %S/Inputs/write-behind-planner.mlir --check-prefix=GIVENKEEP
// RUN: not fuyou-opt %S/Inputs/write-behind-planner.mlir --fy-choose-placement="activations=keep,bogus profile=%t.slowwrite.json" 2>&1 | FileCheck %S/Inputs/write-behind-planner.mlir --check-prefix=GIVENBAD
// RUN: not fuyou-opt %s --fy-choose-placement="gpu-mem=1000 params=keep profile=%S/Inputs/profile-cpu.json" 2>&1 | FileCheck %s --check-prefix=NOFIT
// RUN: not fuyou-opt %s --fy-choose-placement="gpu-mem=700 cpu-mem=64 profile=%S/Inputs/profile-cpu.json" 2>&1 | FileCheck %s --check-prefix=NOFIT2
// RUN: not fuyou-opt %s --fy-choose-placement="profile=%S/Inputs/no-such-profile.json" 2>&1 | FileCheck %s --check-prefix=NOPROF
// RUN: not fuyou-opt %s --fy-choose-placement=search=random 2>&1 | FileCheck %s --check-prefix=BADSEARCH
// RUN: not fuyou-opt %s --fy-place-activations=policy=auto 2>&1 | FileCheck %s --check-prefix=NOPLAN
// RUN: sed -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 8e6/' %S/Inputs/profile-slow-adamw-cuda.json > %t.fast.json
// RUN: fuyou-opt %S/Inputs/tied-planner.mlir --fy-choose-placement="profile=%t.fast.json state=memory" | FileCheck %s --check-prefix=TIEDFAST
// RUN: sed -e 's/"d2h_bytes_per_s": 1e18/"d2h_bytes_per_s": 2.56e7/' %S/Inputs/profile-slow-adamw-cuda.json > %t.slow.json
// RUN: sed -e 's/"d2h_bytes_per_s": 1e18/"d2h_bytes_per_s": 1.6e7/' %S/Inputs/profile-slow-adamw-cuda.json > %t.slower.json
// RUN: fuyou-opt %S/Inputs/tied-planner.mlir --fy-choose-placement="profile=%t.slower.json state=memory params=keep" | FileCheck %s --check-prefix=TIEDSLOW
// RUN: fuyou-opt %S/Inputs/tied-planner.mlir --fy-choose-placement="profile=%t.slow.json state=memory" | FileCheck %s --check-prefix=TIEDAUTO
// RUN: sed -e 's/"launch_s": 1e-6/"launch_s": 1e-3/' -e 's/"d2h_bytes_per_s": 1e18/"d2h_bytes_per_s": 1.6777216e10/' -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 2.097152e9/' %S/Inputs/profile-slow-adamw-cuda.json > %t.chunks.json
// RUN: fuyou-opt %S/Inputs/early-chunks.mlir --fy-choose-placement="profile=%t.chunks.json state=memory params=keep early-chunks=paced" | FileCheck %s --check-prefix=CHUNKSPACED
// RUN: fuyou-opt %S/Inputs/early-chunks.mlir --fy-choose-placement="profile=%t.chunks.json state=memory params=keep early-chunks=all" | FileCheck %s --check-prefix=CHUNKSALL
// RUN: fuyou-opt %S/Inputs/early-chunks.mlir --fy-choose-placement="profile=%t.chunks.json state=memory params=keep" | FileCheck %s --check-prefix=CHUNKSALL
// RUN: sed -e 's/"target": "cuda"/"target": "cpu"/' %t.chunks.json > %t.chunkscpu.json
// RUN: fuyou-opt %S/Inputs/early-chunks.mlir --fy-choose-placement="profile=%t.chunkscpu.json state=memory params=keep" | FileCheck %s --check-prefix=CHUNKSCPU
// RUN: not fuyou-opt %S/Inputs/early-chunks.mlir --fy-choose-placement="early-chunks=some" 2>&1 | FileCheck %s --check-prefix=BADCHUNKS
// RUN: sed -e 's/"d2h_bytes_per_s": 1e18/"d2h_bytes_per_s": 1.6384e9/' -e 's/"adamw_params_per_s": 2e6/"adamw_params_per_s": 1e12/' %S/Inputs/profile-slow-adamw-cuda.json > %t.link.json
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.link.json state=memory" | FileCheck %s --check-prefix=LANDFAR
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.link.json state=memory gpu-mem=90000" | FileCheck %s --check-prefix=LANDFAR
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.link.json state=memory gpu-mem=70000 params=keep" | FileCheck %s --check-prefix=LANDNEAR
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.link.json state=memory gpu-mem=70000" | FileCheck %s --check-prefix=LANDSTREAM
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.link.json state=memory gpu-mem=70000 search=exhaustive" | FileCheck %s --check-prefix=LANDSTREAM
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.link.json state=memory grad-landing=1" | FileCheck %s --check-prefix=LANDNEAR
// RUN: sed -e 's/"target": "cuda"/"target": "cpu"/' %t.link.json > %t.linkcpu.json
// RUN: fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="profile=%t.linkcpu.json state=memory" | FileCheck %s --check-prefix=LANDNEAR
// RUN: not fuyou-opt %S/fy-grad-landed.mlir --fy-choose-placement="grad-landing=-2" 2>&1 | FileCheck %s --check-prefix=BADLAND
// RUN: fuyou-opt %S/Inputs/tied-planner.mlir --fy-choose-placement="profile=%t.fast.json state=memory early-rows=no" | FileCheck %s --check-prefix=TIEDNO
// RUN: fuyou-opt %S/Inputs/tied-planner.mlir --fy-choose-placement="profile=%t.fast.json state=memory gpu-mem=1000" | FileCheck %s --check-prefix=STREAM1000
// RUN: not fuyou-opt %S/Inputs/tied-planner.mlir --fy-device-optimizer=last=1 --fy-choose-placement="profile=%t.fast.json state=memory gpu-mem=1000" 2>&1 | FileCheck %s --check-prefix=DEVKEEP
// RUN: not fuyou-opt %S/Inputs/tied-planner.mlir --fy-device-optimizer=last=1 --fy-choose-placement="profile=%t.fast.json state=memory params=stream" 2>&1 | FileCheck %s --check-prefix=DEVSTREAM
// RUN: fuyou-opt %S/Inputs/batched-matmul.mlir --fy-choose-placement="profile=%S/Inputs/profile-small-matmul-cpu.json state=memory" | FileCheck %s --check-prefix=BATCHCPU
// RUN: sed -e 's/"h2d_bytes_per_s": 1e9/"h2d_bytes_per_s": 1e6/' -e 's/"d2h_bytes_per_s": 1e9/"d2h_bytes_per_s": 1e6/' %S/Inputs/profile-cpu.json > %t.slowlink.json
// RUN: fuyou-opt %S/Inputs/selective.mlir --fy-choose-placement="gpu-mem=1300 copy-window=0 profile=%t.slowlink.json state=memory" | FileCheck %s --check-prefix=SELPLAN
// RUN: fuyou-opt %S/Inputs/selective.mlir --fy-choose-placement="gpu-mem=1300 copy-window=0 profile=%t.slowlink.json state=memory search=exhaustive" | FileCheck %s --check-prefix=SELPLAN
// RUN: fuyou-opt %S/Inputs/selective.mlir --fy-choose-placement="gpu-mem=1200 copy-window=0 profile=%t.slowlink.json state=memory search=exhaustive" | FileCheck %s --check-prefix=SELPLAN2
// RUN: fuyou-opt %S/Inputs/batched-matmul.mlir --fy-choose-placement="profile=%S/Inputs/profile-small-matmul-cuda.json state=memory" | FileCheck %s --check-prefix=BATCHGPU

// The two-segment step of fy-place-activations.mlir: parameters 512 bytes,
// and under keep-all a 1,088-byte device total with the arena.
// No budget: nothing moves (keeping is never slower in the model). 10 plans
// tried, the uniform ones (5 policies, weights kept or streamed): keeping
// everything fits, so no class is priced. That plan is its own lower bound
// (no stream busier than keeping everything) and the fastest uniform plan.
// FREE: fysched.plan = #fysched.plan<activations = "keep,keep", evaluated = 10, predicted_step_s = [[B:[0-9.E-]+]] : f64, uniform = "keep/keep", uniform_step_s = [[B]] : f64, lower_bound_s = [[B]] : f64,

// 1,000 bytes: streaming the weights fits; it is the cheapest single change.
// STREAM: activations = "keep,keep", params = "stream"

// 700 bytes, with each copy between host and device waited for right after
// it (copy-window=0): weights streamed and the first segment's activation
// waits in host memory (cheaper than recomputing its matmul; ssd is slower
// still).
// HOST: activations = "host,keep", params = "stream", {{.*}}predicted_step_s = [[T:[0-9.E-]+]] : f64
// Every combination (5 x 5 x 2) agrees, to the same predicted time.
// EXH: activations = "host,keep", params = "stream", {{.*}}evaluated = 50, predicted_step_s = [[T:[0-9.E-]+]] : f64
// With the moments in memory the program runs without --ssd, so no
// activation can go to SSD: 4 x 4 x 2 plans.
// NOSSD: activations = "host,keep", {{.*}}evaluated = 32,

// With the default window (4 launches), a copy to the host holds its source
// on the device while it runs: host,keep then needs 704 bytes, and the
// plan that fits 700 sends the first segment's activation on to SSD.
// INFLIGHT: activations = "ssd,host", params = "stream", {{.*}}write_behind = 4,
// With write-behind=0 each plan with activations on SSD is tried with 1, 2,
// 4, 8 and 16 writes in flight. Here the SSD bounds the step (the first
// segment's two values written and read back, a 4096-byte page each at
// 100 B/us: 164 of its 169 us), so waiting for the first write before the
// second costs nothing: every count predicts the same step, and the fewest
// host buffers win the tie.
// BEHIND: activations = "ssd,host", {{.*}}write_behind = 1,
// A plan with nothing on SSD has no write-behind to choose.
// HOSTAUTO: activations = "host,keep"
// HOSTAUTO-NOT: write_behind
// BADBEHIND: fy-choose-placement: write-behind must be at least 0 (0: chosen), got -1

// The chosen plan carried out: %a and %h (segment 0) go to host memory, the weights come in
// per phase, and the planned total fits: 0 resident + 576 arena <= 700.
// APPLIED: fysched.streamed_params
// APPLIED: func.func @train_step({{.*}}) {{.*}}fysched.arena_bytes = 576 : i64
// APPLIED: fysched.copy {{.*}} : <device, tensor<4x8xf32>>, <host, tensor<4x8xf32>>
// APPLIED-NOT: <host, tensor<4x8xf32>>, <ssd

// A batched product of 64 slices of 64^3 (Inputs/batched-matmul.mlir), with
// 64^3 products at 1e9 flop/s and 256^3 at 1e10: the CPU runs it slice by
// slice (64 x 2^19 flops at 1e9: 33.55 ms), the GPU as one launch of 2^25
// flops (at the 256^3 rate: 3.355 ms); 1 us launch on top.
// BATCHCPU: predicted_step_s = 0.0335554320
// BATCHGPU: predicted_step_s = 0.00335644320

// Inputs/selective.mlir (device bytes with its 512 of parameters: keep,keep
// 1408, selective,keep 1280, recompute,keep and host,keep 1152) under 1300
// bytes, over a link of 1 MB/s: host pays 0.53 ms of copies (streaming the
// weights pays for copies too), recompute 24.4 us (its weight product
// again), selective 22.9 us (one gelu again). Greedy and exhaustive agree.
// Under 1200 bytes selective no longer fits, and recompute is next.
// SELPLAN: activations = "selective,keep", evaluated = {{[0-9]+}}, predicted_step_s = 2.2896
// SELPLAN2: activations = "recompute,keep", evaluated = {{[0-9]+}}, predicted_step_s = 2.4408

// NOFIT: fy-choose-placement: no placement fits --gpu-mem 1000 (the least device memory found: 1088 bytes)
// Each budget alone can be met (576 device bytes, no host arena), not both:
// the error says what each needs beside the other.
// NOFIT2: fy-choose-placement: no placement fits --gpu-mem 700 and --cpu-mem 64 together: the plans within --gpu-mem need at least 8192 bytes of host memory, those within --cpu-mem at least 704 bytes of device memory
// NOPROF: fy-choose-placement: cannot read profile '{{.*}}no-such-profile.json'
// BADSEARCH: fy-choose-placement: search must be classes or exhaustive, got 'random'
// NOPLAN: fy-place-activations: policy=auto needs fy-choose-placement first (no fysched.plan)

fygraph.param @w1 trainable : tensor<8x8xf32>
fygraph.param @w2 trainable : tensor<8x8xf32>
fysched.group @g0 [@w2] bytes 256
fysched.group @g1 [@w1] bytes 256

func.func @train_step(%x: !fysched.buffer<device, tensor<4x8xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %w1 = fysched.get_param @w1 : <device, tensor<8x8xf32>>
  %a = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%x, %w1 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%a : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  %h = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "gelu" ins(%a : !fysched.buffer<device, tensor<4x8xf32>>) outs(%h : !fysched.buffer<device, tensor<4x8xf32>>)
  %w2 = fysched.get_param @w2 : <device, tensor<8x8xf32>>
  %b = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "matmul" ins(%h, %w2 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<8x8xf32>>) outs(%b : !fysched.buffer<device, tensor<4x8xf32>>) {args = [false, true]}
  %bv = fysched.view %b : <device, tensor<4x8xf32>> -> <device, tensor<32xf32>>
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%b : !fysched.buffer<device, tensor<4x8xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %g1 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%b, %bv : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<32xf32>>) outs(%g1 : !fysched.buffer<device, tensor<4x8xf32>>)
  %g0 = fysched.alloc : <device, tensor<4x8xf32>>
  fysched.launch "unary_grad_gelu" ins(%a, %h, %g1 : !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>, !fysched.buffer<device, tensor<4x8xf32>>) outs(%g0 : !fysched.buffer<device, tensor<4x8xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}

// A tied table (Inputs/tied-planner.mlir, the step of
// Inputs/early-rows.mlir before placement): its early rows are kept where
// the model predicts the step faster with them. With copies free and AdamW
// at 8 params/us, 18 us against 20 (worked in test-print-step-prediction.mlir):
// TIEDFAST: activations = "keep,keep", {{.*}}early_rows = "yes", early_chunks = "paced"
// With AdamW at 2 params/us and the device-to-host link at 16 B/us, in the
// step replayed (read off test-print-step-prediction's timeline, the
// placement passes run forced): the table's part (256 B, one chunk: 16 us)
// goes down at 30 us, right behind the next batch's rows among it (7 us
// with the gather), and ahead of the block's gradient (4 us), which lands
// at 50 us instead of 33; its update runs after those rows' and the
// piece's, the table's batch rows are up at 75, and the forward has waited
// 18 us for them: 57 us a step. Without: the block lands at 33 and updates
// first, the rows are up at 54, the rest of the table at 76, and the
// forward's logits product waits 18 us for it: 56 us a step. The planner
// takes the faster. (With the weights resident, params=keep: streamed, the
// table is never uploaded after its update, its gather reads the host
// master.)
// TIEDSLOW: activations = "keep,keep", {{.*}}early_rows = "no"
// Unpinned, at 25.6 B/us, the planner weighs streaming the weights too
// (fy-rows-first's gather_up reads the batch's rows from the host master,
// and the table's copy up for the logits product is free on this profile's
// link): 49.75 us a step with the early rows, 51.5 without them, against
// 48.75 resident with them, where the block's gradient lands (at 44 us)
// while the worker waits for the early rows' scatter up (43.5-44.5) and its
// update goes before the table's piece (their figures from the placement
// passes run forced, --test-print-step-prediction timeline=1).
// TIEDAUTO: activations = "keep,keep", early_rows = "yes", early_chunks = "paced", evaluated = {{[0-9]+}}, predicted_step_s = 4.875{{[0-9]*}}E-5
// A table of three 16 MiB chunks (Inputs/early-chunks.mlir), each launch
// 1 ms, a chunk across the link in 1 ms, a piece of 4 Mi parameters updated
// in 2 ms. Paced, the table's last chunk goes down behind its own rows at
// the end of backward, and the step's end waits 2 ms for the gradient
// copies: 16 ms a step. All at once, the chunks have crossed while the
// block's backward runs, and it waits 1 ms: 15 ms, which the planner takes
// when free to choose.
// CHUNKSPACED: early_rows = "yes", early_chunks = "paced", {{.*}}predicted_step_s = 0.0160000{{[0-9]*}} : f64
// CHUNKSALL: early_rows = "yes", early_chunks = "all", {{.*}}predicted_step_s = 0.0150000{{[0-9]*}} : f64
// On the CPU target there is no link to pace: not tried.
// CHUNKSCPU: early_chunks = "paced"
// BADCHUNKS: fy-choose-placement: early-chunks must be paced, all or auto, got 'some'
// A head's gradient followed closely by a small group's (fy-grad-landed.mlir,
// whose figures are worked there): on a GPU its memory freed two groups on
// (25 us a step) rather than at the next (34 us), where that fits: the
// device holds 66,048 B freed at the next, 82,432 B two groups on (the
// head's gradient beside the block's kernels), so not under 70,000 B with
// the parameters resident. Given, or on the CPU target (its grad_offload
// copies before it returns), the planner does not try it.
// LANDFAR: grad_landing = 2, {{.*}}predicted_step_s = 2.50000{{[0-9]*}}E-5 : f64
// With the parameters free to stream, the search runs again with 2: the
// weights streamed (free at this profile's link) make the room, 25 us.
// LANDSTREAM: params = "stream", {{.*}}grad_landing = 2, {{.*}}predicted_step_s = 2.50000{{[0-9]*}}E-5 : f64
// LANDNEAR-NOT: grad_landing
// LANDNEAR: predicted_step_s = 3.{{[0-9]*}}E-5 : f64
// BADLAND: fy-choose-placement: grad-landing must be at least 0 (0: chosen), got -2
// Forced either way, the planner does not try the other.
// TIEDNO: activations = "keep,keep", early_rows = "no"
// A group updated on the device (fy-device-optimizer) updates the resident
// working copy: the planner keeps the parameters resident, and refuses to
// stream them when asked to. In 1000 B the tied step fits only with its
// weights streamed; with the table's group on the device nothing fits (its
// moments, 512 B, on top of the resident 1088 B).
// STREAM1000: params = "stream"
// DEVKEEP: error: fy-choose-placement: no placement fits --gpu-mem 1000 (the least device memory found: 1600 bytes)
// DEVSTREAM: error: fy-choose-placement: params=stream: the groups fy-device-optimizer put on the device need resident parameters
