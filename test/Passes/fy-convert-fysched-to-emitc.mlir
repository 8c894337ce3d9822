// RUN: fuyou-opt %s -split-input-file --fy-convert-fysched-to-emitc -verify-diagnostics | FileCheck %s

// fy_declare declares every parameter in declaration order (trainable or
// not), then the inputs with the vocabulary of the table that the token
// input indexes. fy_train_step takes the runtime first and the loss's
// destination last; every op is one fy::rt:: call with the runtime first;
// main hands both functions to fy::train_main.
// CHECK: emitc.include "abi/api.h"
// CHECK-LABEL: emitc.func @fy_declare
// CHECK-SAME: (%[[RT:.*]]: !emitc.ptr<!emitc.opaque<"fy::Runtime">>) attributes {specifiers = ["static"]}
// CHECK-NEXT: emitc.call_opaque "fy::rt::declare_param"(%[[RT]]) {args = [0 : index, #emitc.opaque<"\22wte\22">, #emitc.opaque<"fy::Shape{10, 4}">, #emitc.opaque<"fy::DType::F32">, true]}
// CHECK-NEXT: emitc.call_opaque "fy::rt::declare_param"(%[[RT]]) {args = [0 : index, #emitc.opaque<"\22ln.w\22">, #emitc.opaque<"fy::Shape{4}">, #emitc.opaque<"fy::DType::F32">, false]}
// CHECK-NEXT: emitc.call_opaque "fy::rt::declare_inputs"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2, 3}">, 10]}
// CHECK-NEXT: emitc.return
// CHECK-NOT: fygraph.param

