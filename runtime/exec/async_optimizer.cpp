#include "exec/async_optimizer.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "exec/runtime.h"
#include "optim/adamw.h"

namespace fy {

using Clock = std::chrono::steady_clock;

namespace {
size_t page_round(size_t n) { return (n + store::kPageBytes - 1) / store::kPageBytes * store::kPageBytes; }
}  // namespace

AsyncOptimizer::AsyncOptimizer(Runtime& rt) : rt_(rt) {
  const TrainOptions& o = rt.options();
  pool_ = std::make_unique<AdamWPool>(int(o.optimizer_threads));
  param_waits_ = o.param_waits;
  early_on_ = o.early_rows;
  if (!o.ssd_dirs.empty()) {
    // A fresh run; --resume writes the checkpoint's moments in.
    store_ = std::make_unique<store::TensorStore>(rt.store_options("fuyou.store", true));
  }
  thread_ = std::thread([this] { worker(); });
}

AsyncOptimizer::~AsyncOptimizer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
  // Writes in flight still read the staging buffers, which go first.
  if (store_) {
    try {
      store_->wait_all();
    } catch (...) {
      // Dropped on purpose: a destructor cannot report; a run that cares
      // waited (and checkpointed) before.
    }
  }
}

int64_t AsyncOptimizer::declare_group(std::vector<int64_t> params) {
  if (params.empty()) fail("declare_group: a group needs at least one parameter");
  Group g;
  for (int64_t p : params) {
    const auto& param = rt_.param(p);
    if (!param.trainable) fail("declare_group: parameter '" + param.name + "' is not trainable");
    g.grad_offsets.push_back(g.grad_elems);
    g.grad_elems += size_t(param.value.numel());
  }
  if (g.grad_elems > slot_elems_) slot_elems_ = g.grad_elems;
  g.sq_norms.assign(params.size(), 0.0);
  g.updated.assign(params.size(), 0);
  rt_.settle_state();  // every parameter and the vocabulary are declared by now
  if (store_) {
    // Regions never written read as zeros: AdamW's initial moments (in either format).
    for (int64_t p : params) {
      const auto& param = rt_.param(p);
      size_t bytes = size_t(rt_.state_bytes(p));
      g.m_regions.push_back(store_->allocate("adam_m/" + param.name, bytes));
      g.v_regions.push_back(store_->allocate("adam_v/" + param.name, bytes));
      g.m_offsets.push_back(g.staging_bytes);
      g.staging_bytes += page_round(bytes);
      g.v_offsets.push_back(g.staging_bytes);
      g.staging_bytes += page_round(bytes);
    }
    if (g.staging_bytes > staging_bytes_) staging_bytes_ = g.staging_bytes;
  }
  g.params = std::move(params);
  std::lock_guard<std::mutex> lock(mu_);
  groups_.push_back(std::move(g));
  return int64_t(groups_.size()) - 1;
}

size_t AsyncOptimizer::rows_host_bytes() const {
  size_t n = 0;  // the rows, the mask and, for a device, their values and gradients
  for (const Group& g : groups_)
    if (g.rows_param >= 0 && next_ids_) {
      const Shape& t = rt_.param(g.rows_param).value.shape;
      const size_t row_bytes = size_t(g.rows_capacity * t[1]) * 4;
      n += size_t(g.rows_capacity) * 8 + size_t(t[0]) + (on_rows_updated_ ? row_bytes : 0) +
           (copies_row_grads(g) ? row_bytes : 0);
      // A table handed over early: the next batch's rows among its early ones, and their mask.
      if (g.early_declared && early_on_)
        n += size_t(g.rows_capacity) * 8 + size_t(t[0]) + (on_rows_updated_ ? row_bytes : 0) +
             (copy_chunk_out_ && copy_rows_out_ ? row_bytes : 0);
    }
  return n;
}

size_t AsyncOptimizer::accum_host_bytes() const {
  size_t n = 0;
  if (accum_ > 1)
    for (const Group& g : groups_) n += g.grad_elems * sizeof(float);
  return n;
}

size_t AsyncOptimizer::fixed_host_bytes() const {
  if (store_) return staging_count_ * staging_bytes_ + rows_host_bytes() + accum_host_bytes();
  size_t n = rows_host_bytes() + accum_host_bytes();  // and AdamW's moments in memory
  for (const Group& g : groups_)
    for (int64_t p : g.params) n += 2 * size_t(rt_.state_bytes(p));
  return n;
}

