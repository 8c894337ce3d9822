// test-print-buffer-liveness: the buffer liveness analysis, as remarks.
#include "passes/Analysis/BufferLiveness.h"
#include "passes/Passes.h"

namespace fuyou {
#define GEN_PASS_DEF_TESTPRINTBUFFERLIVENESS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

struct TestPrintBufferLiveness
    : fuyou::impl::TestPrintBufferLivenessBase<TestPrintBufferLiveness> {
  void runOnOperation() override {
    getOperation().walk([&](func::FuncOp f) {
      for (Block &block : f.getBody()) {
        fuyou::BufferLiveness liveness(block);
        for (const fuyou::BufferInterval &iv : liveness.intervals())
          iv.def->emitRemark() << iv.bytes << " bytes live [" << iv.start << ", " << iv.end << "]"
                               << (iv.escapes ? ", escapes" : "");
      }
    });
  }
};

} // namespace
