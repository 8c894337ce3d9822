// Writing a program's files: the weights and the executable built from the
// generated C++ with the system compiler. Plain C++, no MLIR; of the
// runtime only its declared interface (runtime/abi/).
#ifndef FUYOU_COMPILER_TOOLCHAIN_BUILD_H
#define FUYOU_COMPILER_TOOLCHAIN_BUILD_H

#include "compiler/importer/OnnxModel.h"

#include <cstdint>
#include <csignal>
#include <string>
#include <vector>

namespace fuyou::toolchain {

// Writes the named initializers of `model` that the compile read (small
// ones, and those of ONNX text or typed fields, which no file offset
// addresses) to a safetensors file (atomically); `written` says whether
// there were any. Returns "" or what went wrong.
std::string writeWeights(const onnx_in::Model &model, const std::vector<std::string> &names,
                         const std::string &path, bool &written);

// C++ for the generated program: where each of the named parameters lies
// (the ONNX file's raw_data or external data, or the program's weights
// file), the model's other initializer names, and tied names, handed to the
// runtime at start-up. Sets `error` on a name the format cannot hold.
// `program` is the executable's path (the model is found relative to it too).
std::string weightSourcesCpp(const onnx_in::Model &model, const std::vector<std::string> &names,
                             const std::string &program, std::string &error);

// Whether this compiler can build programs for `target` ("cpu", "cuda": the
// CUDA runtime exists only where nvcc was found at build time).
bool haveTarget(const std::string &target);

// Compiles `cppPath` and links it with the target's runtime library
// (libfuyou_rt, libfuyou_rt_cuda) into `out`; the runtime is found beside the
// running compiler (installed) or in its build tree. Returns "" or what went
// wrong (with the compiler's messages); `*signal` is the signal that ended
// the build, when one did. The C++ compiler runs in a process group of its
// own: a signal meant for the compile reaches it through stopBuild.
std::string buildExecutable(const std::string &cppPath, const std::string &out,
                            const std::string &target, int *signal = nullptr);

// The signals that stop a compile (and the build it runs): Ctrl-C, Ctrl-\,
// a scheduler's SIGTERM, a closed terminal.
inline constexpr int kStopSignals[] = {SIGINT, SIGQUIT, SIGTERM, SIGHUP};
// The set of them, for sigprocmask.
sigset_t stopSignalSet();

// For the compile's signal handler (async-signal-safe): passes `sig` on to
// the build running now, if any, and returns once it has ended (after 2 s,
// by SIGKILL), so that it writes nothing more.
void stopBuild(int sig) noexcept;

} // namespace fuyou::toolchain

#endif
