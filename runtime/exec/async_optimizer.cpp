// AsyncOptimizer's work queue: the program's calls (offload, read, update,
// write, wait) queue items in order, and one worker thread runs whichever
// the rules let run first (runnable()); the updates themselves, the table
// rows policy and the step-wide checks are in async_optimizer_{state,rows,checks}.cpp.
#include "exec/async_optimizer.h"

#include "abi/queue_rules.h"

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

AsyncOptimizer::AsyncOptimizer(Runtime& rt) : rt_(rt) {
  const TrainOptions& o = rt.options();
  pool_ = std::make_unique<AdamWPool>(int(o.optimizer_threads));
  // A fresh run's; --resume writes the checkpoint's moments in.
  moments_ = o.ssd_dirs.empty() ? moments_in_memory(rt) : moments_on_ssd(rt);
  thread_ = std::thread([this] { worker(); });
}

AsyncOptimizer::~AsyncOptimizer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
  moments_->settle();  // writes in flight still read the staging buffers
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
  moments_->declare_group(int64_t(groups_.size()), params);
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
      if (g.early_declared)
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
  return moments_->host_bytes(moments_->buffers()) + rows_host_bytes() + accum_host_bytes();
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

int64_t AsyncOptimizer::read(int64_t group) {
  if (group < 0 || group >= num_groups()) fail("state_read: no group " + std::to_string(group));
  std::lock_guard<std::mutex> lock(mu_);
  // A micro-batch's update reads nothing: its token names no read, and the
  // count stays the real reads' (the last step's may still be queued).
  if (accumulating()) return new_token(Op::Read, group, 0);
  Group& g = groups_[size_t(group)];
  int64_t seq = ++g.reads;
  if (moments_->staged()) {
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

void AsyncOptimizer::write(int64_t group, int64_t update) {
  if (group < 0 || group >= num_groups()) fail("state_write: no group " + std::to_string(group));
  std::lock_guard<std::mutex> lock(mu_);
  Token t = peek_token(update, group, "state_write");
  if (t.op != Op::Update)
    fail("state_write of group " + std::to_string(group) + " follows a " + op_name(int(t.op)) +
         ", not a group_adamw");
  tokens_.erase(update);
  if (moments_->staged() && !accumulating()) {
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
        if (first < 0 && moments_->can_read_ahead(it.group)) first = int(i);
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
    // Nothing else queued. A piece whose chunk is still on its way does not
    // hold the worker (the group's update may come first): it looks again shortly.
    if (filler < 0 || queue::piece_first(/*picked_landed=*/false, landed(queue_[size_t(filler)]))) return filler;
    filler_waiting_ = true;
    return -1;
  }
  if (queue_[size_t(first)].op != Op::Update || landed(queue_[size_t(first)])) return first;
  // The updates that could run (and a released table's early part, which
  // runs when landed but never counts as landing first), in queue order:
  // the first landed, else the one landing first (abi/queue_rules.h).
  std::vector<size_t> can{size_t(first)};
  for (size_t i = size_t(first) + 1; i < queue_.size(); ++i) {
    const Item& it = queue_[i];
    const bool early = it.op == Op::Early && groups_[size_t(it.group)].early_released && !early_filler(it);
    if (early || (it.op == Op::Update && groups_[size_t(it.group)].reads_done >= it.after_read)) can.push_back(i);
  }
  const queue::Pick pick = queue::next_update(
      can.size(), [&](size_t k) { return landed(queue_[can[k]]); },
      [&](size_t a, size_t b) {
        const Item &x = queue_[can[a]], &y = queue_[can[b]];
        return x.op == Op::Update && groups_[size_t(x.group)].offloaded < groups_[size_t(y.group)].offloaded;
      });
  // Nothing has landed: a table's early piece rather than a wait.
  if (filler >= 0 && queue::piece_first(pick.landed, landed(queue_[size_t(filler)]))) return filler;
  return int(can[pick.index]);
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
      moments_->read_ahead(item.group);
    } else if (item.op == Op::Write) {
      moments_->write_back(item.group);
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
      auto update = [&](Part part) { update_moments(item.group, part); };
      if (g.rows_from_copy && !g.rows_done) {
        // The rows had their own gradient copy: they go first, before the
        // whole gradient has landed. In memory the rest goes back in the
        // queue, so that updates whose gradients are in run meanwhile; out
        // of core it holds a staging buffer, which could leave none for
        // them, so it waits here.
        await(g.rows_landed, "rows' gradients landed wait, group ", item.group);
        update(Part::Rows);
        again = !moments_->staged();
        if (moments_->staged()) {
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

}  // namespace fy
