#include "optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace fy {

double LrSchedule::at(double lr, int64_t step) const {
  if (warmup > 0 && step <= warmup) return lr * double(std::max<int64_t>(step, 0)) / double(warmup);
  if (kind == Kind::Constant) return lr;
  // Progress through the decay, 0 right after warmup, 1 at decay_end and on.
  const double span = double(decay_end - warmup);
  const double t = std::min(1.0, double(step - warmup) / span);
  const double shape = kind == Kind::Cosine ? 0.5 * (1.0 + std::cos(M_PI * t)) : 1.0 - t;
  return min_lr + (lr - min_lr) * shape;
}

std::string LrSchedule::invalid(double lr) const {
  if (warmup < 0) return "--warmup-steps must be >= 0";
  if (min_lr < 0) return "--min-lr must be >= 0";
  if (kind == Kind::Constant) return "";
  if (min_lr > lr) return "--min-lr must not exceed --lr";
  if (decay_end <= warmup)
    return "the decay must end after the warmup: --lr-decay-steps (default --steps) must exceed --warmup-steps";
  return "";
}

bool parse_lr_schedule_kind(const std::string& s, LrSchedule::Kind* kind) {
  if (s == "constant") *kind = LrSchedule::Kind::Constant;
  else if (s == "cosine") *kind = LrSchedule::Kind::Cosine;
  else if (s == "linear") *kind = LrSchedule::Kind::Linear;
  else return false;
  return true;
}

}  // namespace fy
