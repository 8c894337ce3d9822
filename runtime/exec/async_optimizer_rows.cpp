// AsyncOptimizer's table rows policy: the rows of the token embedding the
// next batch reads updated before the rest (rows first), and a tied table's
// rows the step's batch does not read handed over early while backward goes
// on (early rows and their pieces).
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

bool AsyncOptimizer::offload_early(int64_t group, int64_t param, const View& grad_view, const int64_t* ids,
                                   int64_t n) {
  Group& g = table_group(group, param, "grad_offload_early");
  const auto at = std::find(g.params.begin(), g.params.end(), param);
  const Runtime::Param& p = rt_.param(param);
  if (grad_view.dtype != DType::F32 || grad_view.shape != p.value.shape || p.value.shape.rank != 2)
    fail("grad_offload_early: gradient of '" + p.name + "' is " + dtype_name(grad_view.dtype) + " " +
         grad_view.shape.str() + ", parameter is F32 " + p.value.shape.str() + " (a 2-D table)");
  // The named rows' gradient must come down on its own at grad_offload: on
  // a device, through the rows' copy.
  if (!g.early_declared || moments_->staged() || holds() || accum_ > 1 || p.q8_block || rt_.recording_grads() ||
      g.rows_param != param || !g.rows || !g.early_rows || n > g.rows_capacity ||
      (copy_out_ && !copies_row_grads(g)) || (on_rows_updated_ && !g.early_values) ||
      (copy_chunk_out_ && !g.early_grads))
    return false;
  wait_group(group, /*slot=*/true);
  if (slots_.empty()) make_slots();
  // It holds its slot through backward: the other groups need another. And
  // one table's chunks go down at a time.
  if ((slots_.size() < 2 && groups_.size() > 1) || (copy_chunk_out_ && early_sending_ >= 0)) return false;
  const int64_t table_rows = p.value.shape[0];
  g.row_mask.assign(size_t(table_rows), 0);
  for (int64_t k = 0; k < n; ++k) {
    if (ids[k] < 0 || ids[k] >= table_rows)
      fail("grad_offload_early: token id " + std::to_string(ids[k]) + " is out of range for '" + p.name + "' of " +
           std::to_string(table_rows) + " rows");
    g.row_mask[size_t(ids[k])] = 1;
  }
  // The next batch's rows go first (none after the last step): those among
  // the early ones, and at the group's update those among the step's.
  g.early_mask.assign(size_t(table_rows), 0);
  g.next_mask.assign(size_t(table_rows), 0);
  if (next_ids_ && next_ids_(rt_.step(), next_ids_buf_))
    for (int64_t id : next_ids_buf_)
      if (id >= 0 && id < table_rows) {
        g.next_mask[size_t(id)] = 1;
        if (!g.row_mask[size_t(id)]) g.early_mask[size_t(id)] = 1;
      }
  take_slot(g);
  g.row_count = g.early_count = 0;
  for (int64_t r = 0; r < table_rows; ++r) {
    if (g.row_mask[size_t(r)] && g.next_mask[size_t(r)]) g.rows[g.row_count++] = r;
    // (No more than wait_rows made room for; past that a row is left to the pieces.)
    if (g.early_mask[size_t(r)] && g.early_count < g.rows_capacity) g.early_rows[g.early_count++] = r;
    else g.early_mask[size_t(r)] = 0;
  }
  g.rows_next = g.row_count;
  for (int64_t r = 0; r < table_rows; ++r)
    if (g.row_mask[size_t(r)] && !g.next_mask[size_t(r)]) g.rows[g.row_count++] = r;
  g.rows_index = int(at - g.params.begin());
  const int64_t pieces = (p.value.numel() + kPiece - 1) / kPiece;
  g.early_chunks.assign(size_t(pieces), Landing{});
  g.early_sent = 0;
  if (copy_chunk_out_) {
    // The next batch's rows among them first, then the part in chunks
    // (send_early_chunks), so that it does not hold up the blocks' gradients
    // (or all at once: the program's choice).
    g.early_src = grad_view;
    g.early_landed = copy_rows_out_(group, grad_view, g.early_rows, g.early_count, g.early_grads);
    send_early_chunks(g, g.early_all_chunks ? pieces : 1);
    early_sending_ = group;
  } else {
    if (copy_out_)
      copy_out_(grad_view, grad(g, size_t(g.rows_index)));
    else
      std::memcpy(grad(g, size_t(g.rows_index)), grad_view.data, grad_view.nbytes());
    if (copy_fence_) g.early_landed = copy_fence_(group);
    g.early_sent = pieces;  // all in with the part (no item of the group is queued to read it)
  }
  std::lock_guard<std::mutex> lock(mu_);
  // As update() would set them: the step's AdamW, and nothing of the group
  // to be read until its update is done.
  g.step = rt_.step();
  g.iteration = rt_.step();
  g.early = g.pending = g.updating = g.early_taken = true;
  g.early_first_done = g.early_done = false;
  g.early_released = !g.early_held;
  g.early_piece = 0;
  g.final_seq = 0;
  std::fill(g.updated.begin(), g.updated.end(), 0);
  g.rows_ready = false;
  g.rows_done = false;
  ++early_updates_;
  queue_.push_back(Item{Op::Early, group, 0});
  work_cv_.notify_one();
  return true;
}

