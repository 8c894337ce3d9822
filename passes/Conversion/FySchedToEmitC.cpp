// fy-convert-fysched-to-emitc: the program as calls into libfuyou_rt.
//
// Buffers become `fy::View` values; every fysched op becomes one
// `fy::rt::` call taking the runtime first. Kernels are never generated:
// a launch calls the runtime kernel of the same name with its static
// arguments spelled as C++ literals.
#include "passes/Passes.h"
#include "passes/AttrNames.h"
#include "passes/Analysis/StepPhases.h"
#include "runtime/abi/entry_points.h"

#include "mlir/Transforms/DialectConversion.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"
#include "llvm/Support/FormatVariadic.h"

namespace fuyou {
#define GEN_PASS_DEF_CONVERTFYSCHEDTOEMITC
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;
namespace fs = fuyou::fysched;

namespace {

emitc::OpaqueType viewType(MLIRContext *ctx) { return emitc::OpaqueType::get(ctx, "fy::View"); }
Type runtimePtr(MLIRContext *ctx) {
  return emitc::PointerType::get(emitc::OpaqueType::get(ctx, "fy::Runtime"));
}
Attribute opaque(MLIRContext *ctx, const Twine &text) {
  return emitc::OpaqueAttr::get(ctx, text.str());
}

std::string shapeLiteral(ArrayRef<int64_t> shape) {
  std::string s = "fy::Shape{";
  for (auto [i, d] : llvm::enumerate(shape))
    s += (i ? ", " : "") + std::to_string(d);
  return s + "}";
}
std::string dtypeLiteral(Type t) {
  if (t.isF32())
    return "fy::DType::F32";
  if (t.isBF16())
    return "fy::DType::BF16";
  if (t.isF16())
    return "fy::DType::F16";
  if (t.isInteger(64))
    return "fy::DType::I64";
  return "fy::DType::U8";
}
std::string listLiteral(ArrayRef<int64_t> v) {
  std::string s = "{";
  for (auto [i, x] : llvm::enumerate(v))
    s += (i ? ", " : "") + std::to_string(x);
  return s + "}";
}

// A static kernel argument as something the C++ emitter prints.
Attribute cxxArg(Attribute a) {
  MLIRContext *ctx = a.getContext();
  if (auto arr = dyn_cast<DenseI64ArrayAttr>(a))
    return opaque(ctx, listLiteral(arr.asArrayRef()));
  if (auto f = dyn_cast<FloatAttr>(a))  // exact decimal of the value, as a double
    return opaque(ctx, llvm::formatv("{0:e16}", f.getValueAsDouble()).str());
  if (auto i = dyn_cast<IntegerAttr>(a); i && i.getType().isInteger(64)) {
    int64_t v = i.getInt();
    if (v == std::numeric_limits<int64_t>::min())
      return opaque(ctx, "INT64_MIN");
    return opaque(ctx, std::to_string(v) + "LL");
  }
  return a;  // bools print as true/false
}

Value runtimeOf(Operation *op) { return op->getParentOfType<emitc::FuncOp>().getArgument(0); }

emitc::CallOpaqueOp call(ConversionPatternRewriter &rw, Operation *at, StringRef fn,
                         TypeRange results, ValueRange operands, ArrayRef<Attribute> staticArgs,
                         bool staticFirst = false) {
  MLIRContext *ctx = rw.getContext();
  SmallVector<Value> ops{runtimeOf(at)};
  llvm::append_range(ops, operands);
  SmallVector<Attribute> args{rw.getIndexAttr(0)};
  SmallVector<Attribute> consts;
  for (Attribute a : staticArgs)
    consts.push_back(cxxArg(a));
  if (staticFirst)
    llvm::append_range(args, consts);
  for (size_t i = 1; i < ops.size(); ++i)
    args.push_back(rw.getIndexAttr(i));
  if (!staticFirst)
    llvm::append_range(args, consts);
  return rw.create<emitc::CallOpaqueOp>(at->getLoc(), results, ("fy::rt::" + fn).str(), ops,
                                        ArrayAttr::get(ctx, args), ArrayAttr());
}

struct AllocLowering : OpConversionPattern<fs::AllocOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::AllocOp op, OpAdaptor, ConversionPatternRewriter &rw) const override {
    auto t = cast<fs::BufferType>(op.getType());
    MLIRContext *ctx = rw.getContext();
    // A planned buffer is its place in the arena; an unplanned one comes from the pool.
    SmallVector<Attribute> args;
    if (auto offset = op.getOffsetAttr())
      args.push_back(offset);
    args.append({opaque(ctx, shapeLiteral(t.getShape())), opaque(ctx, dtypeLiteral(t.getElementType()))});
    // Host buffers (activations waiting for backward) have their own arena,
    // and buffers on SSD theirs, which is always planned.
    bool host = t.getSpace() == "host";
    if (t.getSpace() == "ssd" && !op.getOffsetAttr())
      return rw.notifyMatchFailure(op, "a buffer on SSD needs its place from fy-plan-memory");
    StringRef fn = t.getSpace() == "ssd"  ? "alloc_ssd_at"
                   : op.getOffsetAttr() ? (host ? "alloc_host_at" : "alloc_at")
                                        : (host ? "alloc_host" : "alloc");
    auto c = call(rw, op, fn, viewType(ctx), {}, args);
    rw.replaceOp(op, c.getResult(0));
    return success();
  }
};

