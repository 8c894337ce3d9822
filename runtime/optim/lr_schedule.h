// The learning rate as a function of the training step: an optional linear
// warmup, then constant, cosine or linear decay to a floor. A pure function
// of the step and the flags, so a resumed run continues the same curve and
// a held or out-of-order group update gets its own step's rate.
#pragma once

#include <cstdint>
#include <string>

namespace fy {

struct LrSchedule {
  enum class Kind { Constant, Cosine, Linear };
  Kind kind = Kind::Constant;
  int64_t warmup = 0;      // steps 1..warmup ramp linearly: lr * s / warmup
  int64_t decay_end = 0;   // cosine/linear: the step that reaches min_lr
  double min_lr = 0;

  // The rate of training step `step` (from 1) for a peak rate `lr`.
  double at(double lr, int64_t step) const;
  // Why this schedule cannot run with peak `lr`, or "" (flags are named).
  std::string invalid(double lr) const;
};

// "constant", "cosine", "linear"; false for anything else.
bool parse_lr_schedule_kind(const std::string& s, LrSchedule::Kind* kind);

}  // namespace fy
