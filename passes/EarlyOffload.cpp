// fy-early-offload: a tied embedding's gradient is the logits product's part
// (every row) plus the gather's rows, added at the very end of backward; its
// update then stood at the step's boundary, where the next forward waits for
// the whole table. Every row the step's ids do not name is final as soon as
// the logits part is written: grad_offload_early hands those rows to the
// optimizer there, so most of the table is updated while backward runs. The
// input gradient's product still reads the table: the update waits for that
// read only at its writes (early_release), not at the copy down. Only for a
// table read rows first (fy-rows-first), which the runtime's part for the
// step's rows builds on.
#include "passes/Analysis/StepPhases.h"
#include "passes/AttrNames.h"
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

// Autodiff may order the input gradient's product (a read of the table)
// before the table's own product `made`; the two are independent, so
// `made` (with its output's alloc) goes up above the table's reads among
// the launches right before it, where nothing writes what it reads or
// touches what it writes: its gradient then goes down while the table is
// still read. Kernels in another order, the same bits. Not into forward,
// which would hold the gradient's buffer through it.
void hoistAboveReads(fs::LaunchOp made, const fuyou::StepPhases &phases,
                     llvm::function_ref<bool(Operation &)> readsTable) {
  llvm::SmallPtrSet<Value, 4> ins, outs;
  for (Value v : made.getIns())
    ins.insert(fuyou::rootBuffer(v));
  for (Value v : made.getOuts())
    outs.insert(fuyou::rootBuffer(v));
  SmallVector<Operation *> allocs;  // of made's outputs, carried up with it
  Operation *above = nullptr;
  for (Operation *op = made->getPrevNode(); op && phases.backward(op); op = op->getPrevNode()) {
    if (isa<fs::AllocOp>(op)) {
      if (outs.contains(op->getResult(0)))
        allocs.push_back(op);
      continue;
    }
    if (auto view = dyn_cast<fs::ViewOp>(op)) {
      if (llvm::is_contained(made->getOperands(), view.getResult()))
        break;  // made reads or writes through it: not above its definition
      continue;
    }
    auto launch = dyn_cast<fs::LaunchOp>(op);
    if (!launch || llvm::any_of(launch.getOuts(), [&](Value v) { return ins.contains(fuyou::rootBuffer(v)) || outs.contains(fuyou::rootBuffer(v)); }) ||
        llvm::any_of(launch.getIns(), [&](Value v) { return outs.contains(fuyou::rootBuffer(v)); }))
      break;
    if (readsTable(*op))
      above = op;
  }
  if (!above)
    return;
  // (Those above `above` stay: a view of one may sit between.)
  for (Operation *a : llvm::reverse(allocs))
    if (above->isBeforeInBlock(a))
      a->moveBefore(above);
  made->moveBefore(above);
}

struct EarlyOffload : fuyou::impl::EarlyOffloadBase<EarlyOffload> {
  using EarlyOffloadBase::EarlyOffloadBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    // With loss scaling every update waits for the step's verdict anyway;
    // the planner may have found the step faster without (the plan's early_rows).
    auto plan = fuyou::fysched::PlanAttr::of(module);
    if (!step || step.getNumArguments() == 0 || module->hasAttr(fuyou::attr::kLossScale) ||
        (plan && plan.getEarlyRows() == "no"))
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
    // The gradient goes down once base is written for the last time (made
    // writes it first); the update may write the table only after its last
    // read.
    llvm::SmallPtrSet<Value, 8> table;
    auto readsTable = [&](Operation &op) {
      return !isa<fs::ViewOp, fs::DeallocOp>(op) && llvm::any_of(op.getOperands(), [&](Value v) { return table.contains(v); });
    };
    Operation *written = made, *lastRead = nullptr;
    for (Operation &op : body) {
      if (auto gp = dyn_cast<fs::GetParamOp>(op); gp && gp.getName() == param.getValue())
        table.insert(gp.getResult());
      else if (auto view = dyn_cast<fs::ViewOp>(op); view && table.contains(view->getOperand(0)))
        table.insert(view.getResult());
      else if (readsTable(op))
        lastRead = &op;
      if (auto l = dyn_cast<fs::LaunchOp>(op); l && llvm::is_contained(l.getOuts(), base))
        written = &op;
    }
    // A read of the table after the sum (a recomputed gather, say) would see
    // rows updated early: leave the update whole.
    if ((lastRead && !lastRead->isBeforeInBlock(sum)) || !written->isBeforeInBlock(sum))
      return;
    const bool hold = this->hold && fuyou::attr::scheduleRule(getOperation(), fuyou::attr::kScheduleEarlyHold);
    if (hold)
      hoistAboveReads(made, fuyou::StepPhases(body), readsTable);
    const bool readAfter = lastRead && written->isBeforeInBlock(lastRead);
    const bool held = readAfter && hold;
    OpBuilder b(written->getContext());
    b.setInsertionPointAfter(readAfter && !hold ? lastRead : written);
    auto plan = fuyou::fysched::PlanAttr::of(getOperation());
    b.create<fs::GradOffloadEarlyOp>(off.getLoc(), off.getGroupAttr(), param, base, tokens,
                                     plan && plan.getEarlyChunks() == "all" ? b.getUnitAttr() : UnitAttr(),
                                     held ? b.getUnitAttr() : UnitAttr());
    if (held) {
      b.setInsertionPointAfter(lastRead);
      b.create<fs::EarlyReleaseOp>(off.getLoc(), off.getGroupAttr(), param);
    }
  }
};

} // namespace