void AsyncOptimizer::make_slots() {
  size_t n = wanted_slots_ ? wanted_slots_ : groups_.size();
  if (n < min_slots()) n = min_slots();
  // From the Runtime's long-lived host storage: page-locked when a device
  // set it so, so gradients can be copied straight into the slot.
  for (size_t i = 0; i < n; ++i)
    slots_.push_back(rt_.alloc_pinned(Shape{int64_t(slot_elems_)}, DType::F32).as<float>());
  for (size_t i = 0; i < n; ++i) free_slots_.push_back(int(i));
  if (accum_ > 1)
    for (Group& g : groups_) g.acc = rt_.alloc_pinned(Shape{int64_t(g.grad_elems)}, DType::F32).as<float>();
}

void AsyncOptimizer::set_accumulation(int64_t k) {
  if (k < 1) fail("gradient accumulation needs at least 1 micro-batch a step, got " + std::to_string(k));
  if (!slots_.empty()) fail("gradient accumulation is set before the first step");
  accum_ = k;
}

bool AsyncOptimizer::accumulating() const { return rt_.micro_step() + 1 < accum_; }

void AsyncOptimizer::accumulate(Group& g, bool first) {
  float* acc = g.acc;
  const float* src = slots_[size_t(g.slot)];
  // As torch accumulates .grad: the first micro-batch's gradient, then += each next one.
  pool_->wait(pool_->for_chunks(int64_t(g.grad_elems), [=](int64_t lo, int64_t n) {
    if (first)
      std::memcpy(acc + lo, src + lo, size_t(n) * sizeof(float));
    else
      for (int64_t i = lo; i < lo + n; ++i) acc[i] += src[i];
  }));
}

void AsyncOptimizer::combine(Group& g) {
  const float* acc = g.acc;
  float* dst = slots_[size_t(g.slot)];
  // The mean over micro-batches: exactly torch's sum of (loss / k)'s
  // gradients when k is a power of two. A scaled backward started from
  // scale / k already (backward_scale), as torch's does: only the sum.
  const float inv = scaler_ ? 1.f : float(1.0 / double(accum_));
  pool_->wait(pool_->for_chunks(int64_t(g.grad_elems), [=](int64_t lo, int64_t n) {
    for (int64_t i = lo; i < lo + n; ++i) dst[i] = (acc[i] + dst[i]) * inv;
  }));
  g.combine = false;
}

namespace {
const char* op_name(int op) {
  static const char* names[] = {"grad_offload", "state_read", "group_adamw", "state_write", "gradient check", "early rows"};
  return names[op];
}
}  // namespace

int64_t AsyncOptimizer::new_token(Op op, int64_t group, int64_t seq) {
  int64_t t = next_token_++;
  tokens_[t] = Token{op, group, seq};
  return t;
}

AsyncOptimizer::Token AsyncOptimizer::peek_token(int64_t token, int64_t group, const char* who) const {
  auto it = tokens_.find(token);
  if (it == tokens_.end())
    fail(std::string(who) + " of group " + std::to_string(group) + ": token " + std::to_string(token) +
         " is not a pending op's (each token is depended on once)");
  Token t = it->second;
  if (t.group != group)
    fail(std::string(who) + " of group " + std::to_string(group) + " depends on the " + op_name(int(t.op)) +
         " of group " + std::to_string(t.group));
  return t;
}

