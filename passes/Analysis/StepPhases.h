// The two phases of a training step's body: forward, up to and including
// the first launch that writes the loss (the returned buffer), and backward
// after it. (A loss written by several launches would start backward early:
// placement then moves less, never wrongly; fy-outline-eval refuses it.) Used by the placement passes (fy-place-activations, fy-stream-params),
// which move data between the phases' uses.
#ifndef FUYOU_PASSES_ANALYSIS_STEPPHASES_H
#define FUYOU_PASSES_ANALYSIS_STEPPHASES_H

#include "mlir/IR/Block.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Builders.h"
#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/Hashing.h"
#include "llvm/ADT/STLFunctionalExtras.h"

#include <cstdint>
#include <vector>

namespace fuyou {

// The buffer a value is, or is a view of.
mlir::Value rootBuffer(mlir::Value v);
// The memory space of a buffer value: "device", "host" or "ssd".
llvm::StringRef spaceOf(mlir::Value buffer);
// The bytes a buffer of this type holds (a byte at least per element).
int64_t bufferBytes(mlir::Type buffer);
// The most bytes of rows one gather_up in the module brings up (0: none):
// the page-locked buffer a GPU stages them in.
int64_t gatherUpBytes(mlir::ModuleOp module);

// Where a copy for `use` goes to be issued `launches` launches before it:
// the op it goes before, walking back over the ops between, never past an
// op for which `barrier` holds.
mlir::Operation *issuePoint(mlir::Operation *use, int64_t launches,
                            llvm::function_ref<bool(mlir::Operation *)> barrier);

class StepPhases {
public:
  explicit StepPhases(mlir::Block &body);
  // Whether the loss is written in this block at all (else all is forward).
  bool hasBackward() const { return boundary_ != INT64_MAX; }
  bool backward(mlir::Operation *op) const { return position(op) > boundary_; }
  int64_t position(mlir::Operation *op) const { return pos_.lookup(op); }
  // Whether op was in the block when this was computed (not made since).
  bool contains(mlir::Operation *op) const { return pos_.count(op) != 0; }
  // Moves backward's reads of `from` (directly, or through views of it made
  // in forward) to `to`, which holds the same values: views that backward
  // reads are made again on `to` at b's insertion point.
  void rebaseBackward(mlir::Value from, mlir::Value to, mlir::OpBuilder &b) const;

private:
  llvm::DenseMap<mlir::Operation *, int64_t> pos_;
  int64_t boundary_ = INT64_MAX;
};

// Forward's segments, the unit of per-layer-group placement: a new one
// starts at each launch that reads a parameter of a group no earlier launch
// read, and a buffer is in the segment of its first writer. Buffers that a
// later segment's launches read are their segment's checkpoints.
struct ForwardSegments {
  int64_t count = 1;
  llvm::DenseMap<mlir::Value, int64_t> segmentOf;  // forward buffer -> its segment
  llvm::DenseSet<mlir::Value> checkpoints;
  // Per segment, its launches' kernels, arguments and operand types hashed
  // in order: equal for a model's repeated blocks.
  std::vector<llvm::hash_code> shape;
};
ForwardSegments findForwardSegments(mlir::ModuleOp module, mlir::Block &body, const StepPhases &phases);

} // namespace fuyou

#endif