struct DeallocLowering : OpConversionPattern<fs::DeallocOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::DeallocOp op, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    call(rw, op, "dealloc", {}, a.getBuffer(), {});
    rw.eraseOp(op);
    return success();
  }
};

struct ViewLowering : OpConversionPattern<fs::ViewOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::ViewOp op, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    auto t = cast<fs::BufferType>(op.getType());
    auto c = call(rw, op, "view", viewType(rw.getContext()), a.getSource(),
                  {opaque(rw.getContext(), shapeLiteral(t.getShape()))});
    rw.replaceOp(op, c.getResult(0));
    return success();
  }
};

struct ConstantLowering : OpConversionPattern<fs::ConstantOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::ConstantOp op, OpAdaptor, ConversionPatternRewriter &rw) const override {
    MLIRContext *ctx = rw.getContext();
    auto t = cast<fs::BufferType>(op.getType());
    auto dense = dyn_cast<DenseElementsAttr>(op.getValue());
    if (!dense)
      return op.emitOpError("only dense constants can be emitted");
    Attribute shape = opaque(ctx, shapeLiteral(t.getShape()));
    Type elem = t.getElementType();
    // A planned constant takes its arena offset first.
    SmallVector<Attribute> args;
    if (auto offset = op.getOffsetAttr())
      args.push_back(offset);
    auto scalarText = [&](int64_t i) -> std::string {
      if (elem.isF32())
        return llvm::formatv("{0:e9}f", (double)dense.getValues<float>()[i]).str();
      if (elem.isInteger(64))
        return std::to_string(dense.getValues<int64_t>()[i]) + "LL";
      return dense.getValues<bool>()[i] ? "1" : "0";
    };
    emitc::CallOpaqueOp c;
    if (dense.isSplat()) {
      std::string v = scalarText(0);
      if (elem.isF32() && dense.getSplatValue<float>() == -std::numeric_limits<float>::infinity())
        v = "-INFINITY";
      else if (elem.isF32() && dense.getSplatValue<float>() == std::numeric_limits<float>::infinity())
        v = "INFINITY";
      args.append({shape, opaque(ctx, dtypeLiteral(elem)), opaque(ctx, v)});
      c = call(rw, op, "constant_splat", viewType(ctx), {}, args);
    } else {
      std::string list = "{";
      for (int64_t i = 0; i < t.getNumElements(); ++i)
        list += (i ? ", " : "") + scalarText(i);
      list += "}";
      StringRef fn = elem.isF32() ? "constant_f32" : elem.isInteger(64) ? "constant_i64" : "constant_u8";
      args.append({shape, opaque(ctx, list)});
      c = call(rw, op, fn, viewType(ctx), {}, args);
    }
    rw.replaceOp(op, c.getResult(0));
    return success();
  }
};

