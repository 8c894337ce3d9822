// fy-fuse-bias: a Linear's bias added by its product's kernel (Passes.td
// says when, and why after autodiff).
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"

namespace fuyou {
#define GEN_PASS_DEF_FUSEBIAS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

// add(matmul(a, b), bias) (either order), bias 1-D along the product's last
// dim, the product read by the add alone -> matmul_bias(a, b, bias).
struct FormMatMulBias : OpRewritePattern<fg::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::AddOp add, PatternRewriter &rw) const override {
    for (auto [p, b] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      auto mm = p.getDefiningOp<fg::MatMulOp>();
      if (!mm || !mm->hasOneUse() || add.getType() != mm.getType())
        continue;
      auto pt = cast<RankedTensorType>(mm.getType()), bt = cast<RankedTensorType>(b.getType());
      if (bt.getRank() != 1 || bt.getDimSize(0) != pt.getShape().back() ||
          bt.getElementType() != pt.getElementType())
        continue;
      rw.replaceOpWithNewOp<fg::MatMulBiasOp>(add, pt, mm.getLhs(), mm.getRhs(), b, mm.getTransAAttr(),
                                              mm.getTransBAttr());
      rw.eraseOp(mm);
      return success();
    }
    return failure();
  }
};

// One walk, not the greedy driver: it would fold and hoist constants too,
// and fy-insert-adamw places an update after its gradient's op (a constant
// gradient hoisted to the top would move its update into forward).
struct FuseBias : fuyou::impl::FuseBiasBase<FuseBias> {
  void runOnOperation() override {
    SmallVector<fg::AddOp> adds;
    getOperation().walk([&](fg::AddOp add) { adds.push_back(add); });
    PatternRewriter rw(&getContext());
    FormMatMulBias form(&getContext());
    for (fg::AddOp add : adds) {
      rw.setInsertionPoint(add);
      (void)form.matchAndRewrite(add, rw);
    }
  }
};

} // namespace
