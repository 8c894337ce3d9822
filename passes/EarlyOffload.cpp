// fy-early-offload: a tied embedding's gradient is the logits product's part
// (every row) plus the gather's rows, added at the very end of backward; its
// update then stood at the step's boundary, where the next forward waits for
// the whole table. Every row the step's ids do not name is final as soon as
// the logits part is written: grad_offload_early hands those rows to the
// optimizer there, after the table's last read in the step, so most of the
// table is updated while backward runs. Only for a table read rows first
// (fy-rows-first), which the runtime's part for the step's rows builds on.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallPtrSet.h"

namespace fuyou {
#define GEN_PASS_DEF_EARLYOFFLOAD
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// The launch among `buffer`'s users that writes it (the first, in order).
fs::LaunchOp writerOf(Value buffer) {
  fs::LaunchOp first;
  for (Operation *user : buffer.getUsers())
    if (auto l = dyn_cast<fs::LaunchOp>(user); l && llvm::is_contained(l.getOuts(), buffer))
      if (!first || l->isBeforeInBlock(first))
        first = l;
  return first;
}

struct EarlyOffload : fuyou::impl::EarlyOffloadBase<EarlyOffload> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    // With loss scaling every update waits for the step's verdict anyway;
    // the planner may have found the step faster without (fy.plan.early_rows).
    auto plan = module->getAttrOfType<StringAttr>("fy.plan.early_rows");
    if (!step || step.getNumArguments() == 0 || module->hasAttr("fy.loss_scale") || (plan && plan.getValue() == "no"))
      return;
    // The runtime hands the rows over on top of rows first (fy-rows-first):
    // the step's rows are its first part. So each table read rows first.
    Block &body = step.getBody().front();
    for (fs::GroupWaitRowsOp w : llvm::to_vector(body.getOps<fs::GroupWaitRowsOp>())) {
      auto group = module.lookupSymbol<fs::GroupOp>(w.getGroupAttr());
      auto offs = llvm::make_filter_range(body.getOps<fs::GradOffloadOp>(),
                                          [&](fs::GradOffloadOp o) { return o.getGroup() == w.getGroup(); });
      if (!group || offs.empty())
        continue;
      for (auto [grad, param] : llvm::zip((*offs.begin()).getGrads(), group.getParams()))
        if (cast<FlatSymbolRefAttr>(param).getValue() == w.getParam())
          early(body, *offs.begin(), grad, cast<FlatSymbolRefAttr>(param), step.getArgument(0));
    }
  }

  void early(Block &body, fs::GradOffloadOp off, Value grad, FlatSymbolRefAttr param, Value tokens) {
    fs::LaunchOp sum = writerOf(grad);
    if (!sum || sum.getKernel() != "gather_grad_add" || sum.getIns().size() != 3 || sum.getIns()[2] != tokens)
      return;
    Value base = sum.getIns()[0];
    fs::LaunchOp made = writerOf(base);
    if (!made || !made->isBeforeInBlock(sum))
      return;
    for (auto e : body.getOps<fs::GradOffloadEarlyOp>())
      if (e.getGroup() == off.getGroup() && e.getParam() == param.getValue())
        return;
    // The table as the step reads it: get_param results and views of them.
    llvm::SmallPtrSet<Value, 8> table;
    Operation *after = made;
    for (Operation &op : body) {
      if (auto gp = dyn_cast<fs::GetParamOp>(op)) {
        if (gp.getName() == param.getValue())
          table.insert(gp.getResult());
        continue;
      }
      if (auto view = dyn_cast<fs::ViewOp>(op)) {
        if (table.contains(view->getOperand(0)))
          table.insert(view.getResult());
        continue;
      }
      if (isa<fs::DeallocOp>(op))
        continue;
      bool reads = llvm::any_of(op.getOperands(), [&](Value v) { return table.contains(v); });
      bool writesBase = &op != made && isa<fs::LaunchOp>(op) && llvm::is_contained(cast<fs::LaunchOp>(op).getOuts(), base);
      if ((reads || writesBase) && after->isBeforeInBlock(&op))
        after = &op;
    }
    // A read of the table after the sum (a recomputed gather, say) would see
    // rows updated early: leave the update whole.
    if (after != made && !after->isBeforeInBlock(sum))
      return;
    OpBuilder b(after->getContext());
    b.setInsertionPointAfter(after);
    auto chunks = body.getParentOp()->getParentOfType<ModuleOp>()->getAttrOfType<StringAttr>("fy.plan.early_chunks");
    b.create<fs::GradOffloadEarlyOp>(off.getLoc(), off.getGroupAttr(), param, base, tokens,
                                     chunks && chunks.getValue() == "all" ? b.getUnitAttr() : UnitAttr());
  }
};

} // namespace
