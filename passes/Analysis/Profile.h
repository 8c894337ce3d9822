// A machine's rates, as the cost model uses them: what `fuyou-compile
// --calibrate` measured, the built-in figures, or a program's kernel times.
#ifndef FUYOU_PASSES_ANALYSIS_PROFILE_H
#define FUYOU_PASSES_ANALYSIS_PROFILE_H

#include "llvm/ADT/DenseMap.h"
#include "llvm/ADT/StringMap.h"

#include <string>

namespace fuyou {

// Rates of one machine; see runtime/tools/profile.h for how each is measured.
struct Profile {
  std::string target = "cpu", device, source = "built-in";
  double matmulFlops = 0, memBytes = 0, launchS = 0, h2dBytes = 0, d2hBytes = 0;
  double ssdReadBytes = 0, ssdWriteBytes = 0;  // 0: not measured (no --ssd)
  double adamwParams = 0;
  // Optional (0: not measured): the matmul rate at n = 64 and 256 beside the
  // large one at n = matmulN, and elements per second of kernels bound by
  // their exp/tanh (activation functions, softmax-like).
  double matmulN = 0, matmulN64Flops = 0, matmulN256Flops = 0;
  // Optional: the rate at n = 1024 and 2048, where one matmulN cube and the
  // small ones leave products of GPT-sized layers to interpolation.
  double matmulN1024Flops = 0, matmulN2048Flops = 0;
  // The matmul rates were measured with bf16 (fp16) operands, their 16-bit
  // copies included (fuyou-calibrate on a GPU); else fp32.
  bool matmul16 = false;
  double transcendentalElems = 0, softmaxElems = 0;
  // Optional: layer norm (RMS norm) and its gradient, bound by their row
  // statistics rather than memory on a CPU.
  double normElems = 0, normGradElems = 0;
  // Optional: fused attention, forward and backward, in its products' flops.
  double attentionFlops = 0;
  // Seconds per launch measured in a program's --trace (loadKernelTimes),
  // by kernel name and its operands' bytes; launches found here are charged
  // these, the rest by the rates above.
  llvm::StringMap<llvm::DenseMap<int64_t, double>> kernelTimes;
  std::string kernelTimesSource;
  // adamwParams came from the same trace's "cpu optimizer" adamw slices (the
  // rate inside a running program, with the copies' traffic beside it).
  bool adamwFromTrace = false;
  // The matmul rate for one product of `flops`: interpolated in log(flops)
  // between the measured sizes, clamped at the ends. With `gemmOnly`, of
  // the product alone: the measured cubes' 16-bit copies taken out.
  double matmulRate(double flops, bool gemmOnly = false) const;
  bool hasSsd() const { return ssdReadBytes > 0 && ssdWriteBytes > 0; }
};

// Reads a profile file; returns the error, or "" on success.
std::string loadProfile(const std::string &path, Profile &out);
// Adds to `p` the kernel times of a `--trace` file written by a program of
// p's target: per (kernel, operand bytes), the median slice after the first
// step, from the "compute" track (cpu) or the "gpu" track (cuda). Returns the
// error, or "" on success.
std::string loadKernelTimes(const std::string &tracePath, Profile &p);
// The planner's profile: the file at `profilePath` (the target's built-in
// figures when empty), with the kernel times of `kernelTimesPath` when not
// empty. Returns the error, or "" on success.
std::string loadPlanProfile(const std::string &profilePath, const std::string &target,
                            const std::string &kernelTimesPath, Profile &out);
// Conservative figures for a target when no profile is given (a 2-core VM
// for cpu, an H100 for cuda), so that plans are reproducible without one.
Profile builtinProfile(const std::string &target);

} // namespace fuyou

#endif
