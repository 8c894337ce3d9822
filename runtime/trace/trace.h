// A timeline of a training run in Chrome's trace format (opens in Perfetto
// and chrome://tracing): one track per stream of work (compute, the CPU
// optimizer, ...), one slice per kernel, update or wait.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace fy {

class Trace {
 public:
  explicit Trace(std::string path) : path_(std::move(path)), origin_(std::chrono::steady_clock::now()) {}

  // Microseconds since the trace started.
  double now_us() const {
    return std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - origin_).count();
  }
  // Microseconds since the trace started of a steady_clock time.
  double us_at(std::chrono::steady_clock::time_point t) const {
    return std::chrono::duration<double, std::micro>(t - origin_).count();
  }
  // One slice on `track`; thread-safe. `bytes` < 0: none recorded.
  void slice(const char* track, std::string name, double start_us, double end_us, int64_t bytes = -1);
  // Writes the JSON file (atomically: a temporary, then rename).
  void write() const;
  size_t size() const;

 private:
  struct Event {
    int track;
    std::string name;
    double start, dur;
    int64_t bytes;
  };
  int track_id(const char* track);

  std::string path_;
  std::chrono::steady_clock::time_point origin_;
  mutable std::mutex mu_;
  std::vector<std::string> tracks_;
  std::vector<Event> events_;
};

// Records a slice from construction to destruction when tracing. The name
// is `name`, followed by `index` when it is >= 0; it is only formatted when
// tracing, so untraced kernels pay one branch.
class TraceSpan {
 public:
  TraceSpan(Trace* t, const char* track, const char* name, int64_t index = -1, int64_t bytes = -1)
      : t_(t), track_(track), name_(name), index_(index), bytes_(bytes), start_(t ? t->now_us() : 0) {}
  ~TraceSpan() {
    if (t_)
      t_->slice(track_, index_ >= 0 ? name_ + std::to_string(index_) : std::string(name_), start_, t_->now_us(),
                bytes_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace* t_;
  const char* track_;
  const char* name_;
  int64_t index_;
  int64_t bytes_;
  double start_;
};

}  // namespace fy
