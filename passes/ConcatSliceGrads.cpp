// fy-concat-slice-grads: a value cut into slices along one axis gets its
// gradient as one concat of theirs (Passes.td says why).
#include "passes/Passes.h"

#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace fuyou {
#define GEN_PASS_DEF_CONCATSLICEGRADS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

// The terms of the sum `v`: through adds of its type that nothing else
// reads (and `v`'s own add), the values added.
void terms(Value v, bool root, SmallVectorImpl<Value> &out, SmallVectorImpl<fg::AddOp> &adds) {
  auto add = v.getDefiningOp<fg::AddOp>();
  if (add && (root || add->hasOneUse()) && add.getLhs().getType() == v.getType() &&
      add.getRhs().getType() == v.getType()) {
    adds.push_back(add);
    terms(add.getLhs(), false, out, adds);
    terms(add.getRhs(), false, out, adds);
    return;
  }
  out.push_back(v);
}

// Where a slice_grad's dy sits in its dx: along `axis` from `start`, whole
// (step 1, start 0) along every other dim; nullopt for any other slice.
struct Piece {
  int64_t axis, start;
  Value dy;
};
std::optional<Piece> pieceOf(fg::SliceGradOp g) {
  ArrayRef<int64_t> full = cast<RankedTensorType>(g.getType()).getShape();
  ArrayRef<int64_t> part = cast<RankedTensorType>(g.getDy().getType()).getShape();
  std::optional<Piece> p;
  for (size_t d = 0; d < full.size(); ++d) {
    if (g.getSteps()[d] != 1)
      return std::nullopt;
    if (part[d] == full[d] && g.getStarts()[d] == 0)
      continue;
    if (p)
      return std::nullopt;  // cut along two dims
    p = Piece{int64_t(d), g.getStarts()[d], g.getDy()};
  }
  return p;
}

// The sum at `root` as one concat, where its terms are slice_grads (read by
// the sum alone) whose pieces tile their dx along one axis.
bool concatenate(fg::AddOp root, llvm::SmallPtrSetImpl<Operation *> &erased) {
  SmallVector<Value> vals;
  SmallVector<fg::AddOp> adds;
  terms(root.getResult(), true, vals, adds);
  SmallVector<Piece> pieces;
  for (Value v : vals) {
    auto g = v.getDefiningOp<fg::SliceGradOp>();
    if (!g || !g->hasOneUse())
      return false;
    auto p = pieceOf(g);
    if (!p || (!pieces.empty() && p->axis != pieces.front().axis))
      return false;
    pieces.push_back(*p);
  }
  if (pieces.size() < 2)
    return false;
  llvm::sort(pieces, [](const Piece &a, const Piece &b) { return a.start < b.start; });
  const int64_t axis = pieces.front().axis;
  int64_t next = 0;
  for (const Piece &p : pieces) {
    if (p.start != next)
      return false;  // a gap or an overlap
    next += cast<RankedTensorType>(p.dy.getType()).getDimSize(axis);
  }
  if (next != cast<RankedTensorType>(root.getType()).getDimSize(axis))
    return false;
  OpBuilder b(root);
  SmallVector<Value> dys;
  for (const Piece &p : pieces)
    dys.push_back(p.dy);
  auto cat = b.create<fg::ConcatOp>(root.getLoc(), root.getType(), dys, b.getI64IntegerAttr(axis));
  root.getResult().replaceAllUsesWith(cat.getResult());
  // The adds (root first: each after the one that read it), then the slice_grads.
  for (fg::AddOp add : adds) {
    erased.insert(add);
    add->erase();
  }
  for (Value v : vals)
    v.getDefiningOp()->erase();
  return true;
}

struct ConcatSliceGrads : fuyou::impl::ConcatSliceGradsBase<ConcatSliceGrads> {
  void runOnOperation() override {
    SmallVector<fg::AddOp> adds;
    getOperation().walk([&](fg::AddOp add) { adds.push_back(add); });
    // Last first: a sum before the adds inside it.
    llvm::SmallPtrSet<Operation *, 16> erased;
    for (fg::AddOp add : llvm::reverse(adds))
      if (!erased.contains(add))
        concatenate(add, erased);
  }
};

} // namespace
