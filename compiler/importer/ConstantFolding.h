// Evaluates the small constant subgraphs an exporter leaves in a model (shape
// arithmetic: Shape/Gather/Unsqueeze/Concat/Constant feeding Reshape or
// Expand) so that every shape in the imported graph is static.
#ifndef FUYOU_COMPILER_IMPORTER_CONSTANTFOLDING_H
#define FUYOU_COMPILER_IMPORTER_CONSTANTFOLDING_H

#include "compiler/importer/OnnxModel.h"

namespace fuyou::onnx_in {

// True if `op` is one this folder can evaluate once its inputs are known.
bool isFoldable(const std::string &op);

// Computes the node's outputs from constant inputs (nullptr for an omitted
// optional input). Returns "" or why it cannot.
std::string foldNode(const Node &node, const std::vector<const Tensor *> &ins,
                     std::vector<Tensor> &outs);

Tensor makeInts(const std::vector<int64_t> &values, std::vector<int64_t> shape);

} // namespace fuyou::onnx_in

#endif
