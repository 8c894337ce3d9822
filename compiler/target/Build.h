// Writing a program's files: the weights and the executable built from the
// generated C++ with the system compiler. Plain C++ (the runtime's
// safetensors writer throws), no MLIR.
#ifndef FUYOU_COMPILER_TARGET_BUILD_H
#define FUYOU_COMPILER_TARGET_BUILD_H

#include "compiler/importer/OnnxModel.h"

#include <string>
#include <vector>

namespace fuyou::target {

// Writes the named initializers of `model` to a safetensors file
// (atomically). Returns "" or what went wrong.
std::string writeWeights(const onnx_in::Model &model, const std::vector<std::string> &names,
                         const std::string &path);

// Compiles `cppPath` and links it with libfuyou_rt into `out`; the runtime is
// found beside the running compiler (installed) or in its build tree.
// Returns "" or what went wrong (with the compiler's messages).
std::string buildExecutable(const std::string &cppPath, const std::string &out);

} // namespace fuyou::target

#endif
