// Activations that wait on SSD for backward (fuyou-compile --activations
// ssd). The memory plan's SSD arena (fysched.ssd_arena_bytes) is one region
// of a store of its own, "fuyou.activations" in the --ssd directories; the
// program moves a buffer there from a host-arena buffer and back into
// another, and every transfer runs asynchronously through io_uring:
//
//   copy_to_ssd(host, ssd)   starts the write, and returns its ticket
//   wait(ticket)             waits for that write, if it is still in flight
//   copy_from_ssd(ssd, host) starts the read (after any write still filling `ssd`)
//   settle(host)             waits for the transfer in flight on `host`, if any
//   settle(begin, end)       waits for those on any host memory in [begin, end)
//
// The runtime settles a host buffer before it is copied to the device (its
// bytes are read), and the host arena's range before a buffer is placed
// over it: a write may still read a freed buffer, overlapping the ops that
// follow, until its memory is wanted again.
// SSD buffers are Views whose addresses lie in a reserved, inaccessible
// range of the arena's size: unique per place, checked by an Arena like the
// others' (a plan that overlaps two live buffers fails), never dereferenced.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "device/arena.h"
#include "store/store.h"
#include "trace/trace.h"

namespace fy {

class SsdSpill {
 public:
  // With a trace, blocking on a transfer is a "wait for ssd" slice of the
  // compute track (the thread that calls these).
  SsdSpill(const store::StoreOptions& so, int64_t bytes, Trace* trace = nullptr);
  ~SsdSpill();
  SsdSpill(const SsdSpill&) = delete;
  SsdSpill& operator=(const SsdSpill&) = delete;

  View place(int64_t offset, Shape shape, DType dtype);
  bool contains(const void* p) const { return arena_.contains(p); }
  void release(const View& ssd);
  int64_t live_buffers() const { return arena_.live_buffers(); }

  // `host` is a page-aligned buffer of the host arena, whose page-rounded
  // size the plan reserved: whole pages move (O_DIRECT).
  int64_t write(View host, View ssd);
  void read(View ssd, View host);
  // Tickets are 1, 2, ... in the order writes start; one whose write is
  // done (settled since) returns at once.
  void wait(int64_t ticket);
  void settle(const void* host);
  void settle(const void* begin, const void* end);
  void settle_all();

  store::StoreCounters counters() const { return store_->counters(); }

 private:
  struct Transfer {
    store::Ticket ticket;
    const char* host;
    int64_t bytes;   // page-rounded, as moved
    int64_t offset;  // in the region
    bool write;
    int64_t id;  // a write's ticket; 0 for a read
  };
  int64_t offset_of(const View& ssd) const;
  void finish(size_t i);

  std::unique_ptr<store::TensorStore> store_;
  store::Region region_;
  void* base_ = nullptr;  // the reserved address range
  int64_t bytes_ = 0;
  Arena arena_;
  std::vector<Transfer> in_flight_;
  int64_t writes_ = 0;  // tickets handed out
  Trace* trace_;
};

}  // namespace fy
