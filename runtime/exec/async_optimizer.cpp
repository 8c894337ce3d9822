#include "exec/async_optimizer.h"

#include <algorithm>
#include <chrono>
#include <functional>
#include <cmath>
#include <cstring>

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
  if (!o.ssd_dirs.empty()) {
    store::StoreOptions so;
    so.dirs = o.ssd_dirs;
    so.truncate = true;  // a fresh run; --resume writes the checkpoint's moments in
    store_ = std::make_unique<store::TensorStore>(so);
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

size_t AsyncOptimizer::fixed_host_bytes() const {
  if (store_) return staging_count_ * staging_bytes_;
  size_t n = 0;  // AdamW's moments in memory
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
}

void AsyncOptimizer::start(int64_t group, const View* grads, size_t count) {
  if (group < 0 || group >= num_groups()) fail("group_update: no group " + std::to_string(group));
  wait(group);  // a group is updated at most once at a time
  if (slots_.empty()) make_slots();
  Group& g = groups_[size_t(group)];
  {
    // A host slot for the gradients: wait for the optimizer to free one.
    auto t0 = Clock::now();
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return !free_slots_.empty() || error_; });
    wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    if (error_) std::rethrow_exception(error_);
    g.slot = free_slots_.back();
    free_slots_.pop_back();
  }
  if (count != g.params.size())
    fail("group_update: group " + std::to_string(group) + " has " + std::to_string(g.params.size()) +
         " parameters, got " + std::to_string(count) + " gradients");
  for (size_t i = 0; i < count; ++i) {
    const auto& p = rt_.param(g.params[i]);
    if (grads[i].dtype != DType::F32 || grads[i].numel() != p.value.numel())
      fail("group_update: gradient of '" + p.name + "' is " + dtype_name(grads[i].dtype) + " " +
           grads[i].shape.str() + ", parameter is F32 " + p.value.shape.str());
    // The gradient leaves the device here (on the CPU target: a copy).
    if (copy_out_)
      copy_out_(grads[i], grad(g, i));
    else
      std::memcpy(grad(g, i), grads[i].data, grads[i].nbytes());
    rt_.record_grad(g.params[i], View{grad(g, i), grads[i].shape, DType::F32});
    if (clip_norm_ > 0) {
      // torch takes the norm of each gradient in fp32, then the norm of those.
      const float* x = grad(g, i);
      double acc = 0;
      for (int64_t k = 0; k < grads[i].numel(); ++k) acc += double(x[k]) * double(x[k]);
      float n = float(std::sqrt(acc));
      g.sq_norms[i] = double(n) * double(n);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  g.step = rt_.step();
  g.pending = true;
  if (clip_norm_ <= 0) {
    queue_.push_back(group);
    if (++started_ == groups_.size()) {
      // Backward is done: what is still queued is next needed by the next
      // forward, first layer first (groups are declared in backward order).
      started_ = 0;
      std::sort(queue_.begin(), queue_.end(), std::greater<int64_t>());
    }
    work_cv_.notify_one();
    return;
  }
  g.held = true;
  for (const Group& other : groups_)
    if (!other.held) return;
  // Every gradient of the step is in: the global norm, then the updates in
  // forward order (groups are declared in backward order).
  double total = 0;
  for (const Group& other : groups_)
    for (double sq : other.sq_norms) total += sq;
  float norm = float(std::sqrt(total));
  last_norm_ = norm;
  float coef = float(clip_norm_) / (norm + 1e-6f);
  for (int64_t k = num_groups() - 1; k >= 0; --k) {
    Group& other = groups_[size_t(k)];
    other.held = false;
    other.scale = coef < 1.f ? coef : 1.f;
    queue_.push_back(k);
  }
  work_cv_.notify_one();
}

void AsyncOptimizer::wait(int64_t group) {
  auto t0 = Clock::now();
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [&] { return !groups_[size_t(group)].pending || error_; });
  wait_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
  if (error_) std::rethrow_exception(error_);
}

void AsyncOptimizer::wait_all() {
  for (int64_t g = 0; g < num_groups(); ++g) wait(g);
}

void AsyncOptimizer::quiesce() noexcept {
  std::unique_lock<std::mutex> lock(mu_);
  auto drop = [&](Group& g) {
    g.pending = g.held = false;
    if (g.slot >= 0) free_slots_.push_back(g.slot);
    g.slot = -1;
  };
  for (int64_t q : queue_) drop(groups_[size_t(q)]);
  queue_.clear();
  for (Group& g : groups_)
    if (g.held) drop(g);
  // What is left pending is the update the worker is running.
  done_cv_.wait(lock, [&] {
    for (const Group& g : groups_)
      if (g.pending) return false;
    return true;
  });
}

