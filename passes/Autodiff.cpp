// fy-autodiff: reverse-mode differentiation of @forward into @train_step.
#include "passes/GradientRules.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/DenseSet.h"

namespace fuyou {
#define GEN_PASS_DEF_AUTODIFF
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

struct Autodiff : fuyou::impl::AutodiffBase<Autodiff> {
  using AutodiffBase::AutodiffBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto func = module.lookupSymbol<func::FuncOp>("forward");
    if (!func) {
      module.emitError("fy-autodiff needs a func.func @forward returning the loss");
      return signalPassFailure();
    }
    if (failed(differentiate(module, func)))
      signalPassFailure();
  }

  LogicalResult differentiate(ModuleOp module, func::FuncOp func) {
    Block &body = func.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    if (ret.getNumOperands() != 1)
      return func.emitError("@forward must return exactly the loss");
    Value loss = ret.getOperand(0);

    // Values that depend on a trainable parameter: the only ones worth a gradient.
    DenseSet<StringRef> trainable;
    SmallVector<fg::ParamOp> params;
    for (auto p : module.getOps<fg::ParamOp>())
      if (p.getTrainable()) {
        trainable.insert(p.getSymName());
        params.push_back(p);
      }
    DenseSet<Value> active;
    SmallVector<Operation *> ops;
    for (Operation &op : body.without_terminator()) {
      ops.push_back(&op);
      bool on = false;
      if (auto gp = dyn_cast<fg::GetParamOp>(op))
        on = trainable.contains(gp.getName());
      for (Value v : op.getOperands())
        on |= active.contains(v);
      if (on)
        for (Value r : op.getResults())
          if (cast<RankedTensorType>(r.getType()).getElementType().isF32())
            active.insert(r);
    }

    OpBuilder b(ret);
    DenseMap<Value, Value> grads;
    auto accumulate = [&](Value v, Value g) {
      auto [it, fresh] = grads.try_emplace(v, g);
      if (!fresh)
        it->second = b.create<fg::AddOp>(g.getLoc(), g.getType(), it->second, g);
    };
    auto scalar = RankedTensorType::get({}, b.getF32Type());
    if (lossScale)
      grads[loss] = b.create<fg::LossScaleOp>(loss.getLoc(), scalar);
    else
      grads[loss] = b.create<fg::ConstantOp>(loss.getLoc(),
                                             DenseElementsAttr::get(scalar, ArrayRef<float>(1.f)));

    for (Operation *op : llvm::reverse(ops)) {
      SmallVector<Value> dResults;
      bool any = false;
      for (Value r : op->getResults()) {
        Value g = grads.lookup(r);
        any |= bool(g);
        dResults.push_back(g);
      }
      if (!any || llvm::none_of(op->getOperands(), [&](Value v) { return active.contains(v); }))
        continue;
      fuyou::GradientRule rule = fuyou::lookupGradientRule(op);
      if (!rule)
        return op->emitError("no gradient rule for ") << op->getName();
      if (!dResults[0])
        return op->emitError("gradient reaches only secondary results of this op");
      SmallVector<Value> dOperands(op->getNumOperands());
      b.setInsertionPoint(ret);
      if (failed(rule(b, op, dResults, dOperands)))
        return failure();
      for (auto [v, g] : llvm::zip(op->getOperands(), dOperands))
        if (g && active.contains(v))
          accumulate(v, g);
    }

    // Gradients per parameter, in declaration order; a parameter read by more
    // than one get_param sums them.
    b.setInsertionPoint(ret);
    SmallVector<Value> results{loss};
    SmallVector<Attribute> names;
    for (fg::ParamOp p : params) {
      Value total;
      for (Operation *op : ops)
        if (auto gp = dyn_cast<fg::GetParamOp>(op); gp && gp.getName() == p.getSymName())
          if (Value g = grads.lookup(gp.getResult()))
            total = total ? b.create<fg::AddOp>(g.getLoc(), g.getType(), total, g).getResult() : g;
      if (!total) {
        // Read only through non-differentiable ops: its gradient is zero.
        auto t = cast<RankedTensorType>(p.getType());
        total = b.create<fg::ConstantOp>(p.getLoc(), DenseElementsAttr::get(t, 0.f));
      }
      results.push_back(total);
      names.push_back(FlatSymbolRefAttr::get(p.getSymNameAttr()));
    }
    b.create<func::ReturnOp>(ret.getLoc(), results);
    ret.erase();

    func.setName("train_step");
    func.setFunctionType(
        b.getFunctionType(func.getArgumentTypes(), ValueRange(results).getTypes()));
    func->setAttr("fygraph.grads", b.getArrayAttr(names));
    IRRewriter rewriter(&getContext());
    (void)runRegionDCE(rewriter, func.getBody());
    return success();
  }
};

} // namespace