void AsyncOptimizer::send_early_chunks(Group& g, int64_t n) {
  const int64_t group = int64_t(&g - groups_.data());
  const int64_t numel = g.early_src.numel(), pieces = int64_t(g.early_chunks.size());
  float* slot = grad(g, size_t(g.rows_index));
  for (int64_t k = g.early_sent; k < pieces && n > 0; ++k, --n) {
    const int64_t lo = k * kPiece, len = std::min(kPiece, numel - lo);
    Landing l = copy_chunk_out_(group, g.early_src, lo, len, slot + lo);
    std::lock_guard<std::mutex> lock(mu_);
    g.early_chunks[size_t(k)] = std::move(l);
    g.early_sent = k + 1;
    work_cv_.notify_one();
  }
}

AsyncOptimizer::Group& AsyncOptimizer::table_group(int64_t group, int64_t param, const char* op) {
  if (group < 0 || group >= num_groups()) fail(std::string(op) + ": no group " + std::to_string(group));
  Group& g = groups_[size_t(group)];
  if (std::find(g.params.begin(), g.params.end(), param) == g.params.end())
    fail(std::string(op) + ": parameter " + std::to_string(param) + " is not in group " + std::to_string(group));
  return g;
}

void AsyncOptimizer::declare_early(int64_t group, int64_t param, bool all_chunks, bool held) {
  Group& g = table_group(group, param, "grad_offload_early");
  // offload_early declines a table that is not the group's read rows first.
  std::lock_guard<std::mutex> lock(mu_);
  g.early_declared = true;
  g.early_all_chunks = all_chunks;
  g.early_held = held;
}

void AsyncOptimizer::release_early(int64_t group, int64_t param) {
  Group& g = table_group(group, param, "early_release");
  std::lock_guard<std::mutex> lock(mu_);
  g.early_released = true;
  work_cv_.notify_one();
}

void AsyncOptimizer::declare_rows(int64_t group, int64_t param, int64_t ids) {
  if (group < 0 || group >= num_groups()) fail("group_wait_rows: no group " + std::to_string(group));
  Group& g = groups_[size_t(group)];
  if (g.rows_param >= 0 && g.rows_param != param)
    fail("group_wait_rows: group " + std::to_string(group) + " already reads parameter " +
         std::to_string(g.rows_param) + " rows first, not " + std::to_string(param));
  if (std::find(g.params.begin(), g.params.end(), param) == g.params.end())
    fail("group_wait_rows: parameter " + std::to_string(param) + " is not in group " + std::to_string(group));
  const View& table = rt_.param(param).value;
  if (table.shape.rank != 2) fail("group_wait_rows: parameter '" + rt_.param(param).name + "' is not a 2-D table");
  if (g.rows_made) return;  // its buffers are sized
  std::lock_guard<std::mutex> lock(mu_);
  g.rows_capacity = std::max(g.rows_capacity, std::min(ids, table.shape[0]));
  g.rows_param = param;
}

bool AsyncOptimizer::copies_row_grads(const Group& g) const {
  // Not when the update waits for every gradient anyway (clipping, the loss
  // scale's check) or needs the accumulator added to the rows too.
  return copy_rows_out_ && !holds() && accum_ == 1 && 2 * g.rows_capacity <= rt_.param(g.rows_param).value.shape[0];
}

