// fy-rows-first: the token embedding is read first by the next forward but
// its gradient is complete only at the end of backward, so a wait for its
// whole update idles the device at every step's start. Where a group's first
// read after its group_wait is a gather of the step's tokens from a resident
// 2-D table, the gather waits only for the rows those tokens name
// (group_wait_rows), which the runtime updates first; the group_wait moves
// to the table's next read (the tied logits product), if there is one.
// A streamed table is not copied up for the gather: it takes the rows from
// the host master ("gather_up"), so the forward waits for those rows and
// moves only their bytes; a tied table's copy and group_wait move down to
// the logits product.
#include "passes/Passes.h"
#include "passes/AttrNames.h"
#include "passes/Analysis/StepPhases.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/SmallPtrSet.h"
#include "llvm/ADT/StringSet.h"

namespace fuyou {
#define GEN_PASS_DEF_ROWSFIRST
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

struct RowsFirst : fuyou::impl::RowsFirstBase<RowsFirst> {
  using RowsFirstBase::RowsFirstBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || step.getNumArguments() == 0 || !fuyou::attr::scheduleRule(module, fuyou::attr::kScheduleRowsFirst))
      return;
    SmallVector<fs::GroupWaitOp> waits(step.getBody().front().getOps<fs::GroupWaitOp>());
    for (fs::GroupWaitOp wait : waits)
      if (auto group = module.lookupSymbol<fs::GroupOp>(wait.getGroupAttr()); group && !wait.getParam())
        split(wait, group, step.getArgument(0));
  }

  void split(fs::GroupWaitOp wait, fs::GroupOp group, Value tokens) {
    llvm::StringSet<> members;
    for (Attribute a : group.getParams())
      members.insert(cast<FlatSymbolRefAttr>(a).getValue());
    // The group's parameters as read after the wait: get_param results and
    // views of them. The first two ops that read one decide.
    llvm::SmallPtrSet<Value, 8> tables;
    Operation *firstRead = nullptr, *nextRead = nullptr;
    for (Operation *op = wait->getNextNode(); op && !nextRead; op = op->getNextNode()) {
      if (auto gp = dyn_cast<fs::GetParamOp>(op)) {
        if (members.contains(gp.getName()))
          tables.insert(gp.getResult());
        continue;
      }
      if (auto view = dyn_cast<fs::ViewOp>(op)) {
        if (tables.contains(view->getOperand(0)))
          tables.insert(view.getResult());
        continue;
      }
      if (llvm::any_of(op->getOperands(), [&](Value v) { return tables.contains(v); }))
        (firstRead ? nextRead : firstRead) = op;
    }
    // Streamed: the first read is the table's copy up, and the gather the
    // copy's first reader; it becomes one from the host master. Whatever
    // else reads the copy (a tied table's logits product) gets it later.
    fs::LaunchOp gather;
    Operation *laterUse = nullptr;
    auto copy = dyn_cast_or_null<fs::CopyOp>(firstRead);
    if (copy && !copy.getToken()) {
      Value onDevice = copy.getTarget();
      Operation *first = nullptr;
      for (Operation *user : onDevice.getUsers())
        if (user != copy && (!first || user->isBeforeInBlock(first)))
          first = user;
      gather = dyn_cast_or_null<fs::LaunchOp>(first);
      if (!gather || gather.getIns().size() != 2 || gather.getIns()[0] != onDevice ||
          !onDevice.getDefiningOp<fs::AllocOp>())
        return;
      for (Operation *user : onDevice.getUsers())
        if (user != copy && user != gather && (!laterUse || user->isBeforeInBlock(laterUse)))
          laterUse = user;
    } else {
      gather = dyn_cast_or_null<fs::LaunchOp>(firstRead);
    }
    if (!gather || gather.getKernel() != "gather" || gather.getIns().size() != 2 || gather.getIns()[1] != tokens)
      return;
    auto gp = (copy ? copy.getSource() : gather.getIns()[0]).getDefiningOp<fs::GetParamOp>();
    if (!gp)
      return;
    auto type = cast<fs::BufferType>(gp.getType());
    if (type.getSpace() != (copy ? "host" : "device") || type.getTensorType().getRank() != 2)
      return;
    OpBuilder b(wait);
    b.create<fs::GroupWaitRowsOp>(wait.getLoc(), wait.getGroupAttr(), gp.getNameAttr(), tokens);
    if (copy) {
      Operation *alloc = copy.getTarget().getDefiningOp();
      b.setInsertionPoint(gather);
      auto up = b.create<fs::LaunchOp>(gather.getLoc(), "gather_up", ValueRange{gp, tokens}, gather.getOuts(),
                                       b.getArrayAttr({}));
      gather.erase();
      if (!laterUse) {
        copy.erase();
        alloc->erase();
      } else {
        // The group_wait, the buffer and the copy go `ahead` launches before
        // the later read, as fy-stream-params places a phase's first copy
        // (not above the gather): the forward between runs while the rest
        // of the table is updated. The wait stays above the group's next
        // read of another parameter, if that comes first.
        Operation *at = fuyou::issuePoint(laterUse, ahead, [&](Operation *op) { return op == up; });
        wait->moveBefore(nextRead && nextRead->isBeforeInBlock(at) ? nextRead : at);
        alloc->moveBefore(at);
        copy->moveBefore(at);
        return;
      }
    }
    // With no other read in the step, nothing waits for the rest: a
    // group_wait at the step's end would wait for this step's own update.
    // (The next grad_offload of the group waits for it in the runtime.)
    if (nextRead)
      wait->moveBefore(nextRead);
    else
      wait->erase();
  }
};

} // namespace
