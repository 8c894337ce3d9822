// fy-partition-groups: layer groups, the unit of swapping and of the CPU
// optimizer, in the order backward completes them.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>
#include <map>

namespace fuyou {
#define GEN_PASS_DEF_PARTITIONGROUPS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;
namespace fs = fuyou::fysched;

namespace {

// The group key of a parameter name: the path up to the first numeric
// component for block parameters ("transformer.h.3.attn.w" → "transformer.h.3"),
// else the path without its last component ("transformer.wte.weight" →
// "transformer.wte"), so embeddings, heads and final norms stay apart.
std::string groupKey(StringRef name) {
  SmallVector<StringRef> parts;
  name.split(parts, '.');
  std::string key;
  for (auto [i, p] : llvm::enumerate(parts)) {
    key += (i ? "." : "") + p.str();
    unsigned long long n;
    if (!p.getAsInteger(10, n))
      return key;
  }
  size_t dot = name.rfind('.');
  return dot == StringRef::npos ? name.str() : name.substr(0, dot).str();
}

struct PartitionGroups : fuyou::impl::PartitionGroupsBase<PartitionGroups> {
  using PartitionGroupsBase::PartitionGroupsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step) {
      module.emitError("fy-partition-groups needs func.func @train_step");
      return signalPassFailure();
    }
    llvm::StringMap<int64_t> paramBytes;
    for (auto p : module.getOps<fg::ParamOp>()) {
      auto t = cast<RankedTensorType>(p.getType());
      paramBytes[p.getSymName()] = t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
    }

    // Updates by group key, keyed groups ordered by their last update: the
    // moment backward has produced the group's last gradient.
    std::vector<std::pair<std::string, SmallVector<fs::CpuAdamWOp>>> groups;
    std::map<std::string, size_t> slot;
    std::map<std::string, unsigned> lastPos;
    unsigned pos = 0;
    step.walk([&](fs::CpuAdamWOp op) {
      std::string key = groupKey(op.getParam());
      auto [it, fresh] = slot.try_emplace(key, groups.size());
      if (fresh)
        groups.push_back({key, {}});
      groups[it->second].second.push_back(op);
      lastPos[key] = pos++;
    });
    std::stable_sort(groups.begin(), groups.end(),
                     [&](auto &a, auto &b) { return lastPos[a.first] < lastPos[b.first]; });

    OpBuilder b(module.getContext());
    b.setInsertionPoint(step);
    unsigned index = 0;
    auto emit = [&](ArrayRef<fs::CpuAdamWOp> ops, int64_t bytes) {
      std::string name = "g" + std::to_string(index++);
      SmallVector<Attribute> params;
      for (fs::CpuAdamWOp op : ops) {
        params.push_back(op.getParamAttr());
        op.setGroupAttr(FlatSymbolRefAttr::get(module.getContext(), name));
      }
      b.create<fs::GroupOp>(step.getLoc(), name, b.getArrayAttr(params), bytes);
    };
    for (auto &[key, ops] : groups) {
      // A bound on bytes splits a group in its update order.
      SmallVector<fs::CpuAdamWOp> part;
      int64_t bytes = 0;
      for (fs::CpuAdamWOp op : ops) {
        int64_t n = paramBytes.lookup(op.getParam());
        if (maxBytes > 0 && !part.empty() && bytes + n > maxBytes) {
          emit(part, bytes);
          part.clear();
          bytes = 0;
        }
        part.push_back(op);
        bytes += n;
      }
      if (!part.empty())
        emit(part, bytes);
    }
  }
};

} // namespace
