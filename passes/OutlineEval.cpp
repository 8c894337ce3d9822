// fy-outline-eval: @eval_step, the loss of a batch under the current weights
// without training on it (validation). It is @train_step's forward as
// placed and planned, cut after the launch that writes the loss: the same
// kernels in the same order, so an evaluation of a batch gives the bits a
// training step's forward would. What only backward or the optimizer
// needed goes: the optimizer's state reads, values saved for backward on
// their way to host memory or SSD, copies and launches whose results
// nothing left reads. Dropout becomes a copy (evaluation mode), a loss that
// makes its gradients with it (linear_cross_entropy) makes none, and a wait
// for a table's rows first a wait for its whole update, since the batch is
// not the one the optimizer prepared. Buffers still alive at the end are
// freed there; each keeps train_step's offset, and a subset of its
// lifetime, so the memory plan holds as it stands.
#include "passes/Analysis/StepPhases.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace fuyou {
#define GEN_PASS_DEF_OUTLINEEVAL
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// Whether anything reads the buffer `v` (or a view of it): launches' and
// copies' targets, deallocations and views are not reads.
bool isRead(Value v) {
  for (OpOperand &use : v.getUses()) {
    Operation *user = use.getOwner();
    if (isa<fs::DeallocOp>(user))
      continue;
    if (auto view = dyn_cast<fs::ViewOp>(user)) {
      if (isRead(view.getResult()))
        return true;
      continue;
    }
    if (auto launch = dyn_cast<fs::LaunchOp>(user);
        launch && use.getOperandNumber() >= launch.getIns().size())
      continue;
    if (auto copy = dyn_cast<fs::CopyOp>(user); copy && use.get() == copy.getTarget())
      continue;
    return true;
  }
  return false;
}

// Evaluation mode: dropout passes its input through.
struct DropoutToCopy : OpRewritePattern<fs::LaunchOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fs::LaunchOp op, PatternRewriter &rw) const override {
    if (op.getKernel() != "dropout" || op.getIns().size() != 1 || op.getOuts().empty())
      return failure();
    rw.create<fs::CopyOp>(op.getLoc(), op.getIns()[0], op.getOuts()[0]);
    rw.eraseOp(op);
    return success();
  }
};

// The loss alone: linear_cross_entropy's last argument turns off the
// gradients it makes with the loss (their buffers stay, unwritten).
struct LossWithoutGradients : OpRewritePattern<fs::LaunchOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fs::LaunchOp op, PatternRewriter &rw) const override {
    auto args = op->getAttrOfType<ArrayAttr>("args");
    if (op.getKernel() != "linear_cross_entropy" || !args || args.empty())
      return failure();
    auto grads = dyn_cast<BoolAttr>(args[args.size() - 1]);
    if (!grads || !grads.getValue())
      return failure();
    SmallVector<Attribute> a(args.begin(), args.end());
    a.back() = rw.getBoolAttr(false);
    rw.modifyOpInPlace(op, [&] { op->setAttr("args", rw.getArrayAttr(a)); });
    return success();
  }
};

// The optimizer prepared the next training batch's rows, not this batch's.
struct WaitForWholeUpdate : OpRewritePattern<fs::GroupWaitRowsOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fs::GroupWaitRowsOp op, PatternRewriter &rw) const override {
    rw.replaceOpWithNewOp<fs::GroupWaitOp>(op, op.getGroupAttr(), FlatSymbolRefAttr());
    return success();
  }
};

// A value saved for backward on its way out (or one coming back early):
// nothing reads where it goes.
struct EraseUnreadCopy : OpRewritePattern<fs::CopyOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fs::CopyOp op, PatternRewriter &rw) const override {
    if (isRead(fuyou::rootBuffer(op.getTarget())))
      return failure();
    if (Value token = op.getToken())
      for (Operation *user : llvm::make_early_inc_range(token.getUsers()))
        rw.eraseOp(user);
    rw.eraseOp(op);
    return success();
  }
};

// A launch whose every result only backward read.
struct EraseUnreadLaunch : OpRewritePattern<fs::LaunchOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fs::LaunchOp op, PatternRewriter &rw) const override {
    if (llvm::any_of(op.getOuts(), [](Value out) { return isRead(fuyou::rootBuffer(out)); }))
      return failure();
    rw.eraseOp(op);
    return success();
  }
};