bool AsyncOptimizer::wait_rows(int64_t group, int64_t param, const int64_t* ids, int64_t n) {
  if (group < 0 || group >= num_groups() || groups_[size_t(group)].rows_param != param)
    declare_rows(group, param, n);
  Group& g = groups_[size_t(group)];
  if (!g.rows_made) {
    // The first call makes the buffers (a device has set its callbacks by
    // now); later updates go rows first.
    wait(group);  // nothing of it may be running while it changes
    const int64_t cap = g.rows_capacity, d = rt_.param(param).value.shape[1];
    if (next_ids_) {  // else no next batch is known (the optimizer alone, in tests): no buffers
      g.rows = rt_.alloc_pinned(Shape{cap}, DType::I64).as<int64_t>();
      if (on_rows_updated_) g.row_values = rt_.alloc_pinned(Shape{cap * d}, DType::F32).as<float>();
      if (copies_row_grads(g)) g.row_grads = rt_.alloc_pinned(Shape{cap * d}, DType::F32).as<float>();
      if (g.early_declared) {  // the next batch's rows among the early ones
        g.early_rows = rt_.alloc_pinned(Shape{cap}, DType::I64).as<int64_t>();
        if (on_rows_updated_) g.early_values = rt_.alloc_pinned(Shape{cap * d}, DType::F32).as<float>();
        if (copy_chunk_out_ && copy_rows_out_) g.early_grads = rt_.alloc_pinned(Shape{cap * d}, DType::F32).as<float>();
      }
    }
    std::lock_guard<std::mutex> lock(mu_);
    g.rows_made = true;
    return false;
  }
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  // After an early part the rows are the step's and the next batch's others.
  done_cv_.wait(lock, [&] { return !g.updating || (g.rows_ready && (!g.early || g.early_first_done)) || error_; });
  bool rows = false;
  if (!error_ && g.updating) {
    // The first part holds the rows next_ids named; this batch must be among them.
    rows = true;
    for (int64_t i = 0; i < n && rows; ++i)
      rows = ids[i] >= 0 && ids[i] < int64_t(g.row_mask.size()) &&
             (g.early ? g.next_mask[size_t(ids[i])] && (g.row_mask[size_t(ids[i])] || g.early_mask[size_t(ids[i])])
                      : g.row_mask[size_t(ids[i])]);
    if (!rows) {
      // Not the batch next_ids named: the whole update then (the same bits, later).
      TraceSpan span(rt_.trace(), "compute", "wait for the whole update, rows first missed, group ", group);
      done_cv_.wait(lock, [&] { return !g.updating || error_; });
    }
  }
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
  return rows;
}

namespace {
// Stretches [lo, lo + len) of one array, taken one after another: a pool
// job over their total runs AdamW on each stretch its chunk covers.
struct Runs {
  std::vector<int64_t> lo, len, at;  // at: where each starts in the total
  int64_t total = 0;
  void add(int64_t l, int64_t n) {
    if (n <= 0) return;
    if (!lo.empty() && lo.back() + len.back() == l) {
      len.back() += n;
    } else {
      lo.push_back(l);
      len.push_back(n);
      at.push_back(total);
    }
    total += n;
  }
  // body(lo, n, out): stretch [lo, lo + n) of the array, at out in the total,
  // for the part of the total [first, first + count).
  template <class F>
  void visit(int64_t first, int64_t count, F&& body) const {
    size_t k = size_t(std::upper_bound(at.begin(), at.end(), first) - at.begin()) - 1;
    for (int64_t end = first + count; first < end; ++k) {
      const int64_t skip = first - at[k], n = std::min(len[k] - skip, end - first);
      body(lo[k] + skip, n, first);
      first += n;
    }
  }
};

// AdamW over runs of one array. The gradient is the array's (g + lo), or,
// packed, the runs' one after another (g + at); out, when set, takes the
// new values packed.
AdamWPool::Handle submit_runs(AdamWPool& pool, std::shared_ptr<const Runs> runs, float* w, const float* g,
                              bool g_packed, float* m, float* v, const AdamWConfig& cfg, int64_t step, float* out) {
  if (runs->total == 0) return {};
  const AdamWIsa isa = pool.isa();
  return pool.for_chunks(runs->total, [=](int64_t first, int64_t count) {
    runs->visit(first, count, [&](int64_t lo, int64_t n, int64_t at) {
      adamw_step_isa(isa, w + lo, g + (g_packed ? at : lo), m + lo, v + lo, n, cfg, step);
      if (out) std::memcpy(out + at, w + lo, size_t(n) * sizeof(float));
    });
  });
}
}  // namespace

