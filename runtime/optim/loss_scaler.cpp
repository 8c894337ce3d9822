#include "optim/loss_scaler.h"

#include <cmath>

namespace fy {

bool LossScaler::update(bool grads_finite) {
  if (!grads_finite) {
    scale_ *= cfg_.backoff;
    good_ = 0;
    ++skipped_;
    return false;
  }
  if (++good_ == cfg_.growth_interval) {
    // torch grows only while the grown scale is still finite.
    float grown = scale_ * cfg_.growth;
    if (std::isfinite(grown)) scale_ = grown;
    good_ = 0;
  }
  return true;
}

}  // namespace fy