// A buffer nothing writes or reads any more (an activation's host or SSD
// copy, backward's seed of 1): its allocation and its end go.
template <class BufferOp> struct EraseUnused : OpRewritePattern<BufferOp> {
  using OpRewritePattern<BufferOp>::OpRewritePattern;
  LogicalResult matchAndRewrite(BufferOp op, PatternRewriter &rw) const override {
    if (!llvm::all_of(op->getUsers(), [](Operation *u) { return isa<fs::DeallocOp>(u); }))
      return failure();
    for (Operation *user : llvm::make_early_inc_range(op->getUsers()))
      rw.eraseOp(user);
    rw.eraseOp(op);
    return success();
  }
};

struct OutlineEval : fuyou::impl::OutlineEvalBase<OutlineEval> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError("fy-outline-eval needs func.func @train_step");
      return signalPassFailure();
    }
    if (module.lookupSymbol("eval_step")) {
      module.emitError("fy-outline-eval: the module already has @eval_step");
      return signalPassFailure();
    }
    OpBuilder b(step);
    b.setInsertionPointAfter(step);
    auto eval = cast<func::FuncOp>(b.clone(*step));
    eval.setSymName("eval_step");
    // train_step's plan (arena sizes) is the program's; eval_step lives in it.
    for (NamedAttribute a : llvm::to_vector(eval->getDiscardableAttrs()))
      eval->removeDiscardableAttr(a.getName());

    Block &body = eval.getBody().front();
    auto ret = cast<func::ReturnOp>(body.getTerminator());
    fuyou::StepPhases phases(body);
    if (ret.getNumOperands() != 1 || !phases.hasBackward()) {
      step.emitError("fy-outline-eval: @train_step must return its loss, written by a launch");
      return signalPassFailure();
    }
    // The views the loss is returned through stay, wherever they were made.
    Value loss = fuyou::rootBuffer(ret.getOperand(0));
    llvm::SmallPtrSet<Operation *, 4> returned;
    for (Value v = ret.getOperand(0); auto view = v.getDefiningOp<fs::ViewOp>();) {
      returned.insert(view.getOperation());
      v = view.getSource();
    }
    // Backward and the optimizer: everything after the loss's launch. Users
    // come after their definitions, so erasing from the end frees each op's
    // users first.
    SmallVector<Operation *> after;
    for (Operation &op : body.without_terminator()) {
      if (!phases.backward(&op) || returned.contains(&op))
        continue;
      // A later write of the loss would make the cut return a partial value.
      if (auto launch = dyn_cast<fs::LaunchOp>(op))
        if (llvm::any_of(launch.getOuts(), [&](Value out) { return fuyou::rootBuffer(out) == loss; })) {
          launch.emitError("fy-outline-eval: the loss is written by more than one launch");
          return signalPassFailure();
        }
      after.push_back(&op);
    }
    for (Operation *op : llvm::reverse(after))
      op->erase();
    for (auto read : llvm::make_early_inc_range(body.getOps<fs::StateReadOp>())) {
      if (!read->use_empty()) {
        read.emitError("fy-outline-eval: a forward op waits for the optimizer's state");
        return signalPassFailure();
      }
      read->erase();
    }

    RewritePatternSet patterns(&getContext());
    patterns.add<DropoutToCopy, LossWithoutGradients, WaitForWholeUpdate, EraseUnreadCopy, EraseUnreadLaunch,
                 EraseUnused<fs::AllocOp>, EraseUnused<fs::ConstantOp>>(&getContext());
    if (failed(applyPatternsAndFoldGreedily(eval, std::move(patterns)))) {
      eval.emitError("fy-outline-eval: the cleanup did not converge");
      return signalPassFailure();
    }

    // What forward left for backward ends here: copies are waited for, and
    // buffers it never freed (kept on the device, or freed only in
    // backward) are freed, all but the loss, which the caller takes.
    b.setInsertionPoint(ret);
    for (auto copy : body.getOps<fs::CopyOp>())
      if (Value token = copy.getToken(); token && token.use_empty())
        b.create<fs::WaitOp>(copy.getLoc(), token);
    for (Operation &op : body.without_terminator()) {
      if (!isa<fs::AllocOp, fs::ConstantOp>(op) || op.getResult(0) == loss)
        continue;
      if (llvm::none_of(op.getUsers(), [](Operation *u) { return isa<fs::DeallocOp>(u); }))
        b.create<fs::DeallocOp>(op.getLoc(), op.getResult(0));
    }
  }
};

} // namespace