void AsyncOptimizer::plan_rows(Group& g, int64_t step) {
  g.rows_index = -1;
  // Declared tables have no buffers before their first wait_rows (a device
  // may never call it): the whole update then.
  // A micro-batch's accumulation changes no parameter: nothing to do first.
  if (g.rows_param < 0 || !g.rows || !next_ids_ || accumulating()) return;
  const Runtime::Param& p = rt_.param(g.rows_param);
  // A device that takes the rows needs their values compact (wait_rows made
  // the room only if it was there then).
  if (p.q8_block || p.value.shape[0] == 0 || (on_rows_updated_ && !g.row_values)) return;
  if (!next_ids_(step, next_ids_buf_)) return;
  const int64_t table_rows = p.value.shape[0];
  g.row_mask.assign(size_t(table_rows), 0);
  for (int64_t id : next_ids_buf_) {
    if (id < 0 || id >= table_rows) return;  // the gather reports it
    g.row_mask[size_t(id)] = 1;
  }
  g.row_count = 0;
  for (int64_t r = 0; r < table_rows; ++r)
    if (g.row_mask[size_t(r)]) {
      if (g.row_count == g.rows_capacity) return;  // more ids than wait_rows was given
      g.rows[g.row_count++] = r;
    }
  g.rows_next = g.row_count;
  for (size_t i = 0; i < g.params.size(); ++i)
    if (g.params[i] == g.rows_param) g.rows_index = int(i);
}

AdamWPool::Handle AsyncOptimizer::submit_rows(Group& g, int64_t from, int64_t to, void* m, void* v,
                                               const AdamWConfig& cfg) {
  const size_t i = size_t(g.rows_index);
  const Runtime::Param& p = rt_.param(g.params[i]);
  const int64_t d = p.value.numel() / p.value.shape[0];
  // The pool's jobs cannot report a bad argument: check it here, as submit does.
  if (g.step < 1) fail("group_adamw: step must be >= 1, got " + std::to_string(g.step));
  auto rows = std::make_shared<Runs>();
  for (int64_t k = from; k < to; ++k) rows->add(g.rows[k] * d, d);
  // Packed gradients and values: these rows' start among all of them.
  return submit_runs(*pool_, rows, p.value.as<float>(), g.rows_from_copy ? g.row_grads + from * d : grad(g, i),
                     g.rows_from_copy, static_cast<float*>(m), static_cast<float*>(v), rt_.param_config(cfg, g.params[i]),
                     g.step, on_rows_updated_ ? g.row_values + from * d : nullptr);
}

void AsyncOptimizer::finish_rows(Group& g, AdamWPool::Handle rows_job, AdamWPool::Handle others_job) {
  const int64_t group = int64_t(&g - groups_.data());
  const View& table = rt_.param(g.rows_param).value;
  const int64_t d = table.numel() / table.shape[0];
  {
    TraceSpan span(rt_.trace(), "cpu optimizer", "adamw rows first, group ", group, g.rows_next * d * 16);
    pool_->wait(rows_job);
  }
  if (on_rows_updated_ && g.rows_next) on_rows_updated_(group, g.rows_param, g.rows, g.rows_next, g.row_values);
  {
    std::lock_guard<std::mutex> lock(mu_);
    g.rows_ready = true;
    done_cv_.notify_all();
  }
  // After an early part, the step's rows the next batch does not name: the
  // table is whole (the caller goes on) once they are done and up too.
  if (g.rows_next == g.row_count) return;
  {
    TraceSpan span(rt_.trace(), "cpu optimizer", "adamw the batch's other rows, group ", group,
                   (g.row_count - g.rows_next) * d * 16);
    pool_->wait(others_job);
  }
  if (on_rows_updated_)
    on_rows_updated_(group, g.rows_param, g.rows + g.rows_next, g.row_count - g.rows_next,
                     g.row_values + g.rows_next * d);
}

AdamWPool::Handle AsyncOptimizer::submit_rest_piece(Group& g, int64_t lo, int64_t len, bool early, void* m, void* v,
                                                    const AdamWConfig& cfg) {
  const size_t i = size_t(g.rows_index);
  const Runtime::Param& p = rt_.param(g.params[i]);
  const int64_t d = p.value.numel() / p.value.shape[0];
  auto rest = std::make_shared<Runs>();
  for (int64_t r = lo / d; r * d < lo + len; ++r) {
    if (g.row_mask[size_t(r)] || (early && g.early_mask[size_t(r)])) continue;
    const int64_t a = std::max(lo, r * d), b = std::min(lo + len, (r + 1) * d);
    rest->add(a, b - a);
  }
  return submit_runs(*pool_, rest, p.value.as<float>(), grad(g, i), false, static_cast<float*>(m),
                     static_cast<float*>(v), rt_.param_config(cfg, g.params[i]), g.step, nullptr);
}