// A lowering that spells symbols (parameters, groups) as their indices.
template <typename OpT> struct IndexedLowering : OpConversionPattern<OpT> {
  IndexedLowering(const TypeConverter &tc, MLIRContext *ctx, const llvm::StringMap<int64_t> &index)
      : OpConversionPattern<OpT>(tc, ctx), index(index) {}
  Attribute id(Builder &b, StringRef name) const { return b.getI64IntegerAttr(index.lookup(name)); }
  const llvm::StringMap<int64_t> &index;
};

struct ParamLowering : IndexedLowering<fs::GetParamOp> {
  using IndexedLowering::IndexedLowering;
  LogicalResult matchAndRewrite(fs::GetParamOp op, OpAdaptor, ConversionPatternRewriter &rw) const override {
    // A parameter read in host memory (fy-stream-params) is its master.
    StringRef fn = cast<fs::BufferType>(op.getType()).getSpace() == "host" ? "param_host" : "param";
    auto c = call(rw, op, fn, viewType(rw.getContext()), {}, {id(rw, op.getName())});
    rw.replaceOp(op, c.getResult(0));
    return success();
  }
};

struct AdamWLowering : IndexedLowering<fs::CpuAdamWOp> {
  using IndexedLowering::IndexedLowering;
  LogicalResult matchAndRewrite(fs::CpuAdamWOp op, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    call(rw, op, op.getOnDevice() ? "device_adamw" : "cpu_adamw", {}, a.getGrad(), {id(rw, op.getParam())},
         /*staticFirst=*/true);
    rw.eraseOp(op);
    return success();
  }
};

// The optimizer pipeline: tokens become the runtime's int64_t token ids.
template <typename OpT> struct GroupPipelineLowering : IndexedLowering<OpT> {
  GroupPipelineLowering(const TypeConverter &tc, MLIRContext *ctx, const llvm::StringMap<int64_t> &index,
                        StringRef fn)
      : IndexedLowering<OpT>(tc, ctx, index), fn(fn) {}
  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor a, ConversionPatternRewriter &rw) const override {
    SmallVector<Type> results;
    if (failed(this->getTypeConverter()->convertTypes(op->getResultTypes(), results)))
      return failure();
    auto c = call(rw, op, fn, results, a.getOperands(), {this->id(rw, op.getGroup())}, /*staticFirst=*/true);
    rw.replaceOp(op, c.getResults());
    return success();
  }
  StringRef fn;
};

// group_wait(rt, group), or group_wait_param(rt, group, param) for one
// parameter's update, the parameter by index.
struct GroupWaitLowering : IndexedLowering<fs::GroupWaitOp> {
  GroupWaitLowering(const TypeConverter &tc, MLIRContext *ctx, const llvm::StringMap<int64_t> &groups,
                    const llvm::StringMap<int64_t> &params)
      : IndexedLowering(tc, ctx, groups), params(params) {}
  LogicalResult matchAndRewrite(fs::GroupWaitOp op, OpAdaptor, ConversionPatternRewriter &rw) const override {
    if (auto param = op.getParam())
      call(rw, op, "group_wait_param", {}, {}, {id(rw, op.getGroup()), rw.getI64IntegerAttr(params.lookup(*param))});
    else
      call(rw, op, "group_wait", {}, {}, {id(rw, op.getGroup())});
    rw.eraseOp(op);
    return success();
  }
  const llvm::StringMap<int64_t> &params;
};

