#include "passes/Analysis/StepPhases.h"

#include "dialects/FySched/FySchedOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"

#include "llvm/ADT/StringSet.h"

#include <functional>

using namespace mlir;
namespace fs = fuyou::fysched;

namespace fuyou {

Value rootBuffer(Value v) {
  while (auto view = v.getDefiningOp<fs::ViewOp>())
    v = view.getSource();
  return v;
}

StringRef spaceOf(Value buffer) { return cast<fs::BufferType>(buffer.getType()).getSpace(); }

int64_t bufferBytes(Type buffer) {
  RankedTensorType t = cast<fs::BufferType>(buffer).getTensorType();
  return t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
}

int64_t gatherUpBytes(ModuleOp module) {
  int64_t most = 0;
  module.walk([&](fs::LaunchOp l) {
    if (l.getKernel() == "gather_up")
      most = std::max(most, bufferBytes(l.getOuts()[0].getType()));
  });
  return most;
}

Operation *issuePoint(Operation *use, int64_t launches, function_ref<bool(Operation *)> barrier) {
  Operation *at = use;
  for (int64_t n = 0; n < launches && at->getPrevNode() && !barrier(at->getPrevNode());) {
    at = at->getPrevNode();
    n += isa<fs::LaunchOp>(at);
  }
  return at;
}

StepPhases::StepPhases(Block &body) {
  auto ret = dyn_cast<func::ReturnOp>(body.getTerminator());
  Value loss = ret && ret.getNumOperands() ? rootBuffer(ret.getOperand(0)) : Value();
  for (auto [i, op] : llvm::enumerate(body)) {
    pos_[&op] = int64_t(i);
    if (auto launch = dyn_cast<fs::LaunchOp>(op); launch && loss && !hasBackward())
      for (Value out : launch.getOuts())
        if (rootBuffer(out) == loss)
          boundary_ = int64_t(i);
  }
}

void StepPhases::rebaseBackward(Value from, Value to, OpBuilder &b) const {
  // Whether backward reads a value, directly or through views.
  std::function<bool(Value)> readLater = [&](Value v) {
    for (Operation *user : v.getUsers()) {
      if (backward(user))
        return true;
      if (auto view = dyn_cast<fs::ViewOp>(user); view && contains(view) && readLater(view.getResult()))
        return true;
    }
    return false;
  };
  for (OpOperand &use : llvm::make_early_inc_range(from.getUses())) {
    Operation *user = use.getOwner();
    if (backward(user)) {
      use.set(to);
    } else if (auto view = dyn_cast<fs::ViewOp>(user); view && readLater(view.getResult())) {
      auto again = b.create<fs::ViewOp>(view.getLoc(), view.getType(), to);
      rebaseBackward(view.getResult(), again.getResult(), b);
    }
  }
}

ForwardSegments findForwardSegments(ModuleOp module, Block &body, const StepPhases &phases) {
  llvm::StringMap<StringRef> groupOf;
  for (auto g : module.getOps<fs::GroupOp>())
    for (Attribute p : g.getParams())
      groupOf[cast<FlatSymbolRefAttr>(p).getValue()] = g.getSymName();
  // A streamed weight is read through its device copy (fy-stream-params).
  DenseMap<Value, StringRef> paramOf;
  for (auto gp : body.getOps<fs::GetParamOp>())
    paramOf[gp.getResult()] = gp.getName();
  for (auto copy : body.getOps<fs::CopyOp>())
    if (StringRef p = paramOf.lookup(rootBuffer(copy.getSource())); !p.empty())
      paramOf[rootBuffer(copy.getTarget())] = p;
  llvm::StringSet<> seen;
  ForwardSegments out;
  int64_t current = 0;
  for (auto launch : body.getOps<fs::LaunchOp>()) {
    if (phases.backward(launch))
      break;
    for (Value in : launch.getIns())
      if (StringRef g = groupOf.lookup(paramOf.lookup(rootBuffer(in))); !g.empty() && seen.insert(g).second &&
                                                                          seen.size() > 1)
        ++current;
    for (Value in : launch.getIns())
      if (auto it = out.segmentOf.find(rootBuffer(in)); it != out.segmentOf.end() && it->second < current)
        out.checkpoints.insert(it->first);
    for (Value o : launch.getOuts())
      out.segmentOf.try_emplace(rootBuffer(o), current);
    out.shape.resize(current + 1, llvm::hash_value(0));
    llvm::hash_code h = llvm::hash_combine(out.shape[current], launch.getKernel(), launch->getAttr("args"));
    for (Value v : launch->getOperands())
      h = llvm::hash_combine(h, v.getType());
    out.shape[current] = h;
  }
  out.count = current + 1;
  out.shape.resize(out.count, llvm::hash_value(0));
  return out;
}

} // namespace fuyou
