// AsyncOptimizer's state and its updates: AdamW's moments in host memory or
// staged through the SSD store (read, update, write back), the update cut
// into pieces, and the checkpoint's reads and writes of a parameter's state.
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

void AsyncOptimizer::update_in_memory(Group& g, Part part) {
  // The rows part has a slice of its own (finish_rows).
  std::optional<TraceSpan> span;
  if (part != Part::Rows)
    span.emplace(rt_.trace(), "cpu optimizer", "adamw", -1, update_bytes(g, part));
  update_pieces(
      g,
      [&](size_t i) {
        const auto& p = rt_.param(g.params[i]);
        return std::pair<void*, void*>(p.m.data, p.v.data);
      },
      part);
}

void AsyncOptimizer::drain(std::vector<store::Ticket>& tickets) {
  for (store::Ticket t : tickets) store_->wait(t);
  tickets.clear();
}

AsyncOptimizer::Staging* AsyncOptimizer::stage(int64_t group, bool force) {
  if (staging_.empty()) {
    staging_.resize(staging_count_);
    for (Staging& st : staging_) st.buffer = store_->buffer(staging_bytes_);
  }
  for (Staging& st : staging_)
    if (st.group == group) return &st;
  // The least recently used buffer whose group no longer needs it (forced:
  // also one holding a read ahead, which its update will issue again), but
  // never one whose update is not yet written back.
  Staging* pick = nullptr;
  for (Staging& st : staging_)
    if ((st.consumed || force) && !st.dirty && (!pick || st.last_use < pick->last_use)) pick = &st;
  if (!pick) {
    if (force) fail("optimizer: every staging buffer holds an update not yet written back (no state_write?)");
    return nullptr;
  }
  {
    // Its previous group's write-back must land first.
    TraceSpan span(rt_.trace(), "cpu optimizer", "state write wait, group ", pick->group);
    drain(pick->writes);
    drain(pick->reads);
  }
  const Group& g = groups_[size_t(group)];
  char* base = static_cast<char*>(pick->buffer.data());
  for (size_t i = 0; i < g.params.size(); ++i) {
    pick->reads.push_back(store_->read(g.m_regions[i], base + g.m_offsets[i]));
    pick->reads.push_back(store_->read(g.v_regions[i], base + g.v_offsets[i]));
  }
  pick->group = group;
  pick->consumed = false;
  pick->last_use = ++clock_;
  return pick;
}

void AsyncOptimizer::read_out_of_core(int64_t group) {
  TraceSpan span(rt_.trace(), "cpu optimizer", "state read, group ", group);
  stage(group, /*force=*/false);  // runnable() saw a buffer for it
}

void AsyncOptimizer::update_out_of_core(int64_t group, Part part) {
  Group& g = groups_[size_t(group)];
  Staging& cur = *stage(group, /*force=*/true);
  cur.consumed = false;
  {
    // The state arrives; an earlier write-back of the same bytes must land
    // before they change under it.
    TraceSpan span(rt_.trace(), "cpu optimizer", "state read wait, group ", group);
    drain(cur.reads);
    drain(cur.writes);
  }
  std::optional<TraceSpan> span;
  if (part != Part::Rows) span.emplace(rt_.trace(), "cpu optimizer", "adamw, group ", group, update_bytes(g, part));
  char* base = static_cast<char*>(cur.buffer.data());
  update_pieces(
      g, [&](size_t i) { return std::pair<void*, void*>(base + g.m_offsets[i], base + g.v_offsets[i]); }, part);
  cur.dirty = true;
  cur.last_use = ++clock_;
}

void AsyncOptimizer::write_out_of_core(int64_t group) {
  Staging* cur = nullptr;
  for (Staging& st : staging_)
    if (st.group == group) cur = &st;
  if (!cur || !cur->dirty) return;  // written back already (a later update's write)
  const Group& g = groups_[size_t(group)];
  char* base = static_cast<char*>(cur->buffer.data());
  for (size_t i = 0; i < g.params.size(); ++i) {
    cur->writes.push_back(store_->write(g.m_regions[i], base + g.m_offsets[i]));
    cur->writes.push_back(store_->write(g.v_regions[i], base + g.v_offsets[i]));
  }
  // The staged copy stays valid: a later step may find it here without a read.
  cur->dirty = false;
  cur->consumed = true;
  cur->last_use = ++clock_;
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
  const auto& p = rt_.param(param);
  if (!store_) {
    if (m) std::memcpy(m, p.m.data, size_t(p.m.nbytes()));
    if (v) std::memcpy(v, p.v.data, size_t(p.v.nbytes()));
    return;
  }
  wait_all();
  for (Staging& st : staging_) drain(st.writes);
  size_t bytes = size_t(rt_.state_bytes(param));
  store::AlignedBuffer tmp(bytes);  // O_DIRECT wants aligned memory; once, so not registered
  if (m) {
    store_->read_sync(store_->find("adam_m/" + p.name), tmp.data());
    std::memcpy(m, tmp.data(), bytes);
  }
  if (v) {
    store_->read_sync(store_->find("adam_v/" + p.name), tmp.data());
    std::memcpy(v, tmp.data(), bytes);
  }
}

void AsyncOptimizer::write_state(int64_t param, const void* m, const void* v) {
  const auto& p = rt_.param(param);
  if (!store_) {
    if (m) std::memcpy(p.m.data, m, size_t(p.m.nbytes()));
    if (v) std::memcpy(p.v.data, v, size_t(p.v.nbytes()));
    return;
  }
  wait_all();
  for (Staging& st : staging_) {
    drain(st.writes);
    drain(st.reads);
    st.group = -1;  // staged copies are stale now
    st.consumed = true;
  }
  size_t bytes = size_t(rt_.state_bytes(param));
  store::AlignedBuffer tmp(bytes);
  if (m) {
    std::memcpy(tmp.data(), m, bytes);
    store_->write_sync(store_->find("adam_m/" + p.name), tmp.data());
  }
  if (v) {
    std::memcpy(tmp.data(), v, bytes);
    store_->write_sync(store_->find("adam_v/" + p.name), tmp.data());
  }
}

}  // namespace fy