void AsyncOptimizer::submit_rest(Group& g, void* m, void* v, const AdamWConfig& cfg, std::vector<Piece>& pieces) {
  const int64_t param = g.params[size_t(g.rows_index)], n = rt_.param(param).value.numel();
  // The usual pieces, each reported (and uploaded) whole: its rows of the
  // first part go up again, the same bytes.
  for (int64_t lo = 0; lo < n; lo += kPiece) {
    const int64_t len = std::min(kPiece, n - lo);
    pieces.push_back({submit_rest_piece(g, lo, len, false, m, v, cfg), param, lo, len});
  }
}

bool AsyncOptimizer::run_early(Group& g) {
  const int64_t group = int64_t(&g - groups_.data());
  const size_t i = size_t(g.rows_index);
  const int64_t param = g.params[i];
  const Runtime::Param& p = rt_.param(param);
  const int64_t n = p.value.numel(), d = n / p.value.shape[0];
  const AdamWConfig cfg = adamw_config(g);
  if (!g.early_first_done) {
    // The next batch's rows among the early ones, reported as the rows first
    // are; in chunks, from their own gradient copy.
    await(g.early_landed, "early rows' gradients landed wait, group ", group);
    auto rows = std::make_shared<Runs>();
    for (int64_t k = 0; k < g.early_count; ++k) rows->add(g.early_rows[k] * d, d);
    const bool packed = g.early_grads && copy_chunk_out_;
    {
      TraceSpan span(rt_.trace(), "cpu optimizer", "adamw early rows first, group ", group, g.early_count * d * 16);
      pool_->wait(submit_runs(*pool_, rows, p.value.as<float>(), packed ? g.early_grads : grad(g, i), packed,
                              p.m.as<float>(), p.v.as<float>(), rt_.param_config(cfg, param), g.step,
                              on_rows_updated_ ? g.early_values : nullptr));
    }
    if (on_rows_updated_ && g.early_count) on_rows_updated_(group, param, g.early_rows, g.early_count, g.early_values);
    std::lock_guard<std::mutex> lock(mu_);
    g.early_first_done = true;
    done_cv_.notify_all();
    return true;
  }
  const int64_t lo = g.early_piece * kPiece, len = std::min(kPiece, n - lo);
  await(g.early_chunks[size_t(g.early_piece)], "early chunk landed wait, group ", group);
  {
    TraceSpan span(rt_.trace(), "cpu optimizer", "adamw early rows, group ", group, len * 16);
    pool_->wait(submit_rest_piece(g, lo, len, true, p.m.data, p.v.data, cfg));
  }
  if (on_piece_updated_) on_piece_updated_(param, lo, len);
  return ++g.early_piece < int64_t(g.early_chunks.size());
}

void AsyncOptimizer::update_pieces(Group& g, const std::function<std::pair<void*, void*>(size_t)>& state,
                                   Part part) {
  std::vector<Piece> pieces;
  AdamWPool::Handle rows_job, others_job;
  try {
    // The rows first go to the pool first: its workers take jobs in order.
    const AdamWConfig cfg = adamw_config(g);
    const int first = g.rows_index;
    if (first >= 0 && part != Part::Rest) {
      auto [m, v] = state(size_t(first));
      rows_job = submit_rows(g, 0, g.rows_next, m, v, cfg);
      if (g.rows_next < g.row_count) others_job = submit_rows(g, g.rows_next, g.row_count, m, v, cfg);
    }
    if (part == Part::Rows) {
      finish_rows(g, rows_job, others_job);
      return;
    }
    // The table's rest goes early, piece by piece (run_early).
    if (first >= 0 && !g.early) {
      auto [m, v] = state(size_t(first));
      submit_rest(g, m, v, cfg, pieces);
    }
    for (size_t i = 0; i < g.params.size(); ++i) {
      if (int(i) == first) continue;
      auto [m, v] = state(i);
      submit(g.params[i], grad(g, i), m, v, cfg, g.step, pieces);
    }
    if (first >= 0 && part == Part::All) finish_rows(g, rows_job, others_job);
    // A parameter's last piece done (and sent up): wait_param may let it go.
    for (size_t k = 0; k < pieces.size(); ++k) {
      const Piece& piece = pieces[k];
      pool_->wait(piece.job);
      if (on_piece_updated_) on_piece_updated_(piece.param, piece.lo, piece.n);
      if (k + 1 == pieces.size() || pieces[k + 1].param != piece.param)
        param_updated(g, size_t(std::find(g.params.begin(), g.params.end(), piece.param) - g.params.begin()));
    }
  } catch (...) {
    // The pool must be done with the slot's gradients before it is freed.
    pool_->wait(rows_job);
    pool_->wait(others_job);
    for (const Piece& piece : pieces) pool_->wait(piece.job);
    throw;
  }
}

}  // namespace fy