// grad_landed(rt, group): the group's gradient copy, by group.
struct GradLandedLowering : IndexedLowering<fs::GradLandedOp> {
  using IndexedLowering::IndexedLowering;
  LogicalResult matchAndRewrite(fs::GradLandedOp op, OpAdaptor, ConversionPatternRewriter &rw) const override {
    call(rw, op, "grad_landed", {}, {}, {id(rw, op.getGroup())});
    rw.eraseOp(op);
    return success();
  }
};

// An op on one parameter of a group, the group and the parameter by index
// then its operands: group_wait_rows(rt, group, param, ids),
// grad_offload_early(rt, group, param, grad, ids), early_release(rt, group, param).
template <typename OpT> struct GroupParamLowering : IndexedLowering<OpT> {
  GroupParamLowering(const TypeConverter &tc, MLIRContext *ctx, const llvm::StringMap<int64_t> &groups,
                     const llvm::StringMap<int64_t> &params, StringRef fn)
      : IndexedLowering<OpT>(tc, ctx, groups), params(params), fn(fn) {}
  LogicalResult matchAndRewrite(OpT op, typename OpT::Adaptor a, ConversionPatternRewriter &rw) const override {
    call(rw, op, fn, {}, a.getOperands(),
         {this->id(rw, op.getGroup()), rw.getI64IntegerAttr(params.lookup(op.getParam()))}, /*staticFirst=*/true);
    rw.eraseOp(op);
    return success();
  }
  const llvm::StringMap<int64_t> &params;
  StringRef fn;
};

struct LaunchLowering : OpConversionPattern<fs::LaunchOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::LaunchOp op, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    SmallVector<Value> operands;
    // concat takes (axis, out, ins...): its inputs are variadic.
    bool variadic = op.getKernel() == "concat";
    if (variadic) {
      llvm::append_range(operands, a.getOuts());
      llvm::append_range(operands, a.getIns());
    } else {
      llvm::append_range(operands, a.getIns());
      llvm::append_range(operands, a.getOuts());
    }
    call(rw, op, op.getKernel(), {}, operands, llvm::to_vector(op.getArgs()), variadic);
    rw.eraseOp(op);
    return success();
  }
};

struct CopyLowering : OpConversionPattern<fs::CopyOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::CopyOp op, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    // Between memory spaces a copy is a transfer, which a device does its own way.
    StringRef from = cast<fs::BufferType>(op.getSource().getType()).getSpace();
    StringRef to = cast<fs::BufferType>(op.getTarget().getType()).getSpace();
    if ((from == "ssd" || to == "ssd") && from != "host" && to != "host")
      return rw.notifyMatchFailure(op, "SSD is read and written from host memory only");
    StringRef fn = from == to        ? "copy"
                   : to == "ssd"     ? "copy_to_ssd"
                   : from == "ssd"   ? "copy_from_ssd"
                   : to == "host"    ? "copy_to_host"
                                     : "copy_to_device";
    // An asynchronous one starts, and its token is the runtime's ticket.
    if (op.getToken()) {
      auto c = call(rw, op, (fn + "_start").str(), {rw.getI64Type()}, {a.getSource(), a.getTarget()}, {});
      rw.replaceOp(op, c.getResults());
      return success();
    }
    call(rw, op, fn, {}, {a.getSource(), a.getTarget()}, {});
    rw.eraseOp(op);
    return success();
  }
};

struct WaitLowering : OpConversionPattern<fs::WaitOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(fs::WaitOp op, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    // An SSD write's ticket is the SSD store's, not a device copy's: the
    // token comes from the copy, or from its call once that is converted.
    auto copy = op.getToken().getDefiningOp<fs::CopyOp>();
    auto started = a.getToken().getDefiningOp<emitc::CallOpaqueOp>();
    bool ssd = (copy && cast<fs::BufferType>(copy.getTarget().getType()).getSpace() == "ssd") ||
               (started && started.getCallee() == "fy::rt::copy_to_ssd_start");
    call(rw, op, ssd ? "ssd_wait" : "copy_wait", {}, {a.getToken()}, {});
    rw.eraseOp(op);
    return success();
  }
};

