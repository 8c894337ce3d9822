#include "device/arena.h"

#include <algorithm>
#include <string>

namespace fy {

void Arena::reset(void* base, int64_t bytes) {
  base_ = static_cast<char*>(base);
  bytes_ = bytes;
  live_.clear();
  live_bytes_ = 0;
}

bool Arena::contains(const void* p) const {
  const char* c = static_cast<const char*>(p);
  return base_ && c >= base_ && c < base_ + bytes_;
}

View Arena::place(int64_t offset, Shape shape, DType dtype, int64_t granule, int64_t* bytes) {
  if (shape.numel() < 0) fail("alloc_at: negative dim in " + shape.str());
  View v{nullptr, shape, dtype};
  // Rounded as the plan rounds: a granule at least, so every buffer has a place.
  const int64_t size = std::max(granule, (int64_t(v.nbytes()) + granule - 1) / granule * granule);
  const int64_t end = offset + size;
  if (!base_) fail("alloc_at: the program places buffers but declared no arena (recompile it)");
  if (offset < 0 || end > bytes_)
    fail("alloc_at: " + shape.str() + " at offset " + std::to_string(offset) + " runs past the " +
         std::to_string(bytes_) + "-byte arena (a compiler bug)");
  // The live buffer starting at or before `offset`, and the one after it.
  auto next = live_.lower_bound(offset);
  if (next != live_.end() && next->first < end)
    fail("alloc_at: " + shape.str() + " at [" + std::to_string(offset) + ", " + std::to_string(end) +
         ") overlaps a live buffer at " + std::to_string(next->first) + " (a compiler bug)");
  if (next != live_.begin() && std::prev(next)->second > offset)
    fail("alloc_at: " + shape.str() + " at [" + std::to_string(offset) + ", " + std::to_string(end) +
         ") overlaps a live buffer at " + std::to_string(std::prev(next)->first) + " (a compiler bug)");
  live_.emplace(offset, end);
  live_bytes_ += size;
  *bytes = size;
  v.data = base_ + offset;
  return v;
}

int64_t Arena::release(const View& v) {
  auto it = live_.find(static_cast<const char*>(v.data) - base_);
  if (!contains(v.data) || it == live_.end())
    fail("dealloc: buffer " + v.shape.str() + " is not a live buffer of the arena (deallocated twice?)");
  if (int64_t(v.nbytes()) > it->second - it->first)
    fail("dealloc: view " + v.shape.str() + " is larger than its buffer (" + std::to_string(it->second - it->first) +
         " bytes)");
  const int64_t size = it->second - it->first;
  live_bytes_ -= size;
  live_.erase(it);
  return size;
}

}  // namespace fy