int64_t AsyncOptimizer::offload(int64_t group, const View* grads, size_t count) {
  if (group < 0 || group >= num_groups()) fail("grad_offload: no group " + std::to_string(group));
  Group& g = groups_[size_t(group)];
  // A group is updated (or accumulated) once at a time; offload_early took
  // this update's slot already.
  const bool early = g.early_taken;
  if (early && !g.early_released)  // its part would never run: the step would hang on it
    fail("grad_offload: group " + std::to_string(group) +
         "'s table was handed over held and not released (no early_release before its grad_offload)");
  if (!early) wait_group(group, /*slot=*/true);
  if (slots_.empty()) make_slots();
  if (count != g.params.size())
    fail("grad_offload: group " + std::to_string(group) + " has " + std::to_string(g.params.size()) +
         " parameters, got " + std::to_string(count) + " gradients");
  for (size_t i = 0; i < count; ++i) {
    const auto& p = rt_.param(g.params[i]);
    if (grads[i].dtype != DType::F32 || grads[i].numel() != p.value.numel())
      fail("grad_offload: gradient of '" + p.name + "' is " + dtype_name(grads[i].dtype) + " " +
           grads[i].shape.str() + ", parameter is F32 " + p.value.shape.str());
  }
  if (!early) take_slot(g);
  // The rows the next step gathers first (a device copies their gradient
  // ahead of the whole one), then the gradients leave the device (on the
  // CPU target: a copy). After offload_early the rows are the step's own,
  // the only ones of the table left.
  if (!early) plan_rows(g, rt_.step());
  g.rows_from_copy = g.rows_index >= 0 && g.row_grads && copies_row_grads(g);
  if (g.rows_from_copy) {
    const View table{grads[g.rows_index].data, rt_.param(g.rows_param).value.shape, DType::F32};
    g.rows_landed = copy_rows_out_(group, table, g.rows, g.row_count, g.row_grads);
  }
  for (size_t i = 0; i < count; ++i) {
    if (early && int(i) == g.rows_index) {
      // The early part reads the rest of this slot now: only the named rows
      // go in, unless the device copied them to row_grads (offload_early
      // declines a device that cannot).
      if (g.rows_from_copy) continue;
      const int64_t d = grads[i].shape[1];
      for (int64_t k = 0; k < g.row_count; ++k)
        std::memcpy(grad(g, i) + g.rows[k] * d, grads[i].as<float>() + g.rows[k] * d, size_t(d) * sizeof(float));
      continue;
    }
    if (copy_out_)
      copy_out_(grads[i], grad(g, i));
    else
      std::memcpy(grad(g, i), grads[i].data, grads[i].nbytes());
  }
  if (copy_fence_) g.landed = copy_fence_(group);
  // A table's early chunks go behind: one behind another group's gradients,
  // all that are left behind its own rows.
  if (early_sending_ >= 0) {
    Group& table = groups_[size_t(early_sending_)];
    send_early_chunks(table, early_sending_ == group ? int64_t(table.early_chunks.size()) : 1);
    if (early_sending_ == group) early_sending_ = -1;
  }
  g.combine = accum_ > 1 && !accumulating();
  const bool record = rt_.recording_grads() && !accumulating();
  if (g.landed.wait && record) {
    g.landed.wait();  // read here, on the host, right away
    g.landed = {};
  }
  if (g.combine && record) combine(g);  // the step's gradient is the micro-batches' mean
  // Recorded as the optimizer will see them: unscaled (the scale cannot
  // change before this step's verdict).
  const float unscale = scaler_ ? scaler_->inv_scale() : 1.f;
  if (record)
    for (size_t i = 0; i < count; ++i)
      rt_.record_grad(g.params[i], View{grad(g, i), grads[i].shape, DType::F32}, unscale);
  std::lock_guard<std::mutex> lock(mu_);
  g.offloaded = ++offloads_;
  return new_token(Op::Offload, group, 0);
}