// func.func @train_step(bufs) -> bufs  ⇒  emitc.func @fy_train_step(rt, views..., out views...)
struct FuncLowering : OpConversionPattern<func::FuncOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(func::FuncOp f, OpAdaptor, ConversionPatternRewriter &rw) const override {
    MLIRContext *ctx = rw.getContext();
    TypeConverter::SignatureConversion sig(f.getNumArguments());
    SmallVector<Type> types{runtimePtr(ctx)};
    for (auto [i, t] : llvm::enumerate(f.getArgumentTypes())) {
      sig.addInputs(i, viewType(ctx));
      types.push_back(viewType(ctx));
    }
    for (size_t i = 0; i < f.getNumResults(); ++i)
      types.push_back(viewType(ctx));
    auto fn = rw.create<emitc::FuncOp>(f.getLoc(), ("fy_" + f.getName()).str(),
                                       rw.getFunctionType(types, {}));
    fn.setSpecifiersAttr(rw.getStrArrayAttr({"static"}));
    rw.inlineRegionBefore(f.getBody(), fn.getBody(), fn.end());
    Block *entry = rw.applySignatureConversion(&fn.getBody().front(), sig, getTypeConverter());
    // The runtime comes first, the results' destinations last.
    entry->insertArgument(0u, runtimePtr(ctx), f.getLoc());
    for (size_t i = 0; i < f.getNumResults(); ++i)
      entry->addArgument(viewType(ctx), f.getLoc());
    rw.eraseOp(f);
    return success();
  }
};

// return %v  ⇒  copy(rt, v, out); dealloc(rt, v) when the function owned it.
struct ReturnLowering : OpConversionPattern<func::ReturnOp> {
  using OpConversionPattern::OpConversionPattern;
  LogicalResult matchAndRewrite(func::ReturnOp r, OpAdaptor a, ConversionPatternRewriter &rw) const override {
    auto fn = r->getParentOfType<emitc::FuncOp>();
    unsigned firstOut = fn.getNumArguments() - r.getNumOperands();
    for (auto [i, v] : llvm::enumerate(a.getOperands())) {
      call(rw, r, "copy", {}, {v, fn.getArgument(firstOut + i)}, {});
      // The function owns what it allocated, returned directly or through views.
      Value orig = r.getOperand(i), mapped = v;
      while (auto view = orig.getDefiningOp<fs::ViewOp>()) {
        orig = view.getSource();
        mapped = rw.getRemappedValue(orig);
      }
      if (orig.getDefiningOp<fs::AllocOp>() || orig.getDefiningOp<fs::ConstantOp>())
        call(rw, r, "dealloc", {}, mapped, {});
    }
    rw.replaceOpWithNewOp<emitc::ReturnOp>(r, Value());
    return success();
  }
};

