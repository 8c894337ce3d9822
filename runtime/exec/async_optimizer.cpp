#include "exec/async_optimizer.h"

#include <chrono>
#include <cmath>
#include <cstring>

#include "exec/runtime.h"

namespace fy {

using Clock = std::chrono::steady_clock;

AsyncOptimizer::AsyncOptimizer(Runtime& rt) : rt_(rt), thread_([this] { worker(); }) {}

AsyncOptimizer::~AsyncOptimizer() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  thread_.join();
}

int64_t AsyncOptimizer::declare_group(std::vector<int64_t> params) {
  if (params.empty()) fail("declare_group: a group needs at least one parameter");
  Group g;
  for (int64_t p : params) {
    const auto& param = rt_.param(p);
    if (!param.trainable) fail("declare_group: parameter '" + param.name + "' is not trainable");
    g.grads.emplace_back(size_t(param.value.numel()));
  }
  g.sq_norms.assign(params.size(), 0.0);
  g.params = std::move(params);
  std::lock_guard<std::mutex> lock(mu_);
  groups_.push_back(std::move(g));
  return int64_t(groups_.size()) - 1;
}

void AsyncOptimizer::start(int64_t group, const View* grads, size_t count) {
  if (group < 0 || group >= num_groups()) fail("group_update: no group " + std::to_string(group));
  wait(group);  // a group is updated at most once at a time
  Group& g = groups_[size_t(group)];
  if (count != g.params.size())
    fail("group_update: group " + std::to_string(group) + " has " + std::to_string(g.params.size()) +
         " parameters, got " + std::to_string(count) + " gradients");
  for (size_t i = 0; i < count; ++i) {
    const auto& p = rt_.param(g.params[i]);
    if (grads[i].dtype != DType::F32 || grads[i].numel() != p.value.numel())
      fail("group_update: gradient of '" + p.name + "' is " + dtype_name(grads[i].dtype) + " " +
           grads[i].shape.str() + ", parameter is F32 " + p.value.shape.str());
    // The gradient leaves the device here (on the CPU target: a copy).
    std::memcpy(g.grads[i].data(), grads[i].data, grads[i].nbytes());
    rt_.record_grad(g.params[i], grads[i]);
    if (clip_norm_ > 0) {
      // torch takes the norm of each gradient in fp32, then the norm of those.
      const float* x = g.grads[i].data();
      double acc = 0;
      for (size_t k = 0; k < g.grads[i].size(); ++k) acc += double(x[k]) * double(x[k]);
      float n = float(std::sqrt(acc));
      g.sq_norms[i] = double(n) * double(n);
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  g.step = rt_.step();
  g.pending = true;
  if (clip_norm_ <= 0) {
    queue_.push_back(group);
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
      for (size_t i = 0; i < g.params.size(); ++i) {
        if (g.scale != 1.f)
          for (float& x : g.grads[i]) x *= g.scale;
        rt_.adamw_at(g.params[i], g.grads[i].data(), g.step);
      }
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard<std::mutex> lock(mu_);
    busy_seconds_ += std::chrono::duration<double>(Clock::now() - t0).count();
    g.pending = false;
    done_cv_.notify_all();
  }
}

}  // namespace fy
