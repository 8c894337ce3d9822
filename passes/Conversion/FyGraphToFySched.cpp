// fy-lower-to-fysched: tensors → buffers in device memory, ops → kernel launches.
#include "passes/Passes.h"
#include "runtime/abi/sizes.h"

#include "mlir/Dialect/Func/Transforms/FuncConversions.h"
#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringMap.h"

#include <limits>

namespace fuyou {
#define GEN_PASS_DEF_LOWERTOFYSCHED
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;
namespace fs = fuyou::fysched;

namespace {

fs::BufferType deviceBuffer(RankedTensorType t) {
  return fs::BufferType::get(t.getContext(), "device", t);
}

// What a launch needs beyond operands and results: the kernel's name, its
// static arguments, for reductions the keepdims shape of the output, and a
// buffer the kernel works in (its last out, placed by the memory plan like
// any temporary and freed after the launch).
struct KernelSpec {
  std::string kernel;
  SmallVector<Attribute> args;
  std::optional<SmallVector<int64_t>> keepdimsOut;
  RankedTensorType scratch;
};
using SpecFn = std::function<void(Operation *, Builder &, KernelSpec &)>;

int64_t normAxis(int64_t axis, Value v) {
  return axis < 0 ? axis + cast<RankedTensorType>(v.getType()).getRank() : axis;
}

// A fygraph op computed by one runtime kernel into freshly allocated buffers.
struct LaunchLowering : ConversionPattern {
  LaunchLowering(const TypeConverter &tc, MLIRContext *ctx, StringRef opName, SpecFn spec)
      : ConversionPattern(tc, opName, /*benefit=*/1, ctx), spec(std::move(spec)) {}

  LogicalResult matchAndRewrite(Operation *op, ArrayRef<Value> operands,
                                ConversionPatternRewriter &rw) const override {
    KernelSpec ks;
    spec(op, rw, ks);
    SmallVector<Value> allocs, outs;
    for (Type t : op->getResultTypes()) {
      auto buf = deviceBuffer(cast<RankedTensorType>(t));
      allocs.push_back(rw.create<fs::AllocOp>(op->getLoc(), buf, /*offset=*/IntegerAttr()));
    }
    outs = allocs;
    if (ks.keepdimsOut) {
      auto t = cast<RankedTensorType>(op->getResult(0).getType());
      auto kt = RankedTensorType::get(*ks.keepdimsOut, t.getElementType());
      outs[0] = rw.create<fs::ViewOp>(op->getLoc(), deviceBuffer(kt), allocs[0]);
    }
    if (ks.scratch)
      outs.push_back(rw.create<fs::AllocOp>(op->getLoc(), deviceBuffer(ks.scratch), /*offset=*/IntegerAttr()));
    rw.create<fs::LaunchOp>(op->getLoc(), ks.kernel, operands, outs, rw.getArrayAttr(ks.args));
    rw.replaceOp(op, allocs);
    return success();
  }

