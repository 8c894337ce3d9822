// fy-plan-memory: how much device memory the program needs, known before it
// runs: the parameters, plus the peak of the temporaries alive at once.
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

namespace fuyou {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;
namespace fs = fuyou::fysched;

namespace {

int64_t bytesOf(RankedTensorType t) {
  return t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
}
// The runtime's allocator hands out 64-byte granules.
int64_t granules(int64_t bytes) { return (bytes + 63) / 64 * 64; }

struct PlanMemory : fuyou::impl::PlanMemoryBase<PlanMemory> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    int64_t params = 0;
    for (auto p : module.getOps<fg::ParamOp>())
      params += granules(bytesOf(cast<RankedTensorType>(p.getType())));
    int64_t live = 0, peak = 0;
    DenseMap<Value, int64_t> size;
    for (Operation &op : step.getBody().front()) {
      if (isa<fs::AllocOp, fs::ConstantOp>(op)) {
        int64_t n = granules(cast<fs::BufferType>(op.getResult(0).getType()).getSizeInBytes());
        size[op.getResult(0)] = n;
        live += n;
        peak = std::max(peak, live);
      } else if (auto d = dyn_cast<fs::DeallocOp>(op)) {
        live -= size.lookup(d.getBuffer());
      }
    }
    Builder b(module.getContext());
    step->setAttr("fysched.param_bytes", b.getI64IntegerAttr(params));
    step->setAttr("fysched.peak_temp_bytes", b.getI64IntegerAttr(peak));
  }
};

} // namespace