// CHECK-LABEL: emitc.func @fy_train_step
// CHECK-SAME: (%[[RT:.*]]: !emitc.ptr<!emitc.opaque<"fy::Runtime">>, %[[IDX:.*]]: !emitc.opaque<"fy::View">, %[[TGT:.*]]: !emitc.opaque<"fy::View">, %[[OUT:.*]]: !emitc.opaque<"fy::View">) attributes {specifiers = ["static"]}
// CHECK: %[[W:.*]] = emitc.call_opaque "fy::rt::param"(%[[RT]]) {args = [0 : index, #emitc.opaque<"0LL">]} : {{.*}} -> !emitc.opaque<"fy::View">
// CHECK: %[[F:.*]] = emitc.call_opaque "fy::rt::param"(%[[RT]]) {args = [0 : index, #emitc.opaque<"1LL">]}
// CHECK: %[[H:.*]] = emitc.call_opaque "fy::rt::alloc"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2, 3, 4}">, #emitc.opaque<"fy::DType::F32">]}
// CHECK: emitc.call_opaque "fy::rt::gather"(%[[RT]], %[[W]], %[[IDX]], %[[H]]) {args = [0 : index, 1 : index, 2 : index, 3 : index]}
// CHECK: %[[C:.*]] = emitc.call_opaque "fy::rt::constant_splat"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{}">, #emitc.opaque<"fy::DType::F32">, #emitc.opaque<"5.000000000e-01f">]}
// CHECK: emitc.call_opaque "fy::rt::constant_i64"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2}">, #emitc.opaque<"{1LL, 2LL}">]}
// CHECK: emitc.call_opaque "fy::rt::constant_f32"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2}">, #emitc.opaque<"{1.500000000e+00f, -2.000000000e+00f}">]}
// CHECK: emitc.call_opaque "fy::rt::constant_u8"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2}">, #emitc.opaque<"{1, 0}">]}
// CHECK: emitc.call_opaque "fy::rt::constant_splat"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{}">, #emitc.opaque<"fy::DType::F32">, #emitc.opaque<"-INFINITY">]}
// CHECK: %[[M:.*]] = emitc.call_opaque "fy::rt::alloc"
// CHECK: emitc.call_opaque "fy::rt::mul"(%[[RT]], %[[H]], %[[C]], %[[M]])
// Concat takes its axis first, then the output, then the inputs.
// CHECK: %[[CC:.*]] = emitc.call_opaque "fy::rt::alloc"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2, 3, 8}">
// CHECK: emitc.call_opaque "fy::rt::concat"(%[[RT]], %[[CC]], %[[H]], %[[M]]) {args = [0 : index, #emitc.opaque<"2LL">, 1 : index, 2 : index, 3 : index]}
// Other kernels: inputs, outputs, then the static arguments as C++ literals.
// CHECK: %[[T:.*]] = emitc.call_opaque "fy::rt::alloc"
// CHECK: emitc.call_opaque "fy::rt::transpose"(%[[RT]], %[[H]], %[[T]]) {args = [0 : index, 1 : index, 2 : index, #emitc.opaque<"{0, 2, 1}">]}
// CHECK: %[[MM:.*]] = emitc.call_opaque "fy::rt::alloc"
// CHECK: emitc.call_opaque "fy::rt::matmul"(%[[RT]], %[[H]], %[[T]], %[[MM]]) {args = [0 : index, 1 : index, 2 : index, 3 : index, false, true]}
// CHECK: %[[V:.*]] = emitc.call_opaque "fy::rt::view"(%[[RT]], %[[M]]) {args = [0 : index, 1 : index, #emitc.opaque<"fy::Shape{6, 4}">]}
// CHECK: %[[L:.*]] = emitc.call_opaque "fy::rt::alloc"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{}">, #emitc.opaque<"fy::DType::F32">]}
// CHECK: %[[LP:.*]] = emitc.call_opaque "fy::rt::alloc"
// CHECK: emitc.call_opaque "fy::rt::softmax_cross_entropy"(%[[RT]], %[[V]], %[[TGT]], %[[L]], %[[LP]]) {args = [0 : index, 1 : index, 2 : index, 3 : index, 4 : index, #emitc.opaque<"INT64_MIN">, true]}
// CHECK: %[[D:.*]] = emitc.call_opaque "fy::rt::alloc"
// CHECK: %[[MASK:.*]] = emitc.call_opaque "fy::rt::alloc"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{2, 3, 4}">, #emitc.opaque<"fy::DType::U8">]}
// CHECK: emitc.call_opaque "fy::rt::dropout"(%[[RT]], %[[H]], %[[D]], %[[MASK]]) {args = [0 : index, 1 : index, 2 : index, 3 : index, #emitc.opaque<"1.0000000000000001e-01">, #emitc.opaque<"7LL">]}
// CHECK: emitc.call_opaque "fy::rt::layer_norm_nobias"(%[[RT]], %[[H]], %[[F]], %{{.*}}, %{{.*}}, %{{.*}}) {args = [0 : index, 1 : index, 2 : index, 3 : index, 4 : index, 5 : index, #emitc.opaque<"2LL">, #emitc.opaque<"9.9999997473787516e-06">]}
// A host buffer comes from host memory, and a copy to it is a transfer.
// CHECK: %[[HC:.*]] = emitc.call_opaque "fy::rt::alloc_host"
// CHECK: emitc.call_opaque "fy::rt::copy_to_host"(%[[RT]], %[[M]], %[[HC]]) {args = [0 : index, 1 : index, 2 : index]}
// CHECK: %[[G:.*]] = emitc.call_opaque "fy::rt::alloc"
// CHECK: emitc.call_opaque "fy::rt::gather_grad"(%[[RT]], %[[M]], %[[IDX]], %[[G]])
// The parameter's index comes before the gradient.
// CHECK: emitc.call_opaque "fy::rt::cpu_adamw"(%[[RT]], %[[G]]) {args = [0 : index, #emitc.opaque<"0LL">, 1 : index]}
// CHECK: emitc.call_opaque "fy::rt::dealloc"(%[[RT]], %[[G]]) {args = [0 : index, 1 : index]}
// CHECK: emitc.call_opaque "fy::rt::dealloc"(%[[RT]], %[[M]])
// The loss is copied into its destination, then freed.
// CHECK: emitc.call_opaque "fy::rt::copy"(%[[RT]], %[[L]], %[[OUT]]) {args = [0 : index, 1 : index, 2 : index]}
// CHECK-NEXT: emitc.call_opaque "fy::rt::dealloc"(%[[RT]], %[[L]])
// CHECK-NEXT: emitc.return
// CHECK-NEXT: }
// CHECK-NEXT: emitc.verbatim "int main(int argc, char **argv) {\0A  return fy::program_main(argc, argv, fy_declare, fy_train_step);\0A}"
// CHECK-NOT: fysched.
fygraph.param @wte trainable : tensor<10x4xf32>
fygraph.param @"ln.w" : tensor<4xf32>
func.func @train_step(%idx: !fysched.buffer<device, tensor<2x3xi64>>, %tgt: !fysched.buffer<device, tensor<2x3xi64>>) -> !fysched.buffer<device, tensor<f32>> {
  %w = fysched.get_param @wte : !fysched.buffer<device, tensor<10x4xf32>>
  %f = fysched.get_param @"ln.w" : !fysched.buffer<device, tensor<4xf32>>
  %h = fysched.alloc : !fysched.buffer<device, tensor<2x3x4xf32>>
  fysched.launch "gather" ins(%w, %idx : !fysched.buffer<device, tensor<10x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%h : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %c = fysched.constant dense<0.5> : tensor<f32> : !fysched.buffer<device, tensor<f32>>
  %ci = fysched.constant dense<[1, 2]> : tensor<2xi64> : !fysched.buffer<device, tensor<2xi64>>
  %cf = fysched.constant dense<[1.5, -2.0]> : tensor<2xf32> : !fysched.buffer<device, tensor<2xf32>>
  %cb = fysched.constant dense<[true, false]> : tensor<2xi1> : !fysched.buffer<device, tensor<2xi1>>
  %ninf = fysched.constant dense<0xFF800000> : tensor<f32> : !fysched.buffer<device, tensor<f32>>
  %m = fysched.alloc : !fysched.buffer<device, tensor<2x3x4xf32>>
  fysched.launch "mul" ins(%h, %c : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<f32>>) outs(%m : !fysched.buffer<device, tensor<2x3x4xf32>>)
  %cc = fysched.alloc : !fysched.buffer<device, tensor<2x3x8xf32>>
  fysched.launch "concat" ins(%h, %m : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3x4xf32>>) outs(%cc : !fysched.buffer<device, tensor<2x3x8xf32>>) {args = [2 : i64]}
  %t = fysched.alloc : !fysched.buffer<device, tensor<2x4x3xf32>>
  fysched.launch "transpose" ins(%h : !fysched.buffer<device, tensor<2x3x4xf32>>) outs(%t : !fysched.buffer<device, tensor<2x4x3xf32>>) {args = [array<i64: 0, 2, 1>]}
  %mm = fysched.alloc : !fysched.buffer<device, tensor<2x3x3xf32>>
  fysched.launch "matmul" ins(%h, %t : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x4x3xf32>>) outs(%mm : !fysched.buffer<device, tensor<2x3x3xf32>>) {args = [false, true]}
  %v = fysched.view %m : !fysched.buffer<device, tensor<2x3x4xf32>> -> !fysched.buffer<device, tensor<6x4xf32>>
  %l = fysched.alloc : !fysched.buffer<device, tensor<f32>>
  %lp = fysched.alloc : !fysched.buffer<device, tensor<6x4xf32>>
  fysched.launch "softmax_cross_entropy" ins(%v, %tgt : !fysched.buffer<device, tensor<6x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%l, %lp : !fysched.buffer<device, tensor<f32>>, !fysched.buffer<device, tensor<6x4xf32>>) {args = [-9223372036854775808 : i64, true]}
  %d = fysched.alloc : !fysched.buffer<device, tensor<2x3x4xf32>>
  %mask = fysched.alloc : !fysched.buffer<device, tensor<2x3x4xi1>>
  fysched.launch "dropout" ins(%h : !fysched.buffer<device, tensor<2x3x4xf32>>) outs(%d, %mask : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3x4xi1>>) {args = [1.000000e-01 : f64, 7 : i64]}
  %ln = fysched.alloc : !fysched.buffer<device, tensor<2x3x4xf32>>
  %mu = fysched.alloc : !fysched.buffer<device, tensor<2x3x1xf32>>
  %is = fysched.alloc : !fysched.buffer<device, tensor<2x3x1xf32>>
  fysched.launch "layer_norm_nobias" ins(%h, %f : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<4xf32>>) outs(%ln, %mu, %is : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3x1xf32>>, !fysched.buffer<device, tensor<2x3x1xf32>>) {args = [2 : i64, 9.99999974E-6 : f32]}
  %hc = fysched.alloc : !fysched.buffer<host, tensor<2x3x4xf32>>
  fysched.copy %m, %hc : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<host, tensor<2x3x4xf32>>
  %g = fysched.alloc : !fysched.buffer<device, tensor<10x4xf32>>
  fysched.launch "gather_grad" ins(%m, %idx : !fysched.buffer<device, tensor<2x3x4xf32>>, !fysched.buffer<device, tensor<2x3xi64>>) outs(%g : !fysched.buffer<device, tensor<10x4xf32>>)
  fysched.cpu_adamw @wte, %g : !fysched.buffer<device, tensor<10x4xf32>>
  fysched.dealloc %g : !fysched.buffer<device, tensor<10x4xf32>>
  fysched.dealloc %m : !fysched.buffer<device, tensor<2x3x4xf32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// The vocabulary comes from the gather whose indices are the first input,
// not from another gather; a returned parameter is copied but not freed.
// CHECK-LABEL: emitc.func @fy_declare
// CHECK: emitc.call_opaque "fy::rt::declare_inputs"(%{{.*}}) {args = [0 : index, #emitc.opaque<"fy::Shape{4}">, 7]}
// CHECK-LABEL: emitc.func @fy_train_step
// CHECK: %[[B:.*]] = emitc.call_opaque "fy::rt::param"(%{{.*}}) {args = [0 : index, #emitc.opaque<"1LL">]}
// CHECK: emitc.call_opaque "fy::rt::copy"(%{{.*}}, %[[B]], %{{.*}})
// CHECK-NOT: fy::rt::dealloc
// CHECK: emitc.return
fygraph.param @a trainable : tensor<5x2xf32>
fygraph.param @b trainable : tensor<7x2xf32>
func.func @train_step(%idx: !fysched.buffer<device, tensor<4xi64>>, %tgt: !fysched.buffer<device, tensor<4xi64>>) -> !fysched.buffer<device, tensor<7x2xf32>> {
  %a = fysched.get_param @a : !fysched.buffer<device, tensor<5x2xf32>>
  %b = fysched.get_param @b : !fysched.buffer<device, tensor<7x2xf32>>
  %ha = fysched.alloc : !fysched.buffer<device, tensor<4x2xf32>>
  fysched.launch "gather" ins(%a, %tgt : !fysched.buffer<device, tensor<5x2xf32>>, !fysched.buffer<device, tensor<4xi64>>) outs(%ha : !fysched.buffer<device, tensor<4x2xf32>>)
  %hb = fysched.alloc : !fysched.buffer<device, tensor<4x2xf32>>
  fysched.launch "gather" ins(%b, %idx : !fysched.buffer<device, tensor<7x2xf32>>, !fysched.buffer<device, tensor<4xi64>>) outs(%hb : !fysched.buffer<device, tensor<4x2xf32>>)
  return %b : !fysched.buffer<device, tensor<7x2xf32>>
}

// -----

// expected-error @+1 {{fy-convert-fysched-to-emitc needs func.func @train_step}}
module {
  func.func @step(%x: !fysched.buffer<device, tensor<4xf32>>) -> !fysched.buffer<device, tensor<4xf32>> {
    return %x : !fysched.buffer<device, tensor<4xf32>>
  }
}

// -----

// A step without the token ids, one clear error (it crashed).
module {
  // expected-error @+1 {{@train_step's first argument must be the token ids' buffer}}
  func.func @train_step() {
    return
  }
}

// -----

// A loss returned through a view of the step's own buffer: the buffer is
// copied out and then freed like a returned alloc (nothing else frees it).
// CHECK-LABEL: emitc.func @fy_train_step
// CHECK-SAME: (%[[RT:.*]]: !emitc.ptr<!emitc.opaque<"fy::Runtime">>, %{{.*}}: !emitc.opaque<"fy::View">, %{{.*}}: !emitc.opaque<"fy::View">, %[[OUT:.*]]: !emitc.opaque<"fy::View">)
// CHECK: %[[A:.*]] = emitc.call_opaque "fy::rt::alloc"(%[[RT]]) {args = [0 : index, #emitc.opaque<"fy::Shape{1}">
// CHECK: %[[V:.*]] = emitc.call_opaque "fy::rt::view"(%[[RT]], %[[A]]) {args = [0 : index, 1 : index, #emitc.opaque<"fy::Shape{}">]}
// CHECK: emitc.call_opaque "fy::rt::copy"(%[[RT]], %[[V]], %[[OUT]])
// CHECK-NEXT: emitc.call_opaque "fy::rt::dealloc"(%[[RT]], %{{.*}})
// CHECK-NEXT: emitc.return
fygraph.param @w trainable : tensor<4xf32>
func.func @train_step(%idx: !fysched.buffer<device, tensor<2x4xi64>>, %tgt: !fysched.buffer<device, tensor<2x4xi64>>) -> !fysched.buffer<device, tensor<f32>> {
  %w = fysched.get_param @w : !fysched.buffer<device, tensor<4xf32>>
  %m = fysched.alloc : !fysched.buffer<device, tensor<1xf32>>
  fysched.launch "reduce_mean" ins(%w : !fysched.buffer<device, tensor<4xf32>>) outs(%m : !fysched.buffer<device, tensor<1xf32>>)
  %l = fysched.view %m : !fysched.buffer<device, tensor<1xf32>> -> !fysched.buffer<device, tensor<f32>>
  return %l : !fysched.buffer<device, tensor<f32>>
}

// -----

// Activations on SSD: the program declares the plan's SSD arena; a buffer
// there is placed in it, and copies between it and host memory are SSD
// writes and reads.
// CHECK-LABEL: emitc.func @fy_declare
// CHECK: emitc.call_opaque "fy::rt::declare_ssd_arena"(%{{.*}}) {args = [0 : index, #emitc.opaque<"8192LL">]}
// CHECK-LABEL: emitc.func @fy_train_step
// CHECK: %[[H:.*]] = emitc.call_opaque "fy::rt::alloc_host_at"(%[[RT:.*]]) {args = [0 : index, #emitc.opaque<"0LL">,
// CHECK: %[[S:.*]] = emitc.call_opaque "fy::rt::alloc_ssd_at"(%[[RT]]) {args = [0 : index, #emitc.opaque<"4096LL">, #emitc.opaque<"fy::Shape{4}">, #emitc.opaque<"fy::DType::F32">]}
// CHECK: emitc.call_opaque "fy::rt::copy_to_ssd"(%[[RT]], %[[H]], %[[S]])
// CHECK: emitc.call_opaque "fy::rt::copy_from_ssd"(%[[RT]], %[[S]], %[[H]])
// A write started with a token (fy-async-copies) has the SSD store's
// ticket, waited for by ssd_wait, not a device copy's copy_wait.
// CHECK: %[[TK:.*]] = emitc.call_opaque "fy::rt::copy_to_ssd_start"(%[[RT]], %[[H]], %[[S]]) {{.*}} -> i64
// CHECK-NEXT: emitc.call_opaque "fy::rt::ssd_wait"(%[[RT]], %[[TK]])
func.func @train_step(%idx: !fysched.buffer<device, tensor<4xi64>>, %tgt: !fysched.buffer<device, tensor<4xi64>>) -> !fysched.buffer<device, tensor<4xi64>> attributes {fysched.ssd_arena_bytes = 8192 : i64} {
  %h = fysched.alloc {offset = 0 : i64} : !fysched.buffer<host, tensor<4xf32>>
  %s = fysched.alloc {offset = 4096 : i64} : !fysched.buffer<ssd, tensor<4xf32>>
  fysched.copy %h, %s : !fysched.buffer<host, tensor<4xf32>>, !fysched.buffer<ssd, tensor<4xf32>>
  fysched.copy %s, %h : !fysched.buffer<ssd, tensor<4xf32>>, !fysched.buffer<host, tensor<4xf32>>
  %t = fysched.copy %h, %s : !fysched.buffer<host, tensor<4xf32>>, !fysched.buffer<ssd, tensor<4xf32>> -> !fysched.token
  fysched.wait %t
  return %idx : !fysched.buffer<device, tensor<4xi64>>
}

// -----

// SSD is read and written from host memory only, and always planned.
func.func @train_step(%idx: !fysched.buffer<device, tensor<4xi64>>, %tgt: !fysched.buffer<device, tensor<4xi64>>) -> !fysched.buffer<device, tensor<4xi64>> {
  %d = fysched.alloc : !fysched.buffer<device, tensor<4xf32>>
  %s = fysched.alloc {offset = 0 : i64} : !fysched.buffer<ssd, tensor<4xf32>>
  // expected-error @+1 {{failed to legalize operation 'fysched.copy'}}
  fysched.copy %d, %s : !fysched.buffer<device, tensor<4xf32>>, !fysched.buffer<ssd, tensor<4xf32>>
  return %idx : !fysched.buffer<device, tensor<4xi64>>
}

// -----

// The device budget the compiler planned for becomes the program's default.
// CHECK-LABEL: emitc.func @fy_declare
// CHECK: emitc.call_opaque "fy::rt::declare_gpu_budget"(%{{.*}}) {args = [0 : index, #emitc.opaque<"1048576LL">]}
module attributes {fy.budget.gpu_mem = 1048576 : i64} {
  fygraph.param @w trainable : tensor<4xf32>
  func.func @train_step(%idx: !fysched.buffer<device, tensor<2x4xi64>>, %tgt: !fysched.buffer<device, tensor<2x4xi64>>) -> !fysched.buffer<device, tensor<f32>> {
    %w = fysched.get_param @w : !fysched.buffer<device, tensor<4xf32>>
    %m = fysched.alloc : !fysched.buffer<device, tensor<f32>>
    fysched.launch "reduce_mean" ins(%w : !fysched.buffer<device, tensor<4xf32>>) outs(%m : !fysched.buffer<device, tensor<f32>>)
    return %m : !fysched.buffer<device, tensor<f32>>
  }
}

// -----

// A launch of a kernel the runtime does not have (runtime/abi/entry_points.h)
// fails here, naming it, not in the C++ build of the program.
module {
  fygraph.param @w trainable : tensor<4xf32>
  func.func @train_step(%idx: !fysched.buffer<device, tensor<2x4xi64>>, %tgt: !fysched.buffer<device, tensor<2x4xi64>>) -> !fysched.buffer<device, tensor<4xf32>> {
    %w = fysched.get_param @w : !fysched.buffer<device, tensor<4xf32>>
    %y = fysched.alloc : !fysched.buffer<device, tensor<4xf32>>
    // expected-error @+1 {{fy-convert-fysched-to-emitc: the runtime has no entry point 'frobnicate' (runtime/abi/entry_points.h)}}
    fysched.launch "frobnicate" ins(%w : !fysched.buffer<device, tensor<4xf32>>) outs(%y : !fysched.buffer<device, tensor<4xf32>>)
    return %y : !fysched.buffer<device, tensor<4xf32>>
  }
}
