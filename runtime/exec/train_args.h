// The program's flags: its usage text, their parsing into TrainOptions and
// the checks on them that need no model (sizes, counts, the files it writes
// not being ones it reads).
#pragma once

#include <cstdint>
#include <string>

#include "exec/runtime.h"

namespace fy {

// Fills `o` from the command line; false when --help was given (the usage
// printed). Fails with one line naming the flag on a bad one.
bool parse_args(int argc, char** argv, TrainOptions* o);

// "512M", "1.5G", "4096": bytes. K, M, G, T are powers of 1024.
int64_t parse_size(const std::string& flag, const std::string& value);

// Fails, naming the flag, unless `path` can be written at the end of the run
// (through PATH.tmp, renamed over PATH, a regular file). Leaves nothing.
void check_output_path(const char* flag, const std::string& path);

// Fails when a file the run writes is one it reads, or another it writes.
void check_outputs_are_not_inputs(const TrainOptions& o);

}  // namespace fy
