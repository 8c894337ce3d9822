// The price of one launch on its stream: what the machine profile's rates
// say a kernel of its shapes takes (bytes moved, transcendentals, flops of
// its products), or what a trace measured for it (--kernel-times).
#include "passes/Analysis/LaunchCost.h"
#include "passes/Analysis/StepPhases.h"
#include "dialects/FySched/FySchedOps.h"
#include "runtime/abi/sizes.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
namespace fs = fuyou::fysched;

namespace fuyou {

int64_t launchBytes(fs::LaunchOp launch) {
  int64_t bytes = 0;
  for (Value v : launch.getIns())
    bytes += bufferBytes(v.getType());
  for (Value v : launch.getOuts())
    bytes += bufferBytes(v.getType());
  return bytes;
}

double launchCost(fs::LaunchOp launch, const Profile &p, bool cuda, bool operands16, bool &timed) {
  const int64_t bytes = launchBytes(launch);
  StringRef kernel = launch.getKernel();
  if (auto it = p.kernelTimes.find(kernel); it != p.kernelTimes.end())
    if (auto t = it->getValue().find(bytes); t != it->getValue().end()) {
      timed = true;
      return t->second;
    }
  // A gather from a streamed table's host master (fy-rows-first): on a
  // GPU the host gathers the rows and they go up, chunk after chunk.
  if (kernel == "gather_up" && cuda)
    return 2 * bufferBytes(launch.getOuts()[0].getType()) / p.h2dBytes + p.launchS;
  double t = bytes / p.memBytes;
  // Kernels whose exp/tanh bound them, by elements of their largest operand.
  {
    double elems = 0;
    for (Value v : launch->getOperands())
      if (auto b = dyn_cast<fs::BufferType>(v.getType()))
        elems = std::max(elems, double(b.getTensorType().getNumElements()));
    if (kernel.starts_with("swiglu_packed"))
      elems /= 2;  // its largest operand holds both halves: one exp a pair
    StringRef fn = kernel;
    fn.consume_front("unary_grad_");
    fn.consume_front("bias_");
    fn.consume_back("_sum");  // bias_*_grad_sum: the gradient summed as it is computed
    fn.consume_back("_grad");
    if (p.transcendentalElems > 0 && (fn == "gelu" || fn == "gelu_tanh" || fn == "silu" || fn == "swiglu" || fn == "swiglu_packed" || fn == "sigmoid" ||
                                       fn == "tanh" || fn == "exp" || fn == "erf"))
      t = std::max(t, elems / p.transcendentalElems);
    if (p.softmaxElems > 0 && (kernel == "softmax" || kernel == "masked_softmax" ||
                                kernel.starts_with("softmax_cross_entropy")))
      t = std::max(t, elems / p.softmaxElems);
    bool norm = kernel.starts_with("layer_norm") || kernel.starts_with("rms_norm");
    bool normGrad = norm && kernel.contains("_grad");  // _grad, or _grad_add with a residual's gradient
    if (norm && !normGrad && p.normElems > 0)
      t = std::max(t, elems / p.normElems);
    if (normGrad && p.normGradElems > 0)
      t = std::max(t, elems / p.normGradElems);
  }
  // Fused attention: its products over the scores a row sees (causal, or
  // within the window), and an exp a score (the backward: five products,
  // the scores again among them).
  // (attention_qkv: q's shape is its result's, [B, T, H, D].)
  const bool packed = kernel == "attention_qkv" || kernel == "attention_qkv_grad";
  const size_t ins = launch.getIns().size();
  const bool unpacked = (kernel == "attention" || kernel == "attention_grad") && ins >= 3;
  if (unpacked || (packed && ins >= (kernel == "attention_qkv" ? 1u : 2u) && !launch.getOuts().empty())) {
    Value qv = !packed ? launch.getIns()[0] : kernel == "attention_qkv" ? launch.getOuts()[0] : launch.getIns()[1];
    auto q = cast<fs::BufferType>(qv.getType()).getTensorType();
    int64_t window = 0;
    bool seqMajor = packed;  // args: scale, window, seq_major; packed: kv_heads, scale, window
    if (auto args = launch->getAttrOfType<ArrayAttr>("args"); args && args.size() == 3) {
      if (auto w = dyn_cast<IntegerAttr>(args[packed ? 2 : 1]))
        window = w.getInt();
      if (auto s = dyn_cast<BoolAttr>(args[2]); s && !packed)
        seqMajor = s.getValue();
    }
    const double B = double(q.getDimSize(0)), H = double(q.getDimSize(seqMajor ? 2 : 1)),
                 T = double(q.getDimSize(seqMajor ? 1 : 2)), D = double(q.getDimSize(3));
    const double seen = window > 0 && window < T ? window * (T - (window - 1) / 2.0) : T * (T + 1) / 2;
    const bool grad = kernel == "attention_grad" || kernel == "attention_qkv_grad";
    const double flops = (grad ? 5 : 2) * 2 * B * H * seen * D;
    const double block = (grad ? 5 : 2) * 2 * 64 * std::min(T, 64.0 + (window > 0 ? window : T)) * D;
    // The calibrated rate of the kernel itself (its exps included), else
    // its products' as matmuls and its exps' as a softmax's.
    if (p.attentionFlops > 0) {
      t = std::max(t, flops / p.attentionFlops);
    } else {
      t = std::max(t, flops / p.matmulRate(cuda ? flops : block));
      if (p.softmaxElems > 0)
        t = std::max(t, (grad ? 2 : 1) * B * H * seen / p.softmaxElems);
    }
  }
  // The loss of a Linear's logits: its products (the logits', and with the
  // gradients dx's and dw's) at the size of its block of rows, an exp a
  // logit between them, and dw read and written again each block after the
  // first. On a CPU these take turns on the same cores: they add. On a GPU
  // the kernels between the products add too, priced by their bytes: fp32
  // logits go through a softmax, its gradient and (at a 16-bit precision)
  // each product's rounding; 16-bit ones through one kernel that reads them
  // twice and writes their gradient. fp32 x and w are rounded by each
  // product, or once where a 16-bit block's kernel copies them whole.
  if (kernel == "linear_cross_entropy" && launch.getIns().size() == 3) {
    auto w = cast<fs::BufferType>(launch.getIns()[1].getType()).getTensorType();
    auto x = cast<fs::BufferType>(launch.getIns()[0].getType()).getTensorType();
    const double V = double(w.getDimSize(0)), D = double(w.getDimSize(1));
    const double N = double(x.getNumElements()) / D;
    bool grads = true;
    if (auto args = launch->getAttrOfType<ArrayAttr>("args"); args && !args.empty())
      if (auto g = dyn_cast<BoolAttr>(args[args.size() - 1]))
        grads = g.getValue();
    double rows = double(fy::linear_cross_entropy_rows(int64_t(N), int64_t(V)));
    bool block16 = false;
    if (launch.getOuts().size() == 4) {
      auto block = cast<fs::BufferType>(launch.getOuts()[3].getType()).getTensorType();
      rows = std::min(N, double(block.getDimSize(0)));
      block16 = !block.getElementType().isF32();
    }
    const double blocks = std::ceil(N / rows), logits = N * V;
    const double flops = (grads ? 3 : 1) * 2 * N * V * D;
    // (16-bit operands: the products' rate without their roundings, which
    // are priced below.)
    const bool rounds = cuda && (operands16 || block16);
    double c = flops / p.matmulRate(cuda ? flops : 2 * rows * V * D, rounds);
    if (!cuda && p.softmaxElems > 0)
      c += N * V / p.softmaxElems;
    if (cuda) {
      const double xe = x.getElementType().isF32() ? N * D : 0, we = w.getElementType().isF32() ? V * D : 0;
      double moved = 0;
      if (rounds && block16 && fy::cuda::matmul_copies_fit(size_t(xe), size_t(we)))
        moved += 6 * (xe + we);
      else if (rounds)  // w by two products a block; x's rows by two, or once for a 16-bit block
        moved += 6 * (block16 || !grads ? 1 : 2) * xe + 6 * (grads ? 2 : 1) * we * blocks;
      if (block16) {
        moved += (grads ? 6 : 2) * logits;
      } else {
        if (p.softmaxElems > 0)
          c += logits / p.softmaxElems;
        if (grads)
          moved += 8 * logits + (operands16 ? 2 * 6 : 0) * logits;
      }
      c += moved / p.memBytes;
    }
    if (grads)
      c += (blocks - 1) * 8 * V * D / p.memBytes;
    t = std::max(t, c);
  }
  // (matmul_bias: its bias is added in the product's epilogue.)
  if ((kernel == "matmul" || kernel == "matmul_bias") && launch.getIns().size() >= 2 &&
      launch.getOuts().size() == 1) {
    auto a = cast<fs::BufferType>(launch.getIns()[0].getType()).getTensorType();
    auto out = cast<fs::BufferType>(launch.getOuts()[0].getType()).getTensorType();
    bool transA = false;
    if (auto args = launch->getAttrOfType<ArrayAttr>("args"); args && !args.empty())
      if (auto b = dyn_cast<BoolAttr>(args[0]))
        transA = b.getValue();
    auto b = cast<fs::BufferType>(launch.getIns()[1].getType()).getTensorType();
    int64_t k = a.getDimSize(a.getRank() - (transA ? 2 : 1));
    // The CPU runs a batched product slice by slice, so the rate is a
    // slice's; the GPU runs it as one strided-batched GEMM, at the rate of
    // a product of all its flops.
    double flops = 2.0 * double(out.getNumElements()) * double(k);
    double slice = 2.0 * double(k) * double(out.getDimSize(out.getRank() - 1)) *
                   double(out.getRank() > 1 ? out.getDimSize(out.getRank() - 2) : 1);
    // At bf16 / fp16 the GPU multiplies 16-bit copies of the operands, made
    // first (4 bytes read, 2 written an element), in the scratch or, for
    // one GEMM too large for it, in row blocks. One whose b leaves no room
    // for row blocks runs on fp32 operands at FAST_16BF, whose own
    // conversion costs about as much (the logits' input gradient at d 1024
    // on an H100: 2.00 ms, priced so 2.03); a batched product too large
    // keeps fp32 operands, priced at the calibrated rate.
    // Operands stored in 16 bits (fy-half-activations) need no copy, and
    // a product with any such has no fp32 fallback: it runs in blocks.
    double na = double(a.getNumElements()), nb = double(b.getNumElements());
    auto batches = [](RankedTensorType t) {
      int64_t n = 1;
      for (int64_t i = 0; i + 2 < t.getRank(); ++i)
        n *= t.getDimSize(i);
      return n;
    };
    auto f32 = [](RankedTensorType t) { return t.getElementType().isF32(); };
    double rounded = (f32(a) ? na : 0) + (f32(b) ? nb : 0);
    bool fits = 2 * rounded + 256 <= double(fy::cuda::kMatmulConvertBytes);
    bool oneGemm = batches(b) == 1 && (batches(a) == 1 || !transA);
    bool stored16 = !f32(a) || !f32(b) || !f32(out);
    if (operands16 && (fits || oneGemm || stored16)) {
      double moved = 2 * (na + nb) + (f32(out) ? 4 : 2) * double(out.getNumElements());
      t = 6 * rounded / p.memBytes + std::max(moved / p.memBytes, flops / p.matmulRate(flops, true));
    } else {
      t = std::max(t, flops / p.matmulRate(cuda ? flops : slice));
    }
  }
  return t + p.launchS;
}

} // namespace fuyou
