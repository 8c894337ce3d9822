#include "trace/trace.h"

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "core/tensor.h"

namespace fy {

namespace {
// Names are ours (kernels, groups): escape quotes and backslashes anyway.
std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    out += (c == '\n') ? ' ' : c;
  }
  return out + "\"";
}
}  // namespace

int Trace::track_id(const char* track) {
  for (size_t i = 0; i < tracks_.size(); ++i)
    if (tracks_[i] == track) return int(i) + 1;
  tracks_.push_back(track);
  return int(tracks_.size());
}

void Trace::slice(const char* track, std::string name, double start_us, double end_us, int64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back({track_id(track), std::move(name), start_us, end_us - start_us, bytes});
}

size_t Trace::size() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_.size();
}

void Trace::write() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::string tmp = path_ + ".tmp";
  FILE* f = std::fopen(tmp.c_str(), "w");
  if (!f) fail("--trace: cannot write '" + tmp + "': " + std::strerror(errno));
  std::fprintf(f, "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n");
  for (size_t i = 0; i < tracks_.size(); ++i)
    std::fprintf(f, "{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": %zu, \"args\": {\"name\": %s}},\n",
                 i + 1, json_string(tracks_[i]).c_str());
  for (size_t i = 0; i < events_.size(); ++i) {
    const Event& e = events_[i];
    std::fprintf(f, "{\"ph\": \"X\", \"pid\": 1, \"tid\": %d, \"name\": %s, \"ts\": %.3f, \"dur\": %.3f", e.track,
                 json_string(e.name).c_str(), e.start, e.dur);
    if (e.bytes >= 0) std::fprintf(f, ", \"args\": {\"bytes\": %lld}", (long long)e.bytes);
    std::fprintf(f, "}%s\n", i + 1 < events_.size() ? "," : "");
  }
  std::fprintf(f, "]}\n");
  // fclose flushes: its failure (a full disk) is the write's too.
  bool ok = !std::ferror(f);
  ok = std::fclose(f) == 0 && ok;
  int e = errno;
  if (ok && std::rename(tmp.c_str(), path_.c_str()) != 0) {
    ok = false;
    e = errno;
  }
  if (!ok) {
    if (e == 0) e = EIO;  // a stream error fclose did not repeat
    std::remove(tmp.c_str());  // a partial trace would only hold the disk's last room
    fail("--trace: writing '" + path_ + "' failed: " + std::strerror(e));
  }
}

}  // namespace fy
