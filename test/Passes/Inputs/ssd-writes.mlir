// Activations on their way to SSD (fy-async-copies' tokens on SSD writes),
// on the CPU target with a launch 1 us, copies to host memory free and one
// 4096-byte page written in 10 us. Each write starts as soon as its host
// buffer holds the value; the program's thread runs on until the wait for
// it, where it blocks until the write is done.
//
// t in us: exp 0-1, write 1 on the SSD 1-11; exp 1-2, write 2 queued behind
// it 11-21; exp 2-3; the wait for write 1 blocks until 11; exp 11-12; the
// wait for write 2 until 21; exp and reduce_sum 21-23. A step of 23 us, of
// which 6 computing and 20 of the SSD's (without the waits, as when the
// writes were untracked: 20 us, the SSD's busy time).
// SSDW: predicted step: 0.023 ms
// SSDW-NEXT: compute: busy 0.006 ms
// SSDW: ssd: busy 0.02 ms

func.func @train_step(%idx: !fysched.buffer<device, tensor<6xi64>>, %x: !fysched.buffer<device, tensor<1024xf32>>)
    -> !fysched.buffer<device, tensor<f32>> {
  %y = fysched.alloc : <device, tensor<1024xf32>>
  fysched.launch "exp" ins(%x : !fysched.buffer<device, tensor<1024xf32>>) outs(%y : !fysched.buffer<device, tensor<1024xf32>>)
  %h1 = fysched.alloc : <host, tensor<1024xf32>>
  fysched.copy %y, %h1 : <device, tensor<1024xf32>>, <host, tensor<1024xf32>>
  %s1 = fysched.alloc : <ssd, tensor<1024xf32>>
  %t1 = fysched.copy %h1, %s1 : <host, tensor<1024xf32>>, <ssd, tensor<1024xf32>> -> !fysched.token
  %z = fysched.alloc : <device, tensor<1024xf32>>
  fysched.launch "exp" ins(%y : !fysched.buffer<device, tensor<1024xf32>>) outs(%z : !fysched.buffer<device, tensor<1024xf32>>)
  %h2 = fysched.alloc : <host, tensor<1024xf32>>
  fysched.copy %z, %h2 : <device, tensor<1024xf32>>, <host, tensor<1024xf32>>
  %s2 = fysched.alloc : <ssd, tensor<1024xf32>>
  %t2 = fysched.copy %h2, %s2 : <host, tensor<1024xf32>>, <ssd, tensor<1024xf32>> -> !fysched.token
  %w = fysched.alloc : <device, tensor<1024xf32>>
  fysched.launch "exp" ins(%z : !fysched.buffer<device, tensor<1024xf32>>) outs(%w : !fysched.buffer<device, tensor<1024xf32>>)
  fysched.wait %t1
  fysched.dealloc %h1 : <host, tensor<1024xf32>>
  %v = fysched.alloc : <device, tensor<1024xf32>>
  fysched.launch "exp" ins(%w : !fysched.buffer<device, tensor<1024xf32>>) outs(%v : !fysched.buffer<device, tensor<1024xf32>>)
  fysched.wait %t2
  fysched.dealloc %h2 : <host, tensor<1024xf32>>
  %u = fysched.alloc : <device, tensor<1024xf32>>
  fysched.launch "exp" ins(%v : !fysched.buffer<device, tensor<1024xf32>>) outs(%u : !fysched.buffer<device, tensor<1024xf32>>)
  %l = fysched.alloc : <device, tensor<f32>>
  fysched.launch "reduce_sum" ins(%u : !fysched.buffer<device, tensor<1024xf32>>) outs(%l : !fysched.buffer<device, tensor<f32>>)
  return %l : !fysched.buffer<device, tensor<f32>>
}
