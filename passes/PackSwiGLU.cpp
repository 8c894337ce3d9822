// fy-pack-swiglu: a SwiGLU's gate and up projections of one input become
// one product of their concatenated weights, whose halves the SwiGLU reads
// (Passes.td says what it saves and costs).
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_PACKSWIGLU
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

// x @ W^T, W a parameter, read by `user` alone: the product, else null.
fg::MatMulOp projection(Value v, Operation *user) {
  auto m = v.getDefiningOp<fg::MatMulOp>();
  if (!m || m.getTransA() || !m.getTransB() || !v.hasOneUse() || *v.getUsers().begin() != user ||
      !m.getRhs().getDefiningOp<fg::GetParamOp>() || m->getBlock() != user->getBlock())
    return {};
  auto w = dyn_cast<RankedTensorType>(m.getRhs().getType());
  return w && w.getRank() == 2 && w.hasStaticShape() ? m : fg::MatMulOp();
}

void pack(fg::SwiGLUOp s) {
  fg::MatMulOp g = projection(s.getGate(), s), u = projection(s.getUp(), s);
  if (!g || !u || g == u || g.getLhs() != u.getLhs() || g.getRhs().getType() != u.getRhs().getType())
    return;
  auto yt = cast<RankedTensorType>(s.getType());
  auto wt = cast<RankedTensorType>(g.getRhs().getType());
  // At the later of the two products: x and both weights are there.
  Operation *at = g->isBeforeInBlock(u) ? u : g;
  OpBuilder b(at);
  Location loc = s.getLoc();
  auto param = [&](fg::MatMulOp m) {
    auto w = m.getRhs().getDefiningOp<fg::GetParamOp>();
    return b.create<fg::GetParamOp>(w.getLoc(), w.getType(), w.getNameAttr());
  };
  Value weights[] = {param(g), param(u)};
  auto cat = b.create<fg::ConcatOp>(
      loc, RankedTensorType::get({2 * wt.getDimSize(0), wt.getDimSize(1)}, wt.getElementType()), weights,
      b.getI64IntegerAttr(0));
  SmallVector<int64_t> shape(yt.getShape());
  shape.back() *= 2;
  auto y = b.create<fg::MatMulOp>(loc, RankedTensorType::get(shape, yt.getElementType()), g.getLhs(), cat,
                                  /*trans_a=*/false, /*trans_b=*/true);
  b.setInsertionPoint(s);
  s.getResult().replaceAllUsesWith(b.create<fg::SwiGLUPackedOp>(loc, yt, y).getResult());
  s.erase();
  for (fg::MatMulOp m : {g, u}) {
    Operation *w = m.getRhs().getDefiningOp();
    m.erase();
    if (w->use_empty())
      w->erase();
  }
}

struct PackSwiGLU : fuyou::impl::PackSwiGLUBase<PackSwiGLU> {
  void runOnOperation() override {
    SmallVector<fg::SwiGLUOp> swiglus;
    getOperation().walk([&](fg::SwiGLUOp s) { swiglus.push_back(s); });
    for (fg::SwiGLUOp s : swiglus)
      pack(s);
  }
};

} // namespace