  SpecFn spec;
};

template <typename SrcOp, typename DstOp>
struct OneToOne : OpConversionPattern<SrcOp> {
  using OpConversionPattern<SrcOp>::OpConversionPattern;
  using Adaptor = typename OpConversionPattern<SrcOp>::OpAdaptor;
  LogicalResult matchAndRewrite(SrcOp op, Adaptor adaptor,
                                ConversionPatternRewriter &rw) const override;
};

template <>
LogicalResult OneToOne<fg::GetParamOp, fs::GetParamOp>::matchAndRewrite(
    fg::GetParamOp op, OpAdaptor, ConversionPatternRewriter &rw) const {
  rw.replaceOpWithNewOp<fs::GetParamOp>(op, deviceBuffer(cast<RankedTensorType>(op.getType())),
                                        op.getNameAttr());
  return success();
}

template <>
LogicalResult OneToOne<fg::ConstantOp, fs::ConstantOp>::matchAndRewrite(
    fg::ConstantOp op, OpAdaptor, ConversionPatternRewriter &rw) const {
  rw.replaceOpWithNewOp<fs::ConstantOp>(op, deviceBuffer(cast<RankedTensorType>(op.getType())),
                                        op.getValue(), /*offset=*/IntegerAttr());
  return success();
}

template <>
LogicalResult OneToOne<fg::ReshapeOp, fs::ViewOp>::matchAndRewrite(
    fg::ReshapeOp op, OpAdaptor adaptor, ConversionPatternRewriter &rw) const {
  rw.replaceOpWithNewOp<fs::ViewOp>(op, deviceBuffer(cast<RankedTensorType>(op.getType())),
                                    adaptor.getInput());
  return success();
}

template <>
LogicalResult OneToOne<fg::AdamWOp, fs::CpuAdamWOp>::matchAndRewrite(
    fg::AdamWOp op, OpAdaptor adaptor, ConversionPatternRewriter &rw) const {
  rw.replaceOpWithNewOp<fs::CpuAdamWOp>(op, op.getParamAttr(), adaptor.getGrad(),
                                        /*group=*/FlatSymbolRefAttr(), /*on_device=*/UnitAttr());
  return success();
}

// The launch table: fygraph op → runtime kernel and static arguments.
void addLaunchPatterns(RewritePatternSet &patterns, const TypeConverter &tc) {
  MLIRContext *ctx = patterns.getContext();
  auto named = [&](StringRef op, StringRef kernel) {
    std::string k = kernel.str();
    patterns.add<LaunchLowering>(tc, ctx, op, [k](Operation *, Builder &, KernelSpec &s) {
      s.kernel = k;
    });
  };
  auto with = [&](StringRef op, SpecFn fn) { patterns.add<LaunchLowering>(tc, ctx, op, fn); };

  for (StringRef n : {"add", "sub", "mul", "div", "pow", "equal", "neg", "sqrt", "reciprocal",
                      "exp", "tanh", "erf", "sigmoid", "silu", "where", "cast", "gather",
                      "gather_grad", "gather_grad_add", "swiglu", "swiglu_grad", "swiglu_packed",
                      "swiglu_packed_grad"})
    named(("fygraph." + n).str(), n);
  named(fg::ExpandOp::getOperationName(), "broadcast_to");
  named(fg::ReduceToOp::getOperationName(), "reduce_sum");
  named(fg::SoftmaxCrossEntropyLossOp::getOperationName(), "softmax_cross_entropy");
  named(fg::LossScaleOp::getOperationName(), "loss_scale");

  with(fg::GeluOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    s.kernel = cast<fg::GeluOp>(op).getApproximate() == "tanh" ? "gelu_tanh" : "gelu";
  });
  with(fg::BiasGeluOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    s.kernel = cast<fg::BiasGeluOp>(op).getApproximate() == "tanh" ? "bias_gelu_tanh" : "bias_gelu";
  });
  with(fg::BiasGeluGradOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    s.kernel = cast<fg::BiasGeluGradOp>(op).getApproximate() == "tanh" ? "bias_gelu_tanh_grad" : "bias_gelu_grad";
  });
  with(fg::UnaryGradOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    s.kernel = ("unary_grad_" + cast<fg::UnaryGradOp>(op).getFn()).str();
  });
  auto reduce = [](StringRef kernel) {
    std::string k = kernel.str();
    return [k](Operation *op, Builder &, KernelSpec &s) {
      s.kernel = k;
      auto in = cast<RankedTensorType>(op->getOperand(0).getType());
      SmallVector<int64_t> keep(in.getShape());
      for (int64_t a : cast<DenseI64ArrayAttr>(op->getAttr("axes")).asArrayRef())
        keep[a < 0 ? a + in.getRank() : a] = 1;
      s.keepdimsOut = keep;
    };
  };
  with(fg::ReduceSumOp::getOperationName(), reduce("reduce_sum"));
  with(fg::ReduceMeanOp::getOperationName(), reduce("reduce_mean"));
  with(fg::MatMulOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto mm = cast<fg::MatMulOp>(op);
    s.kernel = "matmul";
    s.args = {b.getBoolAttr(mm.getTransA()), b.getBoolAttr(mm.getTransB())};
  });
  with(fg::MatMulBiasOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto mm = cast<fg::MatMulBiasOp>(op);
    s.kernel = "matmul_bias";
    s.args = {b.getBoolAttr(mm.getTransA()), b.getBoolAttr(mm.getTransB())};
  });
  with(fg::TransposeOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    s.kernel = "transpose";
    s.args = {cast<fg::TransposeOp>(op).getPermAttr()};
  });
  with(fg::SliceOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    auto sl = cast<fg::SliceOp>(op);
    s.kernel = "slice";
    s.args = {sl.getStartsAttr(), sl.getStepsAttr()};
  });
  with(fg::SliceGradOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    auto sl = cast<fg::SliceGradOp>(op);
    s.kernel = "slice_grad";
    s.args = {sl.getStartsAttr(), sl.getStepsAttr()};
  });
  with(fg::ConcatOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto c = cast<fg::ConcatOp>(op);
    s.kernel = "concat";
    s.args = {b.getI64IntegerAttr(normAxis(c.getAxis(), c.getResult()))};
  });
  with(fg::LayerNormOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto ln = cast<fg::LayerNormOp>(op);
    s.kernel = ln.getBias() ? "layer_norm" : "layer_norm_nobias";
    s.args = {b.getI64IntegerAttr(normAxis(ln.getAxis(), ln.getInput())), ln.getEpsilonAttr()};
  });
  with(fg::LayerNormGradOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto g = cast<fg::LayerNormGradOp>(op);
    s.kernel = g.getAddend() ? "layer_norm_grad_add" : "layer_norm_grad";
    s.args = {b.getI64IntegerAttr(normAxis(g.getAxis(), g.getInput()))};
  });
  with(fg::RMSNormOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto rn = cast<fg::RMSNormOp>(op);
    s.kernel = "rms_norm";
    s.args = {b.getI64IntegerAttr(normAxis(rn.getAxis(), rn.getInput())), rn.getEpsilonAttr()};
  });
  with(fg::RMSNormGradOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto g = cast<fg::RMSNormGradOp>(op);
    s.kernel = g.getAddend() ? "rms_norm_grad_add" : "rms_norm_grad";
    s.args = {b.getI64IntegerAttr(normAxis(g.getAxis(), g.getInput()))};
  });
  with(fg::SoftmaxOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto sm = cast<fg::SoftmaxOp>(op);
    s.kernel = "softmax";
    s.args = {b.getI64IntegerAttr(normAxis(sm.getAxis(), sm.getInput()))};
  });
  with(fg::MaskedSoftmaxOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    s.kernel = "masked_softmax";
    s.args = {cast<fg::MaskedSoftmaxOp>(op).getScaleAttr()};
  });
  with(fg::RopeOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto r = cast<fg::RopeOp>(op);
    s.kernel = "rope";
    s.args = {r.getSeqAxisAttr(), b.getBoolAttr(r.getTransposed())};
  });
  with(fg::AttentionOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto a = cast<fg::AttentionOp>(op);
    s.kernel = "attention";
    s.args = {a.getScaleAttr(), a.getWindowAttr(), b.getBoolAttr(a.getSeqMajor())};
  });
  with(fg::AttentionGradOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto a = cast<fg::AttentionGradOp>(op);
    s.kernel = "attention_grad";
    s.args = {a.getScaleAttr(), a.getWindowAttr(), b.getBoolAttr(a.getSeqMajor())};
  });
  with(fg::AttentionQKVOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    auto a = cast<fg::AttentionQKVOp>(op);
    s.kernel = "attention_qkv";
    s.args = {a.getKvHeadsAttr(), a.getScaleAttr(), a.getWindowAttr()};
  });
  with(fg::AttentionQKVGradOp::getOperationName(), [](Operation *op, Builder &, KernelSpec &s) {
    auto a = cast<fg::AttentionQKVGradOp>(op);
    s.kernel = "attention_qkv_grad";
    s.args = {a.getKvHeadsAttr(), a.getScaleAttr(), a.getWindowAttr()};
  });
  with(fg::SoftmaxGradOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto sm = cast<fg::SoftmaxGradOp>(op);
    s.kernel = "softmax_grad";
    s.args = {b.getI64IntegerAttr(normAxis(sm.getAxis(), sm.getY())), sm.getScaleAttr()};
  });
  auto sceArgs = [](Builder &b, std::optional<int64_t> ignore, StringRef reduction) {
    // No ignore_index: a label no target can have.
    int64_t ig = ignore ? *ignore : std::numeric_limits<int64_t>::min();
    return SmallVector<Attribute>{b.getI64IntegerAttr(ig), b.getBoolAttr(reduction == "mean")};
  };
  with(fg::SoftmaxCrossEntropyLossOp::getOperationName(),
       [sceArgs](Operation *op, Builder &b, KernelSpec &s) {
         auto l = cast<fg::SoftmaxCrossEntropyLossOp>(op);
         s.kernel = "softmax_cross_entropy";
         s.args = sceArgs(b, l.getIgnoreIndex(), l.getReduction());
       });
  with(fg::SoftmaxCrossEntropyLossGradOp::getOperationName(),
       [sceArgs](Operation *op, Builder &b, KernelSpec &s) {
         auto l = cast<fg::SoftmaxCrossEntropyLossGradOp>(op);
         s.kernel = "softmax_cross_entropy_grad";
         s.args = sceArgs(b, l.getIgnoreIndex(), l.getReduction());
       });
  // Its last argument: make the gradients (fy-outline-eval's copy turns it
  // off). Its scratch: a block of rows' logits.
  with(fg::LinearCrossEntropyOp::getOperationName(), [sceArgs](Operation *op, Builder &b, KernelSpec &s) {
    auto l = cast<fg::LinearCrossEntropyOp>(op);
    s.kernel = "linear_cross_entropy";
    s.args = sceArgs(b, l.getIgnoreIndex(), l.getReduction());
    s.args.push_back(b.getBoolAttr(true));
    const int64_t V = cast<RankedTensorType>(l.getW().getType()).getDimSize(0);
    const int64_t N = cast<RankedTensorType>(l.getLabels().getType()).getNumElements();
    s.scratch = RankedTensorType::get({fy::linear_cross_entropy_rows(N, V), V}, b.getF32Type());
  });
  with(fg::DropoutOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    auto d = cast<fg::DropoutOp>(op);
    s.kernel = "dropout";
    s.args = {b.getF64FloatAttr(d.getRatio().convertToFloat()), d.getSeedAttr()};
  });
  with(fg::DropoutGradOp::getOperationName(), [](Operation *op, Builder &b, KernelSpec &s) {
    s.kernel = "dropout_grad";
    s.args = {b.getF64FloatAttr(cast<fg::DropoutGradOp>(op).getRatio().convertToFloat())};
  });
}

