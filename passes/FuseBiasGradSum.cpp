// fy-fuse-bias-grad-sum: a Linear-then-GELU's input gradient never stored in
// fp32 when all that reads it is its bias's sum and the products' 16-bit
// copy (Passes.td says why the bits stay).
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_FUSEBIASGRADSUM
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// The launch a bias_*_grad's result feeds when that is its only reader: a
// reduce_sum_cast of it whole (views of it with no other use aside).
fs::LaunchOp onlySum(Value dx, fs::LaunchOp grad) {
  fs::LaunchOp sum;
  SmallVector<Value> values{dx};
  for (size_t i = 0; i < values.size(); ++i)
    for (OpOperand &use : values[i].getUses()) {
      Operation *user = use.getOwner();
      if (auto view = dyn_cast<fs::ViewOp>(user)) {
        values.push_back(view.getResult());
        continue;
      }
      if (isa<fs::DeallocOp>(user) || user == grad.getOperation())
        continue;
      auto launch = dyn_cast<fs::LaunchOp>(user);
      if (!launch || sum || launch.getKernel() != "reduce_sum_cast" || use.getOperandNumber() != 0)
        return {};
      sum = launch;
    }
  return sum;
}

void fuse(fs::LaunchOp grad) {
  if (grad.getOuts().size() != 1 || grad.getIns().size() != 4)
    return;
  Value dx = grad.getOuts()[0];
  auto alloc = dx.getDefiningOp<fs::AllocOp>();
  fs::LaunchOp sum = alloc ? onlySum(dx, grad) : fs::LaunchOp();
  if (!sum || sum->getBlock() != grad->getBlock() || !grad->isBeforeInBlock(sum) ||
      sum.getIns()[0].getType() != dx.getType())
    return;
  // The bias's gradient: one value a column (x's last dim).
  auto x = cast<fs::BufferType>(dx.getType()).getTensorType();
  auto db = cast<fs::BufferType>(sum.getOuts()[0].getType()).getTensorType();
  auto b = cast<fs::BufferType>(grad.getIns()[1].getType()).getTensorType();
  // (Over 32 rows of more than one column: where reduce_sum_cast sums
  // columns, whose order the fused kernel keeps.)
  if (x.getRank() < 1 || db.getNumElements() != x.getDimSize(x.getRank() - 1) ||
      b.getNumElements() != db.getNumElements() || db.getNumElements() < 2 ||
      x.getNumElements() / db.getNumElements() <= 32)
    return;
  // Where the gradient stood, so its inputs live no longer; the sum's
  // results, allocated for it, are allocated there instead (the copy then
  // lives from there, in the place of the fp32 gradient twice its size).
  for (Value out : sum.getOuts()) {
    auto a = out.getDefiningOp<fs::AllocOp>();
    if (!a || a->getBlock() != grad->getBlock())
      return;
  }
  for (Value out : sum.getOuts())
    if (Operation *a = out.getDefiningOp(); grad->isBeforeInBlock(a))
      a->moveBefore(grad);
  OpBuilder bld(grad);
  bld.create<fs::LaunchOp>(grad.getLoc(), (grad.getKernel() + "_sum").str(), grad.getIns(), sum.getOuts(),
                           grad.getArgs());
  sum.erase();
  grad.erase();
  SmallVector<Operation *> dead;  // what is left of dx: unused views, deallocs
  SmallVector<Value> values{dx};
  for (size_t i = 0; i < values.size(); ++i)
    for (Operation *user : values[i].getUsers()) {
      dead.push_back(user);
      if (auto view = dyn_cast<fs::ViewOp>(user))
        values.push_back(view.getResult());
    }
  for (Operation *op : llvm::reverse(dead))
    op->erase();
  alloc.erase();
}

struct FuseBiasGradSum : fuyou::impl::FuseBiasGradSumBase<FuseBiasGradSum> {
  void runOnOperation() override {
    SmallVector<fs::LaunchOp> grads;
    getOperation().walk([&](fs::LaunchOp l) {
      if (l.getKernel() == "bias_gelu_grad" || l.getKernel() == "bias_gelu_tanh_grad")
        grads.push_back(l);
    });
    for (fs::LaunchOp g : grads)
      fuse(g);
  }
};

} // namespace