void AsyncOptimizer::take_slot(Group& g) {
  // A host slot for the gradients: wait for the optimizer to free one.
  TraceSpan span(rt_.trace(), "compute", "wait for a gradient slot");
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return !free_slots_.empty() || error_; });
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
  g.slot = free_slots_.back();
  free_slots_.pop_back();
}

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
  if (!early_on_ || !g.early_declared || store_ || holds() || accum_ > 1 || p.q8_block || rt_.recording_grads() ||
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

int64_t AsyncOptimizer::read(int64_t group) {
  if (group < 0 || group >= num_groups()) fail("state_read: no group " + std::to_string(group));
  std::lock_guard<std::mutex> lock(mu_);
  // A micro-batch's update reads nothing: its token names no read, and the
  // count stays the real reads' (the last step's may still be queued).
  if (accumulating()) return new_token(Op::Read, group, 0);
  Group& g = groups_[size_t(group)];
  int64_t seq = ++g.reads;
  if (store_) {
    queue_.push_back(Item{Op::Read, group, seq});
    work_cv_.notify_one();
  } else {
    g.reads_done = seq;  // the state is in memory already
  }
  return new_token(Op::Read, group, seq);
}

int64_t AsyncOptimizer::update(int64_t group, const int64_t* deps, size_t count) {
  if (group < 0 || group >= num_groups()) fail("group_adamw: no group " + std::to_string(group));
  std::lock_guard<std::mutex> lock(mu_);
  Group& g = groups_[size_t(group)];
  Item item{Op::Update, group, 0};
  int offloads = 0;
  for (size_t i = 0; i < count; ++i) {
    Token t = peek_token(deps[i], group, "group_adamw");
    if (t.op == Op::Offload)
      ++offloads;
    else if (t.op == Op::Read && !item.after_read)
      item.after_read = t.seq;
    else
      fail(std::string("group_adamw of group ") + std::to_string(group) + " cannot depend on a " +
           op_name(int(t.op)));
  }
  if (offloads != 1 || g.slot < 0)
    fail("group_adamw of group " + std::to_string(group) + " needs the group's grad_offload of this step");
  for (size_t i = 0; i < count; ++i) tokens_.erase(deps[i]);
  item.seq = ++g.updates;
  if (accumulating()) {
    // No AdamW, no hold for clipping or the loss scale: those wait for the sum.
    item.accumulate = true;
    item.first_micro = rt_.micro_step() == 0;
    g.pending = true;
    queue_.push_back(item);
    work_cv_.notify_one();
    return new_token(Op::Update, group, item.seq);
  }
  // AdamW's step count: skipped steps do not advance it (a held update's
  // is settled by its verdict). After offload_early, which set all this
  // for the step, its early part may be reading them.
  if (!g.early_taken) {
    g.step = rt_.step() - (scaler_ ? scaler_->skipped() : 0);
    g.iteration = rt_.step();
    g.pending = g.updating = true;
    std::fill(g.updated.begin(), g.updated.end(), 0);
    g.rows_ready = false;
    g.rows_done = false;
  }
  g.early_taken = false;
  if (holds()) {
    g.held = true;
    held_.push_back(item);
    awaiting_ = true;
    queue_.push_back(Item{Op::Check, group, item.seq});
  } else {
    queue_.push_back(item);
  }
  if (++started_ == groups_.size()) {
    started_ = 0;
    all_in_ = true;
    if (!holds() || checked_ == groups_.size()) release_updates();
  }
  work_cv_.notify_one();
  return new_token(Op::Update, group, item.seq);
}

void AsyncOptimizer::release_updates() {
  if (!holds()) {
    // Backward is done: the updates still queued are next needed by the next
    // forward, first layer first (groups are declared in backward order), so
    // they take their slots in the queue in that order.
    std::vector<Item> updates;
    for (const Item& it : queue_)
      if (it.op == Op::Update) updates.push_back(it);
    std::stable_sort(updates.begin(), updates.end(),
                     [](const Item& a, const Item& b) { return a.group > b.group; });
    size_t k = 0;
    for (Item& it : queue_)
      if (it.op == Op::Update) it = updates[k++];
    return;
  }
  // Every gradient of the step is in and checked: the verdict, the global
  // norm, then the updates in forward order.
  all_in_ = false;
  checked_ = 0;
  awaiting_ = false;
  // Added in the parameters' order, not the groups': the sum's bits do not
  // depend on how the program orders a group (fy-param-waits).
  std::vector<std::pair<int64_t, double>> squares;
  for (const Group& other : groups_)
    for (size_t i = 0; i < other.params.size(); ++i) squares.push_back({other.params[i], other.sq_norms[i]});
  std::sort(squares.begin(), squares.end());
  double total = 0;
  for (const auto& sq : squares) total += sq.second;
  float unscale = 1.f;
  if (scaler_) {
    verdict_.scale = scaler_->scale();
    unscale = scaler_->inv_scale();
    // A finite float squared is finite in double, so the sum is finite
    // exactly when every gradient element is.
    verdict_.skipped = !scaler_->update(std::isfinite(total));
    verdict_.next = scaler_->scale();
  }
  done_cv_.notify_all();
  if (verdict_.skipped) {
    // Nothing changes: the moments stay as they are, and the parameters'
    // values (no on_updated); a write-back finds nothing dirty.
    for (const Item& it : held_) {
      Group& other = groups_[size_t(it.group)];
      other.held = false;
      finish_update(other, it.seq);
    }
    held_.clear();
    last_norm_ = std::numeric_limits<double>::quiet_NaN();
    return;
  }
  // torch takes the norm of the unscaled gradients; the scale is a power of
  // two, so this is the same number.
  float norm = float(std::sqrt(total)) * unscale;
  last_norm_ = norm;
  float coef = clip_norm_ > 0 ? float(clip_norm_) / (norm + 1e-6f) : 1.f;
  std::stable_sort(held_.begin(), held_.end(), [](const Item& a, const Item& b) { return a.group > b.group; });
  for (const Item& it : held_) {
    Group& other = groups_[size_t(it.group)];
    other.held = false;
    other.unscale = unscale;
    other.scale = coef < 1.f ? coef : 1.f;
    queue_.push_back(it);
  }
  held_.clear();
}

AsyncOptimizer::Verdict AsyncOptimizer::wait_verdict() {
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return !awaiting_ || error_; });
  if (error_) std::rethrow_exception(error_);
  return verdict_;
}

