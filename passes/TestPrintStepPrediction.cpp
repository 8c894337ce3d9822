// test-print-step-prediction: the cost model's plan print for a module
// planned already (or written by hand), with a given profile.
#include "passes/Analysis/CostModel.h"
#include "passes/Passes.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

namespace fuyou {
#define GEN_PASS_DEF_TESTPRINTSTEPPREDICTION
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

struct TestPrintStepPrediction : fuyou::impl::TestPrintStepPredictionBase<TestPrintStepPrediction> {
  using Base::Base;
  void runOnOperation() override {
    fuyou::Profile p;
    if (std::string err = fuyou::loadPlanProfile(profile, target, "", p); !err.empty()) {
      getOperation().emitError() << "test-print-step-prediction: " << err;
      return signalPassFailure();
    }
    fuyou::printPlan(getOperation(), p, stateOnSsd, 0, 0, llvm::outs());
    if (!timeline)
      return;
    fuyou::Prediction pred = fuyou::predictStep(getOperation(), p, stateOnSsd, /*timeline=*/true);
    for (const auto &s : pred.timeline)
      llvm::outs() << llvm::formatv("slice {0}: {1} {2:f2}-{3:f2} us\n", fuyou::streamName(s.stream), s.name,
                                    s.start * 1e6, s.end * 1e6);
  }
};

} // namespace