struct LowerToFySched : fuyou::impl::LowerToFySchedBase<LowerToFySched> {
  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    TypeConverter tc;
    tc.addConversion([](Type t) { return t; });
    tc.addConversion([](RankedTensorType t) -> Type { return deviceBuffer(t); });

    ConversionTarget target(*ctx);
    target.addLegalDialect<fs::FySchedDialect>();
    target.addLegalOp<fg::ParamOp, ModuleOp>();
    target.addIllegalDialect<fg::FyGraphDialect>();
    target.addDynamicallyLegalOp<func::FuncOp>(
        [&](func::FuncOp f) { return tc.isSignatureLegal(f.getFunctionType()); });
    target.addDynamicallyLegalOp<func::ReturnOp>(
        [&](func::ReturnOp r) { return tc.isLegal(r.getOperandTypes()); });

    RewritePatternSet patterns(ctx);
    patterns.add<OneToOne<fg::GetParamOp, fs::GetParamOp>, OneToOne<fg::ConstantOp, fs::ConstantOp>,
                 OneToOne<fg::ReshapeOp, fs::ViewOp>, OneToOne<fg::AdamWOp, fs::CpuAdamWOp>>(tc, ctx);
    addLaunchPatterns(patterns, tc);
    populateFunctionOpInterfaceTypeConversionPattern<func::FuncOp>(patterns, tc);
    populateReturnOpTypeConversionPattern(patterns, tc);
    if (failed(applyFullConversion(getOperation(), target, std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