void AsyncOptimizer::restore_loss_scaler(float scale, int64_t growth_tracker, int64_t skipped) {
  if (!scaler_) fail("restore_loss_scaler: the run has no loss scaling");
  std::lock_guard<std::mutex> lock(mu_);
  scaler_->restore(scale, growth_tracker, skipped);
  verdict_ = Verdict{false, scale, scale};
}

void AsyncOptimizer::check_norms(Group& g) {
  // torch takes the norm of each gradient in fp32, then the norm of those.
  // Each chunk's sum of squares goes in its own place and the places are added
  // in order, so the norm does not depend on the pool's thread count.
  constexpr int64_t C = AdamWPool::kChunk;
  std::vector<std::vector<double>> parts(g.params.size());
  {
    // The jobs write into `parts`: all are over when this scope ends, error or not.
    struct Jobs {
      AdamWPool& pool;
      std::vector<AdamWPool::Handle> handles;
      ~Jobs() {
        for (const AdamWPool::Handle& h : handles) pool.wait(h);
      }
    } jobs{*pool_, {}};
    for (size_t i = 0; i < g.params.size(); ++i) {
      const float* x = grad(g, i);
      const int64_t n = rt_.param(g.params[i]).value.numel();
      std::vector<double>& part = parts[i];
      part.assign(size_t((n + C - 1) / C), 0.0);
      jobs.handles.push_back(pool_->for_chunks(n, [x, &part](int64_t lo, int64_t len) {
        double acc[4] = {0, 0, 0, 0};  // four chains: the loop is latency-bound otherwise
        const float* y = x + lo;
        int64_t k = 0;
        for (; k + 4 <= len; k += 4)
          for (int j = 0; j < 4; ++j) acc[j] += double(y[k + j]) * double(y[k + j]);
        for (; k < len; ++k) acc[0] += double(y[k]) * double(y[k]);
        part[size_t(lo / C)] = (acc[0] + acc[1]) + (acc[2] + acc[3]);
      }));
    }
  }
  for (size_t i = 0; i < g.params.size(); ++i) {
    double sum = 0;
    for (double p : parts[i]) sum += p;
    float norm = float(std::sqrt(sum));
    g.sq_norms[i] = double(norm) * double(norm);
  }
}

void AsyncOptimizer::write(int64_t group, int64_t update) {
  if (group < 0 || group >= num_groups()) fail("state_write: no group " + std::to_string(group));
  std::lock_guard<std::mutex> lock(mu_);
  Token t = peek_token(update, group, "state_write");
  if (t.op != Op::Update)
    fail("state_write of group " + std::to_string(group) + " follows a " + op_name(int(t.op)) +
         ", not a group_adamw");
  tokens_.erase(update);
  if (store_ && !accumulating()) {
    queue_.push_back(Item{Op::Write, group, t.seq});
    work_cv_.notify_one();
  }
}

void AsyncOptimizer::start(int64_t group, const View* grads, size_t count) {
  int64_t deps[2] = {offload(group, grads, count), read(group)};
  write(group, update(group, deps, 2));
}

