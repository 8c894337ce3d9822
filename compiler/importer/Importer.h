// ONNX (as read by OnnxModel) → fygraph.
#ifndef FUYOU_COMPILER_IMPORTER_IMPORTER_H
#define FUYOU_COMPILER_IMPORTER_IMPORTER_H

#include "compiler/importer/OnnxModel.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"

#include <string>
#include <vector>

namespace fuyou {

struct ImportStats {
  int64_t trainableParams = 0;   // elements
  int64_t trainableTensors = 0;
  int64_t frozenTensors = 0;
  // Lines for the user that do not stop the compile (a model that may not
  // train as its author meant).
  std::vector<std::string> warnings;
};

// Builds `func.func @forward(token ids, target ids) -> loss` and one
// fygraph.param per initializer the loss reads. Initializers matched by
// `freeze` or listed in metadata "fuyou.frozen" are not trainable.
// On failure returns null and sets `error` to one line naming the culprit.
mlir::OwningOpRef<mlir::ModuleOp> importModel(mlir::MLIRContext &ctx, const onnx_in::Model &model,
                                              const onnx_in::NameFilter &freeze,
                                              ImportStats &stats, std::string &error);

// Ops the importer understands, for error messages.
std::string supportedOnnxOps();

} // namespace fuyou

#endif