double AsyncOptimizer::busy_seconds() const {
  std::lock_guard<std::mutex> lock(mu_);
  return busy_seconds_;
}

void AsyncOptimizer::worker() {
  for (;;) {
    int64_t group;
    {
      std::unique_lock<std::mutex> lock(mu_);
      work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_ && queue_.empty()) return;
      group = queue_.front();
      queue_.pop_front();
    }
    Group& g = groups_[size_t(group)];
    auto t0 = Clock::now();
    try {
      if (g.scale != 1.f) {
        float* x = grad(g, 0);
        for (size_t k = 0; k < g.grad_elems; ++k) x[k] *= g.scale;
      }
      if (store_)
        update_out_of_core(group);
      else
        update(g);
      if (on_updated_) on_updated_(group);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    busy_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    free_slots_.push_back(g.slot);
    g.slot = -1;
    g.pending = false;
    done_cv_.notify_all();
  }
}

void AsyncOptimizer::update(Group& g) {
  TraceSpan span(rt_.trace(), "cpu optimizer", "adamw", -1, int64_t(g.grad_elems * 16));
  for (size_t i = 0; i < g.params.size(); ++i) {
    const auto& p = rt_.param(g.params[i]);
    submit(g.params[i], grad(g, i), p.m.data, p.v.data, g.step);
  }
  pool_->wait_all();
}

void AsyncOptimizer::drain(std::vector<store::Ticket>& tickets) {
  for (store::Ticket t : tickets) store_->wait(t);
  tickets.clear();
}

AsyncOptimizer::Staging* AsyncOptimizer::stage(int64_t group, bool force) {
  for (Staging& st : staging_)
    if (st.group == group) return &st;
  // The least recently used buffer whose group no longer needs it.
  Staging* pick = nullptr;
  for (Staging& st : staging_)
    if ((st.consumed || force) && (!pick || st.last_use < pick->last_use)) pick = &st;
  if (!pick) return nullptr;
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

void AsyncOptimizer::update_out_of_core(int64_t group) {
  if (staging_.empty()) {
    staging_.resize(staging_count_);
    for (Staging& st : staging_) st.buffer = store_->buffer(staging_bytes_);
  }
  Group& g = groups_[size_t(group)];
  Staging& cur = *stage(group, /*force=*/true);
  cur.consumed = false;
  // Read ahead for the groups that come next, as far as the buffers allow:
  // those queued, then the following ones in backward order (the order every
  // step produces them).
  std::vector<int64_t> ahead;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ahead.assign(queue_.begin(), queue_.end());
  }
  for (int64_t k = 1; int64_t(ahead.size()) < num_groups(); ++k) ahead.push_back((group + k) % num_groups());
  size_t staged = 0;
  for (int64_t next : ahead) {
    if (staged + 1 >= staging_.size()) break;
    if (next == group) continue;
    if (!stage(next, /*force=*/false)) break;
    ++staged;
  }
  {
    TraceSpan span(rt_.trace(), "cpu optimizer", "state read wait, group ", group);
    drain(cur.reads);
  }
  TraceSpan span(rt_.trace(), "cpu optimizer", "adamw, group ", group, int64_t(g.grad_elems * 16));
  char* base = static_cast<char*>(cur.buffer.data());
  for (size_t i = 0; i < g.params.size(); ++i) {
    submit(g.params[i], grad(g, i), base + g.m_offsets[i], base + g.v_offsets[i], g.step);
  }
  pool_->wait_all();
  for (size_t i = 0; i < g.params.size(); ++i) {
    cur.writes.push_back(store_->write(g.m_regions[i], base + g.m_offsets[i]));
    cur.writes.push_back(store_->write(g.v_regions[i], base + g.v_offsets[i]));
  }
  // The staged copy stays valid: a later step may find it here without a read.
  cur.consumed = true;
  cur.last_use = ++clock_;
}

void AsyncOptimizer::submit(int64_t param, const float* g, void* m, void* v, int64_t step) {
  const Runtime::Param& p = rt_.param(param);
  if (p.q8_block)
    pool_->submit_8bit(p.value.as<float>(), g, m, v, p.value.numel(), p.q8_block, rt_.options().adamw, step);
  else
    pool_->submit(p.value.as<float>(), g, static_cast<float*>(m), static_cast<float*>(v), p.value.numel(),
                  rt_.options().adamw, step);
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
