// The static memory plan's arena: one block of memory in which the compiler
// (fy-plan-memory) gave every temporary an offset. Placing a buffer is an
// addition; the arena only checks the plan as the program runs, refusing a
// buffer that runs past its end or overlaps one still alive (a compiler bug
// that would otherwise corrupt data silently).
#pragma once

#include <cstdint>
#include <map>

#include "core/tensor.h"

namespace fy {

class Arena {
 public:
  // The arena's memory (owned by the caller), `bytes` long.
  void reset(void* base, int64_t bytes);
  void* base() const { return base_; }
  int64_t bytes() const { return bytes_; }
  bool contains(const void* p) const;

  // The buffer the plan put at `offset`; `granule` is the allocator's
  // rounding, which the plan counts in each buffer's size (its size so
  // rounded goes to *bytes).
  View place(int64_t offset, Shape shape, DType dtype, int64_t granule, int64_t* bytes);
  // Ends the lifetime of a buffer placed here, returning its rounded size;
  // fails on any other pointer.
  int64_t release(const View& v);
  // Bytes of the buffers alive now (granule-rounded).
  int64_t live_bytes() const { return live_bytes_; }
  int64_t live_buffers() const { return int64_t(live_.size()); }

 private:
  char* base_ = nullptr;
  int64_t bytes_ = 0;
  std::map<int64_t, int64_t> live_;  // offset → end of each live buffer
  int64_t live_bytes_ = 0;
};

}  // namespace fy
