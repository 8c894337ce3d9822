// The cost model the placement planner minimises: a machine profile (what
// `fuyou-compile --calibrate` measured) and a prediction of one steady-state
// training step of a planned fysched module, replayed op by op on the
// streams the runtime runs them on.
#ifndef FUYOU_PASSES_ANALYSIS_COSTMODEL_H
#define FUYOU_PASSES_ANALYSIS_COSTMODEL_H

#include "mlir/IR/BuiltinOps.h"
#include "llvm/Support/raw_ostream.h"

#include "passes/Analysis/Profile.h"

#include "llvm/ADT/StringMap.h"

#include <array>
#include <vector>
#include <string>

namespace fuyou {

enum Stream { Compute, ToDevice, ToHost, Ssd, Optimizer, NumStreams };
const char *streamName(Stream s);

struct Prediction {
  double stepS = 0;                          // one steady-state step, wall
  std::array<double, NumStreams> busyS{};    // per stream, in that step
  double forwardS = 0, backwardS = 0;        // compute stream, by phase
  llvm::StringMap<double> kernelS;           // compute stream, by kernel name
  int64_t launches = 0, launchesTimed = 0;   // per step; timed: from the kernel times
  int64_t deviceBytes = 0, hostBytes = 0;    // resident params + arena + runtime scratch; host arena + staging
  // Where the program waits for the optimizer, in program order: a group's
  // update (group_wait), its table's rows (group_wait_rows), or its previous
  // update before its gradient goes down (grad_offload).
  struct Wait {
    std::string what;
    double s;
  };
  std::vector<Wait> updateWaits;
  // Where the GPU waits for a gradient copy before reusing its memory.
  double copyWaitS = 0;
  // The step's work, stream by stream, from its start (predictStep's
  // timeline): a kernel, copy, update or I/O each.
  struct Slice {
    Stream stream;
    std::string name;
    double start, end;
    int64_t bytes;  // -1: none
  };
  std::vector<Slice> timeline;
};

// Predicts a module after fy-plan-memory. `stateOnSsd`: AdamW's moments move
// through the SSD every step (the program run with --ssd).
// With `timeline`, its slices too.
Prediction predictStep(mlir::ModuleOp module, const Profile &profile, bool stateOnSsd, bool timeline = false);

// Writes a prediction's timeline as Chrome trace JSON (Perfetto opens it
// beside a program's --trace): a track per stream, and the step's length.
void writeTimeline(const Prediction &p, llvm::raw_ostream &os);

// Prints a planned module's decisions (fy-choose-placement's attributes when
// it ran, each segment's policy and the bytes it moves out), its memory
// against the budgets (0: none) and the predicted step, stream by stream.
// The same module and profile always print the same text.
void printPlan(mlir::ModuleOp module, const Profile &profile, bool stateOnSsd, int64_t gpuMem, int64_t cpuMem,
               llvm::raw_ostream &os);

} // namespace fuyou

#endif
