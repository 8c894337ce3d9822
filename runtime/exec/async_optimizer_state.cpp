// AsyncOptimizer's updates: a group's update over its moments wherever they
// live (exec/moment_store.h), cut into pieces, and the checkpoint's reads and
// writes of a parameter's state.
#include "exec/async_optimizer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>

#include "exec/runtime.h"
#include "optim/adamw.h"

namespace fy {

using Clock = std::chrono::steady_clock;

int64_t AsyncOptimizer::update_bytes(const Group& g, Part part) const {
  const int64_t rows = g.rows_param >= 0 ? g.row_count * rt_.param(g.rows_param).value.shape[1] : 0;
  int64_t elems = g.grad_elems;
  if (part == Part::Rest) elems -= rows;
  if (g.early) elems -= rt_.param(g.rows_param).value.numel() - rows;  // its rest goes early
  return elems * 16;
}

void AsyncOptimizer::update_moments(int64_t group, Part part) {
  Group& g = groups_[size_t(group)];
  const MomentStore::Where where = moments_->begin_update(group);
  {
    // The rows part has a slice of its own (finish_rows).
    std::optional<TraceSpan> span;
    if (part != Part::Rows) {
      if (moments_->staged())
        span.emplace(rt_.trace(), "cpu optimizer", "adamw, group ", group, update_bytes(g, part));
      else
        span.emplace(rt_.trace(), "cpu optimizer", "adamw", -1, update_bytes(g, part));
    }
    update_pieces(g, where, part);
  }
  moments_->end_update(group);
}

AdamWConfig AsyncOptimizer::adamw_config(const Group& g) const {
  // As torch: unscale, then the clipping coefficient, inside the update's pass.
  // The rate follows the training step, as a scheduler stepped every
  // iteration does, skipped steps included.
  AdamWConfig cfg = rt_.adamw_config(g.iteration);
  cfg.grad_unscale = g.unscale;
  cfg.grad_coef = g.scale;
  return cfg;
}

void AsyncOptimizer::submit(int64_t param, const float* g, void* m, void* v, const AdamWConfig& group_cfg,
                            int64_t step, std::vector<Piece>& pieces) {
  const Runtime::Param& p = rt_.param(param);
  const AdamWConfig cfg = rt_.param_config(group_cfg, param);
  const int64_t n = p.value.numel();
  if (p.q8_block) {
    pieces.push_back({pool_->submit_8bit(p.value.as<float>(), g, m, v, n, p.q8_block, cfg, step), param, 0, n});
    return;
  }
  // Elementwise, so the pieces give the whole update's bits.
  float* w = p.value.as<float>();
  float *mf = static_cast<float*>(m), *vf = static_cast<float*>(v);
  for (int64_t lo = 0; lo < n; lo += kPiece) {
    const int64_t len = std::min(kPiece, n - lo);
    pieces.push_back({pool_->submit(w + lo, g + lo, mf + lo, vf + lo, len, cfg, step), param, lo, len});
  }
}

void AsyncOptimizer::read_state(int64_t param, void* m, void* v) {
  if (moments_->staged()) wait_all();  // no update or write-back of it in flight
  moments_->read(param, m, v);
}

void AsyncOptimizer::write_state(int64_t param, const void* m, const void* v) {
  if (moments_->staged()) wait_all();
  moments_->write(param, m, v);
}

}  // namespace fy
