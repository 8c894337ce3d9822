// fy-choose-placement with write-behind=0 (fuyou-compile's default under a
// budget): one layer group whose four saved values (4 KiB each, a page on
// SSD) fit the device only on SSD (params=keep, --gpu-mem 28736: resident
// 16 KiB weights and the arena that placement leaves). In the profile
// (fy-choose-placement.mlir's, sed-edited) an exp takes 101 us and a page
// written to SSD 200 us, read back 10 us: each value's write is slower than
// the next value's exp. With one write in flight, forward stops before each
// write until the one before is done; with two, the writes queue on the SSD
// while forward goes on to its four-exp tail, which hides them. The plan is
// carried out with 1, 2, 4, 8 and 16 in flight: 2 is the fastest (4 and up
// predict the same step), so 2; under --cpu-mem 8192 only one write's host
// buffer and one read's fit, so 1.
// WB: activations = "ssd", {{.*}}write_behind = 2,
// WB1: activations = "ssd", {{.*}}write_behind = 1,
// A placement given (activations=ssd, as fuyou-compile --activations ssd
// passes it) is carried out with the same counts, one plan: 2, and 1 under
// --cpu-mem 8192. Given activations=keep, nothing goes to SSD and no count
// is recorded; under a --gpu-mem it cannot meet, the parameters' placement
// (params=auto) is the one nearer the budget, streamed, and the plan is
// still recorded for the memory check to refuse.
// GIVEN: activations = "ssd", write_behind = 2, given = true, evaluated = 1,
// GIVEN1: activations = "ssd", write_behind = 1, given = true, evaluated = 1,
// A given placement the passes refuse is their error.
// GIVENBAD: error: fy-place-activations: a policy is keep, host, ssd, recompute or selective, got 'bogus'
// GIVENKEEP: module attributes {fysched.plan = #fysched.plan<activations = "keep", params = "stream", given = true, evaluated = 2, predicted_step_s = {{[^,]*}}, profile = "{{[^"]*}}", state = "ssd">} {
fygraph.param @w trainable : tensor<64x64xf32>
fysched.group @g0 [@w] bytes 16384

func.func @train_step(%x: !fysched.buffer<device, tensor<16x64xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %w = fysched.get_param @w : <device, tensor<64x64xf32>>
  %m = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "matmul" ins(%x, %w : !fysched.buffer<device, tensor<16x64xf32>>, !fysched.buffer<device, tensor<64x64xf32>>) outs(%m : !fysched.buffer<device, tensor<16x64xf32>>) {args = [false, false]}
  %a1 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%m : !fysched.buffer<device, tensor<16x64xf32>>) outs(%a1 : !fysched.buffer<device, tensor<16x64xf32>>)
  %a2 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%a1 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%a2 : !fysched.buffer<device, tensor<16x64xf32>>)
  %a3 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%a2 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%a3 : !fysched.buffer<device, tensor<16x64xf32>>)
  %a4 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%a3 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%a4 : !fysched.buffer<device, tensor<16x64xf32>>)
  %t1 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%a4 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%t1 : !fysched.buffer<device, tensor<16x64xf32>>)
  %t2 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%t1 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%t2 : !fysched.buffer<device, tensor<16x64xf32>>)
  %t3 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%t2 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%t3 : !fysched.buffer<device, tensor<16x64xf32>>)
  %t4 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "exp" ins(%t3 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%t4 : !fysched.buffer<device, tensor<16x64xf32>>)
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%t4 : !fysched.buffer<device, tensor<16x64xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  %g4 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "mul" ins(%a4, %x : !fysched.buffer<device, tensor<16x64xf32>>, !fysched.buffer<device, tensor<16x64xf32>>) outs(%g4 : !fysched.buffer<device, tensor<16x64xf32>>)
  %g3 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "mul" ins(%a3, %g4 : !fysched.buffer<device, tensor<16x64xf32>>, !fysched.buffer<device, tensor<16x64xf32>>) outs(%g3 : !fysched.buffer<device, tensor<16x64xf32>>)
  %g2 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "mul" ins(%a2, %g3 : !fysched.buffer<device, tensor<16x64xf32>>, !fysched.buffer<device, tensor<16x64xf32>>) outs(%g2 : !fysched.buffer<device, tensor<16x64xf32>>)
  %g1 = fysched.alloc : <device, tensor<16x64xf32>>
  fysched.launch "mul" ins(%a1, %g2 : !fysched.buffer<device, tensor<16x64xf32>>, !fysched.buffer<device, tensor<16x64xf32>>) outs(%g1 : !fysched.buffer<device, tensor<16x64xf32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
