// Dynamic loss scaling for fp16 matrix products, with the semantics of
// torch.cuda.amp.GradScaler: the backward pass starts from the loss's
// gradient times scale(); a step whose gradients hold an inf or NaN is
// skipped (no parameter or moment changes, AdamW's step count does not
// advance) and the scale is multiplied by the backoff factor; after
// growth_interval finite steps in a row it is multiplied by the growth
// factor. The scale is fp32, as torch keeps it.
#pragma once

#include <cstdint>

namespace fy {

struct LossScaleConfig {
  float init = 65536.f;  // 2^16, torch's default
  float growth = 2.f;
  float backoff = 0.5f;
  int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScaleConfig& c = {}) : cfg_(c), scale_(c.init) {}

  float scale() const { return scale_; }
  // fp32 reciprocal of the scale, computed in double as torch does.
  float inv_scale() const { return float(1.0 / double(scale_)); }
  // Records a step's verdict; returns whether its update applies.
  bool update(bool grads_finite);
  int64_t skipped() const { return skipped_; }     // steps skipped so far
  int64_t growth_tracker() const { return good_; }  // finite steps since the scale last changed

  // Checkpoints: the whole state.
  void restore(float scale, int64_t growth_tracker, int64_t skipped) {
    scale_ = scale;
    good_ = growth_tracker;
    skipped_ = skipped;
  }

 private:
  LossScaleConfig cfg_;
  float scale_;
  int64_t good_ = 0;
  int64_t skipped_ = 0;
};

}  // namespace fy
