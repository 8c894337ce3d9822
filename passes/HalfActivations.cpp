// fy-half-activations: activations and their gradients in 16 bits, as
// autocast keeps them (Passes.td says which buffers stay fp32, and why).
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/SetVector.h"

namespace fuyou {
#define GEN_PASS_DEF_HALFACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// Outputs a kernel writes in fp32 whatever the activations are.
bool keepsF32(StringRef kernel, unsigned out) {
  if (kernel == "layer_norm" || kernel == "layer_norm_nobias")
    return out == 1 || out == 2;  // mean, inv_std
  if (kernel == "rms_norm" || kernel == "attention")
    return out == 1;  // inv_rms, lse
  if (kernel == "softmax_cross_entropy" || kernel == "loss_scale")
    return true;
  if (kernel == "linear_cross_entropy")
    return out == 0 || out == 3;  // the loss, the block of logits it works in
  return false;
}

// A buffer and the views of it.
struct Storage {
  fs::AllocOp alloc;
  SmallVector<Value> values;
};

struct HalfActivations : fuyou::impl::HalfActivationsBase<HalfActivations> {
  using HalfActivationsBase::HalfActivationsBase;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    Type half;
    if (dtype == "bf16")
      half = BFloat16Type::get(ctx);
    else if (dtype == "fp16")
      half = Float16Type::get(ctx);
    else {
      getOperation().emitError() << "fy-half-activations: dtype must be bf16 or fp16, got '" << dtype << "'";
      return signalPassFailure();
    }
    getOperation().walk([&](func::FuncOp f) { run(f, half); });
  }

  void run(func::FuncOp f, Type half) {
    std::vector<Storage> storages;
    DenseMap<Value, size_t> storageOf;
    f.walk([&](fs::AllocOp a) {
      auto t = cast<fs::BufferType>(a.getType());
      if (!t.getElementType().isF32() || t.getNumElements() <= 1)
        return;
      Storage s{a, {a.getResult()}};
      for (size_t i = 0; i < s.values.size(); ++i)
        for (Operation *user : s.values[i].getUsers())
          if (auto v = dyn_cast<fs::ViewOp>(user))
            s.values.push_back(v.getResult());
      for (Value v : s.values)
        storageOf[v] = storages.size();
      storages.push_back(std::move(s));
    });

    // Kept fp32: by the kernel that writes it, or read outside a launch.
    std::vector<bool> keep(storages.size(), false);
    SmallVector<size_t> leaves;
    for (auto [i, s] : llvm::enumerate(storages))
      for (Value v : s.values)
        for (OpOperand &use : v.getUses()) {
          Operation *user = use.getOwner();
          if (isa<fs::ViewOp>(user))
            continue;
          auto launch = dyn_cast<fs::LaunchOp>(user);
          if (!launch) {
            if (!keep[i])
              leaves.push_back(i);
            keep[i] = true;
            continue;
          }
          for (auto [k, out] : llvm::enumerate(launch.getOuts()))
            if (out == v && keepsF32(launch.getKernel(), unsigned(k)))
              keep[i] = true;
        }
    // What leaves (a parameter's gradient) is summed from fp32 parts: a
    // tied weight's two uses (add), a table's rows onto its other
    // gradient (gather_grad_add), which fy-early-offload hands over alone.
    while (!leaves.empty()) {
      size_t i = leaves.pop_back_val();
      for (Value v : storages[i].values)
        for (Operation *user : v.getUsers())
          if (auto launch = dyn_cast<fs::LaunchOp>(user);
              launch && (launch.getKernel() == "add" || launch.getKernel() == "gather_grad_add") &&
              llvm::is_contained(launch.getOuts(), v))
            for (Value in : launch.getIns())
              if (auto it = storageOf.find(in); it != storageOf.end() && !keep[it->second]) {
                keep[it->second] = true;
                leaves.push_back(it->second);
              }
    }

    for (auto [i, s] : llvm::enumerate(storages)) {
      if (keep[i])
        continue;
      for (Value v : s.values) {
        auto t = cast<fs::BufferType>(v.getType());
        auto tensor = RankedTensorType::get(t.getShape(), half);
        v.setType(fs::BufferType::get(t.getContext(), t.getSpace(), tensor));
      }
    }
  }
};

} // namespace
