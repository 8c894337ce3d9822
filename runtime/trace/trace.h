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

// Records a slice from construction to destruction when tracing.
class TraceSpan {
 public:
  TraceSpan(Trace* t, const char* track, std::string name, int64_t bytes = -1)
      : t_(t), track_(track), name_(t ? std::move(name) : std::string()), bytes_(bytes),
        start_(t ? t->now_us() : 0) {}
  ~TraceSpan() {
    if (t_) t_->slice(track_, std::move(name_), start_, t_->now_us(), bytes_);
  }
  TraceSpan(const TraceSpan&) = delete;
  TraceSpan& operator=(const TraceSpan&) = delete;

 private:
  Trace* t_;
  const char* track_;
  std::string name_;
  int64_t bytes_;
  double start_;
};

}  // namespace fy