void AsyncOptimizer::wait(int64_t group) {
  if (group < 0 || group >= num_groups()) fail("group_wait: no group " + std::to_string(group));
  wait_group(group, /*slot=*/false);
}

void AsyncOptimizer::wait_group(int64_t group, bool slot) {
  const Group& g = groups_[size_t(group)];
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return !(slot ? g.pending : g.updating) || error_; });
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
}

void AsyncOptimizer::wait_param(int64_t group, int64_t param) {
  if (group < 0 || group >= num_groups()) fail("group_wait_param: no group " + std::to_string(group));
  const Group& g = groups_[size_t(group)];
  const auto at = std::find(g.params.begin(), g.params.end(), param);
  if (at == g.params.end())
    fail("group_wait_param: parameter " + std::to_string(param) + " is not in group " + std::to_string(group));
  if (!param_waits_) return wait_group(group, /*slot=*/false);
  const size_t i = size_t(at - g.params.begin());
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return !g.updating || g.updated[i] || error_; });
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
}

void AsyncOptimizer::param_updated(Group& g, size_t index) {
  std::lock_guard<std::mutex> lock(mu_);
  g.updated[index] = 1;
  done_cv_.notify_all();
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
    if (next_ids_) {  // else never rows first (train --rows-first no): no buffers
      g.rows = rt_.alloc_pinned(Shape{cap}, DType::I64).as<int64_t>();
      if (on_rows_updated_) g.row_values = rt_.alloc_pinned(Shape{cap * d}, DType::F32).as<float>();
      if (copies_row_grads(g)) g.row_grads = rt_.alloc_pinned(Shape{cap * d}, DType::F32).as<float>();
      if (g.early_declared && early_on_) {  // the next batch's rows among the early ones
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

void AsyncOptimizer::wait_all() {
  std::unique_lock<std::mutex> lock(mu_);
  // Reads queued ahead are left to run when their buffers free up.
  done_cv_.wait(lock, [&] {
    if (error_) return true;
    if (running_) return false;
    for (const Item& it : queue_)
      if (it.op != Op::Read) return false;
    for (const Group& g : groups_)
      if (g.pending) return false;
    return true;
  });
  if (error_) std::rethrow_exception(error_);
}

void AsyncOptimizer::quiesce() noexcept {
  std::unique_lock<std::mutex> lock(mu_);
  // The worker takes nothing more, and the item it is running ends first:
  // a Check still reads its group's slot, and a table's rows part puts the
  // rest back in the queue as it ends. Then everything queued or held goes.
  quiescing_ = true;
  done_cv_.wait(lock, [&] { return !running_; });
  auto drop = [&](Group& g) {
    g.pending = g.updating = g.held = g.rows_done = g.early = g.early_first_done = g.early_done = g.early_taken = false;
    g.final_seq = 0;
    settle_landings(g, g.early_sent);  // the slot is reused only once its copies are in
    if (g.slot >= 0) free_slots_.push_back(g.slot);
    g.slot = -1;
  };
  for (const Item& it : queue_)
    if (it.op == Op::Update || it.op == Op::Early) drop(groups_[size_t(it.group)]);
  queue_.clear();
  held_.clear();
  // Held for the verdict, or offloaded (early too) by a step that failed before its update.
  for (Group& g : groups_)
    if (g.held || (g.slot >= 0 && (!g.pending || g.early))) drop(g);
  tokens_.clear();
  early_sending_ = -1;
  started_ = 0;
  all_in_ = awaiting_ = false;
  checked_ = 0;
  quiescing_ = false;
  done_cv_.notify_all();
}

double AsyncOptimizer::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_seconds_;
}

bool AsyncOptimizer::can_stage(int64_t group) const {
  if (staging_.empty()) return true;
  for (const Staging& st : staging_)
    if (st.group == group || (st.consumed && !st.dirty)) return true;
  return false;
}

int AsyncOptimizer::runnable() const {
  if (quiescing_) return -1;
  // Write-backs first: they only issue I/O, and they free staging buffers.
  // A table's early pieces only when nothing else can run (filler).
  int first = -1, filler = -1;
  for (size_t i = 0; i < queue_.size(); ++i) {
    const Item& it = queue_[i];
    const Group& g = groups_[size_t(it.group)];
    switch (it.op) {
      case Op::Write:
        if (g.updates_done >= it.seq) return int(i);
        break;
      case Op::Update:
        if (first < 0 && g.reads_done >= it.after_read) first = int(i);
        break;
      case Op::Read:
        if (first < 0 && can_stage(it.group)) first = int(i);
        break;
      case Op::Early:
        if (!g.early_released) break;  // the program still reads the table
        if (early_filler(it)) {
          if (filler < 0 && early_sent(it)) filler = int(i);
          break;
        }
        [[fallthrough]];
      case Op::Check:
        if (first < 0) first = int(i);
        break;
      case Op::Offload:
        break;
    }
  }
  if (first < 0) {
    // A piece whose chunk is still on its way does not hold the worker
    // (the group's update may come first): it looks again shortly.
    if (filler >= 0 && !landed(queue_[size_t(filler)])) {
      filler_waiting_ = true;
      return -1;
    }
    return filler;
  }
  if (queue_[size_t(first)].op != Op::Update || landed(queue_[size_t(first)])) return first;
  // After backward the updates are queued in the next forward's order, which
  // is the reverse of the order their gradients land in: rather than wait on
  // the first, update the first that has landed, or else wait on the one
  // that lands first.
  int earliest = first;
  for (size_t i = size_t(first) + 1; i < queue_.size(); ++i) {
    const Item& it = queue_[i];
    if (it.op == Op::Early && groups_[size_t(it.group)].early_released && !early_filler(it) && landed(it)) return int(i);
    if (it.op != Op::Update || groups_[size_t(it.group)].reads_done < it.after_read) continue;
    if (landed(it)) return int(i);
    if (groups_[size_t(it.group)].offloaded < groups_[size_t(queue_[size_t(earliest)].group)].offloaded)
      earliest = int(i);
  }
  // Nothing has landed: a table's early piece rather than a wait.
  if (filler >= 0 && landed(queue_[size_t(filler)])) return filler;
  return earliest;
}

bool AsyncOptimizer::landed(const Item& it) const {
  // An update that starts with the rows of their own copy needs only those.
  const Group& g = groups_[size_t(it.group)];
  const Landing& l = it.op != Op::Early          ? (g.rows_from_copy && !g.rows_done ? g.rows_landed : g.landed)
                     : !g.early_first_done       ? g.early_landed
                     : g.early_piece < g.early_sent ? g.early_chunks[size_t(g.early_piece)]
                                                    : g.early_landed;
  return !l.wait || !l.ready || l.ready();
}

void AsyncOptimizer::worker() {
  for (;;) {
    Item item;
    {
      std::unique_lock<std::mutex> lock(mu_);
      int i = -1;
      for (;;) {
        filler_waiting_ = false;
        if (stop_ || (i = runnable()) >= 0) break;
        if (filler_waiting_)
          work_cv_.wait_for(lock, std::chrono::microseconds(100));  // a chunk's landing wakes nobody
        else
          work_cv_.wait(lock);
      }
      if (i < 0) return;  // stopping, and nothing left that can run
      item = queue_[size_t(i)];
      queue_.erase(queue_.begin() + i);
      running_ = true;
    }
    run(item);
    std::lock_guard<std::mutex> lock(mu_);
    running_ = false;
    done_cv_.notify_all();
  }
}

namespace {
// Waits once for a landing (then clears it); returns the seconds waited.
double wait_once(AsyncOptimizer::Landing& l) {
  std::function<void()> landed = std::move(l.wait);
  l = {};
  auto t0 = Clock::now();
  landed();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}
}  // namespace

void AsyncOptimizer::run(const Item& item) {
  Group& g = groups_[size_t(item.group)];
  auto t0 = Clock::now();
  landed_wait_ = 0;  // waiting for the device's copies is not optimizer work
  bool again = false;  // the item goes back in the queue for the rest
  try {
    if (item.op == Op::Read) {
      read_out_of_core(item.group);
    } else if (item.op == Op::Write) {
      write_out_of_core(item.group);
    } else if (item.accumulate) {
      await(g.landed, "gradients landed wait, group ", item.group);
      TraceSpan span(rt_.trace(), "cpu optimizer", "accumulate gradients, group ", item.group,
                     int64_t(g.grad_elems * 4));
      accumulate(g, item.first_micro);
    } else if (item.op == Op::Early) {
      // Left over by an update that failed and finished the group: nothing to do.
      if (g.early) again = run_early(g);
      if (!again) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          g.early_done = true;
        }
        if (g.final_seq) {  // the group's update ran before: the group is done now
          finish_table(g);
          if (on_updated_) on_updated_(item.group);
        }
      }
    } else if (item.op == Op::Check) {
      await(g.landed, "gradients landed wait, group ", item.group);
      if (g.combine) combine(g);
      TraceSpan span(rt_.trace(), "cpu optimizer", "gradient norms, group ", item.group, int64_t(g.grad_elems * 4));
      check_norms(g);
    } else {
      auto update = [&](Part part) {
        if (store_)
          update_out_of_core(item.group, part);
        else
          update_in_memory(g, part);
      };
      if (g.rows_from_copy && !g.rows_done) {
        // The rows had their own gradient copy: they go first, before the
        // whole gradient has landed. In memory the rest goes back in the
        // queue, so that updates whose gradients are in run meanwhile; out
        // of core it holds a staging buffer, which could leave none for
        // them, so it waits here.
        await(g.rows_landed, "rows' gradients landed wait, group ", item.group);
        update(Part::Rows);
        again = !store_;
        if (store_) {
          await(g.landed, "gradients landed wait, group ", item.group);
          update(Part::Rest);
        }
      } else {
        await(g.landed, "gradients landed wait, group ", item.group);
        if (g.combine) combine(g);
        update(g.rows_done ? Part::Rest : Part::All);
      }
      // The group is done when its early pieces are too (the last of them finishes it).
      if (!again && !(g.early && !g.early_done)) {
        finish_table(g);
        if (on_updated_) on_updated_(item.group);
      }
    }
  } catch (...) {
    // The slot is freed below: not while a copy may still be writing it. The
    // landings are an update's or a check's only: a read or write-back of
    // the group may fail while its next offload is setting them.
    if (item.op == Op::Update || item.op == Op::Check || item.op == Op::Early) {
      int64_t sent;
      {
        std::lock_guard<std::mutex> lock(mu_);
        sent = g.early_sent;
      }
      settle_landings(g, sent);
    }
    again = false;
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_) error_ = std::current_exception();
  }
  std::lock_guard<std::mutex> lock(mu_);
  busy_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count() - landed_wait_;
  if (again) {
    if (item.op != Op::Early) g.rows_done = true;
    queue_.push_back(item);
    work_cv_.notify_one();
  } else if (item.op == Op::Read) {
    g.reads_done = std::max(g.reads_done, item.seq);
  } else if (item.op == Op::Early) {
    if (g.final_seq) finish_update(g, g.final_seq);
  } else if (item.op == Op::Check) {
    if (++checked_ == groups_.size() && all_in_) release_updates();
  } else if (item.op == Op::Update) {
    if (g.early && !g.early_done && !error_)
      g.final_seq = item.seq;  // the early pieces left finish it
    else
      finish_update(g, item.seq);
  }
}

