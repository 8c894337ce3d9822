// Where a program's parameters come from when it starts. The compiler reads
// none of them: it records where each one lies (the ONNX file's raw_data or
// external data, or the program's own small weights file for what the ONNX
// file does not address) and the program reads them, a tensor at a time,
// straight into their storage. --weights reads them from a checkpoint
// instead: a safetensors file, a Hugging Face sharded checkpoint (its
// directory or model.safetensors.index.json), or one of ours.
#pragma once

#include <string>

#include "exec/runtime.h"

namespace fy {

// The generated program hands over the sources its compile recorded (at
// static initialisation; programs compiled before have none, and read every
// parameter from their weights file).
bool set_weight_sources(const char* manifest);

// Loads every parameter of `rt`: from `weights` when given, else from the
// recorded sources (the ONNX file at `onnx` instead of the recorded one when
// given) and `own_file`, the program's weights file. Fails with one line
// naming a missing, misshaped or extra tensor, before any step.
void load_weights(Runtime& rt, const std::string& weights, const std::string& onnx, const std::string& own_file);

}  // namespace fy
