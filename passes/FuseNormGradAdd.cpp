// fy-fuse-norm-grad-add: a norm's input gradient summed into the residual
// stream's gradient by the norm's gradient kernel (Passes.td says why the
// bits are the add's).
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace fuyou {
#define GEN_PASS_DEF_FUSENORMGRADADD
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

// Whether `addend` is made before `grad` in its block: the fused op then
// stands where the norm's gradient stood, whose result went straight to the
// add, a buffer fy-half-activations keeps fp32 as the fused op's sum. (At
// the add, the gradient would have been stored in 16 bits before the add
// and its dy read later: other bits.)
bool madeBefore(Value addend, Operation *grad) {
  if (auto arg = dyn_cast<BlockArgument>(addend))
    return arg.getOwner() == grad->getBlock();
  Operation *def = addend.getDefiningOp();
  return def->getBlock() == grad->getBlock() && def->isBeforeInBlock(grad);
}

// add(norm_grad(...).dinput, g) (either order), of one type, dinput read by
// the add alone, g made before the norm's gradient -> norm_grad(...,
// addend = g) in its place.
template <class GradOp> bool fuse(fg::AddOp add, PatternRewriter &rw) {
  for (auto [d, g] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
    auto grad = d.template getDefiningOp<GradOp>();
    if (!grad || grad.getAddend() || !d.hasOneUse() || d != grad.getDinput() || d.getType() != add.getType() ||
        g.getType() != add.getType() || add->getBlock() != grad->getBlock() || !madeBefore(g, grad))
      continue;
    rw.setInsertionPoint(grad);
    SmallVector<Value> operands(grad->getOperands());
    operands.push_back(g);
    Operation *fused = rw.create<GradOp>(grad.getLoc(), grad->getResultTypes(), operands, grad->getAttrs());
    rw.replaceOp(add, fused->getResult(0));
    rw.replaceOp(grad, fused->getResults());
    return true;
  }
  return false;
}

// One walk, as fy-fuse-bias: the greedy driver would also fold and hoist.
struct FuseNormGradAdd : fuyou::impl::FuseNormGradAddBase<FuseNormGradAdd> {
  void runOnOperation() override {
    SmallVector<fg::AddOp> adds;
    getOperation().walk([&](fg::AddOp add) { adds.push_back(add); });
    PatternRewriter rw(&getContext());
    for (fg::AddOp add : adds)
      if (!fuse<fg::LayerNormGradOp>(add, rw))
        fuse<fg::RMSNormGradOp>(add, rw);
  }
};

} // namespace
