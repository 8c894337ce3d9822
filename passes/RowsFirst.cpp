// fy-rows-first: the token embedding is read first by the next forward but
// its gradient is complete only at the end of backward, so a wait for its
// whole update idles the device at every step's start. Where a group's first
// read after its group_wait is a gather of the step's tokens from a resident
// 2-D table, the gather waits only for the rows those tokens name
// (group_wait_rows), which the runtime updates first; the group_wait moves
// to the table's next read (the tied logits product), if there is one.
// A streamed table whose device copy only that gather reads is not copied
// up at all: the gather takes the rows from its host master ("gather_up"),
// so the forward waits for those rows and moves only their bytes.
#include "passes/Passes.h"

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
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || step.getNumArguments() == 0)
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
    // Streamed: the first read is the table's copy up; a gather that is its
    // only reader becomes one from the host master.
    fs::LaunchOp gather;
    auto copy = dyn_cast_or_null<fs::CopyOp>(firstRead);
    if (copy && !copy.getToken()) {
      Value onDevice = copy.getTarget();
      SmallVector<Operation *> readers;
      for (Operation *user : onDevice.getUsers())
        if (user != copy)
          readers.push_back(user);
      if (readers.size() == 1)
        gather = dyn_cast<fs::LaunchOp>(readers.front());
      if (!gather || gather.getIns().size() != 2 || gather.getIns()[0] != onDevice ||
          !onDevice.getDefiningOp<fs::AllocOp>())
        return;
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
      b.create<fs::LaunchOp>(gather.getLoc(), "gather_up", ValueRange{gp, tokens}, gather.getOuts(), b.getArrayAttr({}));
      gather.erase();
      copy.erase();
      alloc->erase();
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
