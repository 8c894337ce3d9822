// RUN: fuyou-opt %s -split-input-file --fy-plan-memory | FileCheck %s

// Parameters: 100 and 12 bytes, in the runtime's 64-byte granules: 128 + 64.
// Temporaries in program order: a (400 -> 448) and c (4 -> 64) live
// together with b (40 -> 64) at the peak: 448 + 64 + 64 = 576; d comes after
// a and c are gone.
//
// Offsets, largest first, each at the lowest place free of buffers alive at
// the same time (ties in program order): a (448) at 0; d (256) at 0, as a is
// gone by then; c (64) at 448, above a; b (64) meets a, c and d, so it goes
// above c, at 512; l (64) meets nothing: 0. The arena is 576 bytes, the peak.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: fysched.arena_bytes = 576 : i64
// CHECK-SAME: fysched.param_bytes = 192 : i64
// CHECK-SAME: fysched.peak_temp_bytes = 576 : i64
// CHECK-NEXT: fysched.alloc {offset = 0 : i64} : <device, tensor<100xf32>>
// CHECK-NEXT: fysched.constant dense<1.000000e+00> : tensor<f32> {offset = 448 : i64}
// CHECK-NEXT: fysched.alloc {offset = 512 : i64} : <device, tensor<10xf32>>
// CHECK: fysched.alloc {offset = 0 : i64} : <device, tensor<64xf32>>
// CHECK: fysched.alloc {offset = 0 : i64} : <device, tensor<f32>>

fygraph.param @w trainable : tensor<25xf32>
fygraph.param @b : tensor<3xf32>

func.func @train_step(%x: !fysched.buffer<device, tensor<100xf32>>) -> !fysched.buffer<device, tensor<f32>> {
  %a = fysched.alloc : <device, tensor<100xf32>>
  %c = fysched.constant dense<1.0> : tensor<f32> : <device, tensor<f32>>
  %b = fysched.alloc : <device, tensor<10xf32>>
  fysched.dealloc %a : !fysched.buffer<device, tensor<100xf32>>
  fysched.dealloc %c : !fysched.buffer<device, tensor<f32>>
  %d = fysched.alloc : <device, tensor<64xf32>>
  fysched.dealloc %d : !fysched.buffer<device, tensor<64xf32>>
  fysched.dealloc %b : !fysched.buffer<device, tensor<10xf32>>
  %l = fysched.alloc : <device, tensor<f32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// Host buffers (activations waiting for backward) have an arena of their own.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: fysched.arena_bytes = 64 : i64
// CHECK-SAME: fysched.host_arena_bytes = 448 : i64
// CHECK-NEXT: fysched.alloc {offset = 0 : i64} : <host, tensor<100xf32>>
// CHECK-NEXT: fysched.alloc {offset = 0 : i64} : <device, tensor<4xf32>>
func.func @train_step() {
  %h = fysched.alloc : <host, tensor<100xf32>>
  %d = fysched.alloc : <device, tensor<4xf32>>
  fysched.dealloc %d : !fysched.buffer<device, tensor<4xf32>>
  fysched.dealloc %h : !fysched.buffer<host, tensor<100xf32>>
  return
}

// -----

// Buffers on SSD have an arena of their own too. With any there, SSD and host
// buffers take whole 4096-byte pages (O_DIRECT moves pages): h1 (400 bytes)
// and h2 (40) live together, a page each; s1 (400) and s2 (5000, two pages)
// too. Device buffers keep 64-byte granules.
// CHECK-LABEL: func.func @train_step
// CHECK-SAME: fysched.arena_bytes = 64 : i64
// CHECK-SAME: fysched.host_arena_bytes = 8192 : i64
// CHECK-SAME: fysched.ssd_arena_bytes = 12288 : i64
// CHECK-NEXT: fysched.alloc {offset = 0 : i64} : <host, tensor<100xf32>>
// CHECK-NEXT: fysched.alloc {offset = 4096 : i64} : <host, tensor<10xf32>>
// CHECK-NEXT: fysched.alloc {offset = 8192 : i64} : <ssd, tensor<100xf32>>
// CHECK-NEXT: fysched.alloc {offset = 0 : i64} : <ssd, tensor<1250xf32>>
// CHECK-NEXT: fysched.alloc {offset = 0 : i64} : <device, tensor<4xf32>>
func.func @train_step() {
  %h1 = fysched.alloc : <host, tensor<100xf32>>
  %h2 = fysched.alloc : <host, tensor<10xf32>>
  %s1 = fysched.alloc : <ssd, tensor<100xf32>>
  %s2 = fysched.alloc : <ssd, tensor<1250xf32>>
  %d = fysched.alloc : <device, tensor<4xf32>>
  fysched.dealloc %d : !fysched.buffer<device, tensor<4xf32>>
  fysched.dealloc %h1 : !fysched.buffer<host, tensor<100xf32>>
  fysched.dealloc %h2 : !fysched.buffer<host, tensor<10xf32>>
  fysched.dealloc %s1 : !fysched.buffer<ssd, tensor<100xf32>>
  fysched.dealloc %s2 : !fysched.buffer<ssd, tensor<1250xf32>>
  return
}