struct ConvertFySchedToEmitC : fuyou::impl::ConvertFySchedToEmitCBase<ConvertFySchedToEmitC> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    MLIRContext *ctx = &getContext();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError("fy-convert-fysched-to-emitc needs func.func @train_step");
      return signalPassFailure();
    }
    if (step.getNumArguments() == 0 || !isa<fs::BufferType>(step.getArgumentTypes()[0])) {
      step.emitError("fy-convert-fysched-to-emitc: @train_step's first argument must be the token ids' buffer");
      return signalPassFailure();
    }

    // fy_declare: every parameter in declaration order, then the inputs.
    OpBuilder b(ctx);
    b.setInsertionPointToStart(module.getBody());
    b.create<emitc::IncludeOp>(module.getLoc(), "cmath", /*is_standard_include=*/true);
    b.create<emitc::IncludeOp>(module.getLoc(), "cstdint", /*is_standard_include=*/true);
    b.create<emitc::IncludeOp>(module.getLoc(), "abi/api.h", /*is_standard_include=*/false);
    auto declare = b.create<emitc::FuncOp>(module.getLoc(), "fy_declare",
                                           b.getFunctionType({runtimePtr(ctx)}, {}));
    declare.setSpecifiersAttr(b.getStrArrayAttr({"static"}));
    Block *body = declare.addEntryBlock();
    b.setInsertionPointToEnd(body);
    Value rt = body->getArgument(0);
    llvm::StringMap<int64_t> index;
    SmallVector<Operation *> decls;
    for (auto p : module.getOps<fg::ParamOp>()) {
      auto t = cast<RankedTensorType>(p.getType());
      index[p.getSymName()] = index.size();
      std::string name = "\"" + p.getSymName().str() + "\"";
      b.create<emitc::CallOpaqueOp>(
          p.getLoc(), TypeRange{}, "fy::rt::declare_param", ValueRange{rt},
          b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, name), opaque(ctx, shapeLiteral(t.getShape())),
                          opaque(ctx, dtypeLiteral(t.getElementType())), b.getBoolAttr(p.getTrainable())}),
          ArrayAttr());
      decls.push_back(p);
    }
    // Token ids must index the embedding the first input feeds.
    int64_t vocab = 0;
    Value tokens = step.getArgument(0);
    step.walk([&](fs::LaunchOp l) {
      if ((l.getKernel() == "gather" || l.getKernel() == "gather_up") && l.getIns().size() == 2 && l.getIns()[1] == tokens)
        vocab = cast<fs::BufferType>(l.getIns()[0].getType()).getShape()[0];
    });
    auto inT = cast<fs::BufferType>(tokens.getType());
    b.create<emitc::CallOpaqueOp>(
        module.getLoc(), TypeRange{}, "fy::rt::declare_inputs", ValueRange{rt},
        b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, shapeLiteral(inT.getShape())),
                        b.getI64IntegerAttr(vocab)}),
        ArrayAttr());
    // The memory plan, checked against --gpu-mem and every step's allocations:
    // the peak of the temporaries and the size of the arena they are placed in.
    if (auto peak = step->getAttrOfType<IntegerAttr>(fuyou::attr::kPeakTempBytes)) {
      SmallVector<Attribute> args{b.getIndexAttr(0), opaque(ctx, std::to_string(peak.getInt()) + "LL")};
      for (StringRef name : {fuyou::attr::kArenaBytes, fuyou::attr::kHostArenaBytes})
        if (auto arena = step->getAttrOfType<IntegerAttr>(name))
          args.push_back(opaque(ctx, std::to_string(arena.getInt()) + "LL"));
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_memory_plan", ValueRange{rt},
                                    b.getArrayAttr(args), ArrayAttr());
    }
    // Activations that wait on SSD: the size of their region of the store.
    if (auto ssd = step->getAttrOfType<IntegerAttr>(fuyou::attr::kSsdArenaBytes))
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_ssd_arena", ValueRange{rt},
                                    b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, std::to_string(ssd.getInt()) + "LL")}),
                                    ArrayAttr());
    // No resident working copies: each phase copies the weights it uses.
    if (module->hasAttr(fuyou::attr::kStreamedParams))
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_streamed_params", ValueRange{rt},
                                    ArrayAttr(), ArrayAttr());
    // The rows gather_up brings up at once: a device stages them in host
    // memory, which --cpu-mem counts.
    if (int64_t gatherUp = fuyou::gatherUpBytes(module); gatherUp > 0)
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_gather_up", ValueRange{rt},
                                    b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, std::to_string(gatherUp) + "LL")}),
                                    ArrayAttr());
    // The precision of the program's arithmetic and its optimizer, when the
    // driver chose them.
    for (auto [attr, fn] : {std::pair{fuyou::attr::kPrecision, "fy::rt::declare_precision"},
                            std::pair{fuyou::attr::kOptimizer, "fy::rt::declare_optimizer"}})
      if (auto v = module->getAttrOfType<StringAttr>(attr))
        b.create<emitc::CallOpaqueOp>(
            module.getLoc(), TypeRange{}, fn, ValueRange{rt},
            b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, "\"" + v.getValue().str() + "\"")}), ArrayAttr());
    // The device budget the compiler planned for: the run's default.
    if (auto gpu = module->getAttrOfType<IntegerAttr>(fuyou::attr::kBudgetGpuMem))
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_gpu_budget", ValueRange{rt},
                                    b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, std::to_string(gpu.getInt()) + "LL")}),
                                    ArrayAttr());
    // Backward starts from the run's loss scale.
    if (module->hasAttr(fuyou::attr::kLossScale))
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_loss_scaling", ValueRange{rt},
                                    ArrayAttr(), ArrayAttr());
    // Parameters updated inline on the device (fy-device-optimizer).
    SmallVector<int64_t> inlineParams;
    for (auto g : module.getOps<fs::GroupOp>())
      if (g.getOnDevice())
        for (Attribute a : g.getParams())
          inlineParams.push_back(index.lookup(cast<FlatSymbolRefAttr>(a).getValue()));
    if (!inlineParams.empty())
      b.create<emitc::CallOpaqueOp>(module.getLoc(), TypeRange{}, "fy::rt::declare_device_optimizer", ValueRange{rt},
                                    b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, listLiteral(inlineParams))}),
                                    ArrayAttr());
    // Groups updated in the background, in declaration order (ids 0, 1, ...).
    llvm::StringMap<int64_t> groupIds;
    bool async = false;
    step.walk([&](fs::GroupAdamWOp) { async = true; });
    for (auto g : llvm::make_early_inc_range(module.getOps<fs::GroupOp>())) {
      if (async && !g.getOnDevice()) {  // those on the device update inline
        SmallVector<int64_t> members;
        for (Attribute a : g.getParams())
          members.push_back(index.lookup(cast<FlatSymbolRefAttr>(a).getValue()));
        groupIds[g.getSymName()] = groupIds.size();
        b.create<emitc::CallOpaqueOp>(
            g.getLoc(), TypeRange{}, "fy::rt::declare_group", ValueRange{rt},
            b.getArrayAttr({b.getIndexAttr(0), opaque(ctx, listLiteral(members))}), ArrayAttr());
      }
      g.erase();  // the resident program has no use for the others
    }
    // Tables read rows first, declared so that --cpu-mem counts their
    // buffers before the first step.
    if (async)
      step.walk([&](fs::GroupWaitRowsOp w) {
        auto ll = [&](int64_t v) -> Attribute { return opaque(ctx, std::to_string(v) + "LL"); };
        b.create<emitc::CallOpaqueOp>(
            w.getLoc(), TypeRange{}, "fy::rt::declare_rows_first", ValueRange{rt},
            b.getArrayAttr({b.getIndexAttr(0), ll(groupIds.lookup(w.getGroup())), ll(index.lookup(w.getParam())),
                            ll(cast<fs::BufferType>(w.getIds().getType()).getNumElements())}),
            ArrayAttr());
      });
    // Tables handed over early (after their rows first, which they need).
    if (async)
      step.walk([&](fs::GradOffloadEarlyOp e) {
        auto ll = [&](int64_t v) -> Attribute { return opaque(ctx, std::to_string(v) + "LL"); };
        SmallVector<Attribute> args{b.getIndexAttr(0), ll(groupIds.lookup(e.getGroup())), ll(index.lookup(e.getParam()))};
        // Its chunks down all at once; its update held for the table's last read.
        if (e.getAllChunks() || e.getHeld())
          args.push_back(b.getBoolAttr(e.getAllChunks()));
        if (e.getHeld())
          args.push_back(b.getBoolAttr(true));
        b.create<emitc::CallOpaqueOp>(e.getLoc(), TypeRange{}, "fy::rt::declare_early_rows", ValueRange{rt},
                                      b.getArrayAttr(args), ArrayAttr());
      });
    b.create<emitc::ReturnOp>(module.getLoc(), Value());
    for (Operation *d : decls)
      d->erase();

    const bool hasEval = bool(module.lookupSymbol<func::FuncOp>("eval_step"));
    TypeConverter tc;
    tc.addConversion([](Type t) { return t; });
    tc.addConversion([ctx](fs::BufferType) -> Type { return viewType(ctx); });
    tc.addConversion([ctx](fs::TokenType) -> Type { return IntegerType::get(ctx, 64); });
    ConversionTarget target(*ctx);
    target.addLegalDialect<emitc::EmitCDialect>();
    target.addLegalOp<ModuleOp>();
    target.addIllegalDialect<fs::FySchedDialect, func::FuncDialect>();
    RewritePatternSet patterns(ctx);
    patterns.add<AllocLowering, DeallocLowering, ViewLowering, ConstantLowering, LaunchLowering,
                 CopyLowering, WaitLowering, FuncLowering, ReturnLowering>(tc, ctx);
    patterns.add<ParamLowering, AdamWLowering>(tc, ctx, index);
    patterns.add<GroupWaitLowering>(tc, ctx, groupIds, index);
    patterns.add<GroupParamLowering<fs::GroupWaitRowsOp>>(tc, ctx, groupIds, index, "group_wait_rows");
    patterns.add<GroupParamLowering<fs::GradOffloadEarlyOp>>(tc, ctx, groupIds, index, "grad_offload_early");
    patterns.add<GroupParamLowering<fs::EarlyReleaseOp>>(tc, ctx, groupIds, index, "early_release");
    patterns.add<GroupPipelineLowering<fs::GradOffloadOp>>(tc, ctx, groupIds, "grad_offload");
    patterns.add<GradLandedLowering>(tc, ctx, groupIds);
    patterns.add<GroupPipelineLowering<fs::StateReadOp>>(tc, ctx, groupIds, "state_read");
    patterns.add<GroupPipelineLowering<fs::GroupAdamWOp>>(tc, ctx, groupIds, "group_adamw");
    patterns.add<GroupPipelineLowering<fs::StateWriteOp>>(tc, ctx, groupIds, "state_write");
    if (failed(applyFullConversion(module, target, std::move(patterns))))
      return signalPassFailure();
    // Every call into the runtime names one of its entry points
    // (runtime/abi/entry_points.h): a kernel or call the runtime lacks fails
    // here, naming it, rather than in the C++ compiler's build of the program.
    static const llvm::StringSet<> entryPoints = {
#define FY_ENTRY_NAME(name) #name,
        FY_RT_ENTRY_POINTS(FY_ENTRY_NAME)
#undef FY_ENTRY_NAME
    };
    WalkResult unknown = module.walk([&](emitc::CallOpaqueOp call) {
      StringRef callee = call.getCallee();
      if (!callee.consume_front("fy::rt::") || entryPoints.contains(callee))
        return WalkResult::advance();
      call.emitError("fy-convert-fysched-to-emitc: the runtime has no entry point '")
          << callee << "' (runtime/abi/entry_points.h)";
      return WalkResult::interrupt();
    });
    if (unknown.wasInterrupted())
      return signalPassFailure();

    b.setInsertionPointToEnd(module.getBody());
    b.create<emitc::VerbatimOp>(module.getLoc(), std::string("int main(int argc, char **argv) {\n"
                                                             "  return fy::program_main(argc, argv, fy_declare, fy_train_step") +
                                                     (hasEval ? ", fy_eval_step" : "") + ");\n}");
    // The plan is carried out: the C++ module holds nothing of fysched.
    fuyou::fysched::PlanAttr::removeFrom(module);
  }
};

} // namespace
