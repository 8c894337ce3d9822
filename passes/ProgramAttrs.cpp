// fy-program-attrs: what the compile's flags decide for the program,
// recorded on the module (see Passes.td).
#include "passes/Passes.h"

#include "runtime/abi/sizes.h"
#include "mlir/IR/BuiltinOps.h"

namespace fuyou {
#define GEN_PASS_DEF_PROGRAMATTRS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

struct ProgramAttrs : fuyou::impl::ProgramAttrsBase<ProgramAttrs> {
  using ProgramAttrsBase::ProgramAttrsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    Builder b(module.getContext());
    module->setAttr("fy.precision", b.getStringAttr(precision));
    if (target == "cuda") {
      auto forward = module.lookupSymbol<func::FuncOp>("forward");
      auto ids = forward && forward.getNumArguments() ? dyn_cast<RankedTensorType>(forward.getArgumentTypes()[0])
                                                      : RankedTensorType();
      if (!ids || !ids.hasStaticShape()) {
        module.emitError("fy-program-attrs: @forward's first argument is not a token tensor of a known shape");
        return signalPassFailure();
      }
      const bool sixteenBit = precision == "bf16" || precision == "fp16";
      const size_t reserved = fy::cuda::kMatmulWorkspaceBytes + (sixteenBit ? fy::cuda::kMatmulConvertBytes : 0) +
                              fy::cuda::step_io_bytes(size_t(ids.getNumElements()));
      module->setAttr("fysched.reserved_device_bytes", b.getI64IntegerAttr(int64_t(reserved)));
    }
    module->setAttr("fy.optimizer", b.getStringAttr(optimizer));
    if (lossScale)
      module->setAttr("fy.loss_scale", b.getStringAttr("dynamic"));
    if (gpuMem > 0)
      module->setAttr("fy.budget.gpu_mem", b.getI64IntegerAttr(gpuMem));
    if (activations == "auto")
      return;
    module->setAttr("fy.plan.activations", b.getStringAttr(activations));
    module->setAttr("fy.plan.params", b.getStringAttr(params));
    if (earlyRows == "no")
      module->setAttr("fy.plan.early_rows", b.getStringAttr("no"));
    if (earlyChunks == "all")
      module->setAttr("fy.plan.early_chunks", b.getStringAttr("all"));
    if (gradLanding > 1)
      module->setAttr("fy.plan.grad_landing", b.getI64IntegerAttr(gradLanding));
  }
};

} // namespace
