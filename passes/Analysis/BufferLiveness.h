// Live ranges of a block's buffers in program order: for each fysched.alloc
// and fysched.constant, from its definition to the last use of the buffer or
// of any view of it. A gradient handed to grad_offload is used until its
// fysched.grad_landed (else the end of the block): its copy off the device
// may run that long; the buffers of an asynchronous copy are used until the wait
// for it. Used by fy-insert-dealloc and fy-plan-memory, printed by
// test-print-buffer-liveness.
#ifndef FUYOU_PASSES_ANALYSIS_BUFFERLIVENESS_H
#define FUYOU_PASSES_ANALYSIS_BUFFERLIVENESS_H

#include "mlir/IR/Block.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/SmallVector.h"

namespace fuyou {

struct BufferInterval {
  mlir::Operation *def;   // the alloc or constant
  mlir::Operation *last;  // the last op using it (itself if unused)
  unsigned start, end;    // positions of def and last in the block
  int64_t bytes;
  bool escapes;           // returned: its lifetime is the caller's
};

class BufferLiveness {
public:
  explicit BufferLiveness(mlir::Block &block);
  llvm::ArrayRef<BufferInterval> intervals() const { return intervals_; }
  unsigned position(mlir::Operation *op) const { return position_.lookup(op); }

private:
  llvm::DenseMap<mlir::Operation *, unsigned> position_;
  llvm::SmallVector<BufferInterval> intervals_;
};

} // namespace fuyou

#endif