void AsyncOptimizer::finish_table(Group& g) {
  // After an early part: the table is whole once both parts are done.
  if (g.early && g.rows_index >= 0) param_updated(g, size_t(g.rows_index));
}

void AsyncOptimizer::finish_update(Group& g, int64_t seq) {
  free_slots_.push_back(g.slot);
  g.slot = -1;
  g.pending = g.updating = false;
  g.early = g.early_first_done = g.early_done = false;
  g.final_seq = 0;
  g.updates_done = seq;
}

void AsyncOptimizer::await(Landing& l, const char* what, int64_t group) {
  if (!l.wait) return;
  TraceSpan span(rt_.trace(), "cpu optimizer", what, group);
  landed_wait_ += wait_once(l);
}

void AsyncOptimizer::settle_landings(Group& g, int64_t chunks) noexcept {
  std::vector<Landing*> all = {&g.early_landed, &g.rows_landed, &g.landed};
  // Only the chunks sent: the program's thread may be setting the next.
  for (int64_t k = 0; k < chunks && k < int64_t(g.early_chunks.size()); ++k) all.push_back(&g.early_chunks[size_t(k)]);
  for (Landing* l : all)
    if (l->wait) {
      try {
        wait_once(*l);
      } catch (...) {
      }
    }
}

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
