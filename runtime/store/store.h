// SSD tensor store: named regions of bytes kept in one file per directory
// ("DIR/fuyou.store"), striped across the files in block-sized stripes, and
// moved to and from host memory asynchronously through io_uring.
//
//   fy::store::StoreOptions opt;
//   opt.dirs = {"/mnt/nvme0", "/mnt/nvme1"};
//   fy::store::TensorStore st(opt);
//   fy::store::Region m = st.allocate("layer3.adam_m", nbytes);
//   fy::store::AlignedBuffer buf = st.buffer(nbytes);     // 4096-aligned, registered if allowed
//   fy::store::Ticket t = st.write(m, buf.data());
//   ...                                                   // compute while the write runs
//   st.wait(t);                                           // throws fy::Error on failure
//
// Layout. The store is one logical address space; allocate() hands out
// regions at 4096-aligned logical offsets in call order. Logical block b
// (block_bytes each) lives in file b % ndirs at file offset
// (b / ndirs) * block_bytes. Offsets depend only on the sequence of allocate()
// calls, block_bytes and the number of dirs, so a program that reopens a store
// (truncate = false) and allocates the same regions in the same order finds its
// bytes again. Files grow (sparsely) as regions are allocated; a region never
// written reads as zeros.
//
// I/O. A request is cut at stripe boundaries into operations of at most
// block_bytes; at most queue_depth operations are in flight for the whole
// store. Operations wait in two queues, reads and writes, and the read queue is
// always drained first: when an optimizer queues the write-back of one group and
// the prefetch of the next, the prefetch goes to the device first. Short reads
// and writes are resubmitted for the remainder. Completions are reaped by one
// internal thread, so queued work keeps flowing while the caller computes.
//
// Direct mode (O_DIRECT, the default): the host pointer must be 4096-aligned
// and the offset inside the region a multiple of 4096; a write's length must be
// a multiple of 4096 unless it ends at the region's end. The last partial page
// of a region goes through an internal bounce page, so host buffers need no
// room beyond the bytes asked for. Buffered mode (direct = false) has no
// alignment rules.
//
// Registered buffers. buffer() registers its memory with the ring
// (io_uring_register_buffers) when the locked-memory limit allows; when it does
// not, or register_buffers is false, the buffer works the same, unregistered.
// Any other host memory works too (unregistered).
//
// Errors. Every failure is an fy::Error (core/tensor.h) with one line naming
// the file, the file offset and the errno text, e.g.
//   fy::store: write of region 'l3.m' failed at /ssd/fuyou.store offset 3145728: No space left on device
// A write touches only its own region's bytes, so a failed write never damages
// another region. The failed region's contents are undefined: the store marks
// it invalid and read() of it fails ("... is invalid: its last write failed
// ...") until a write of the whole region succeeds.
//
// Threads. All methods may be called from any thread (one mutex serialises
// them); the usual pattern is one thread that submits and waits. Host memory
// given to read()/write() must stay valid until the ticket is waited for.
#pragma once

#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fy::store {

constexpr size_t kPageBytes = 4096;

struct StoreOptions {
  std::vector<std::string> dirs;  // one store file per directory, at least one
  size_t block_bytes = 1 << 20;   // stripe unit and largest single I/O (multiple of 4096)
  unsigned queue_depth = 32;      // most I/O operations in flight at once
  bool direct = true;             // O_DIRECT
  bool register_buffers = true;   // false: never register (forces the fallback path)
  bool truncate = false;          // discard what the files hold when opening
  bool remove_on_close = false;   // unlink the files when the store closes (a run's scratch)
  bool reserve = false;           // allocate() reserves the regions' disk blocks (fallocate): a
                                  // full disk fails there, not at a write mid-run
  std::string file_name = "fuyou.store";  // the store's file in each directory
  // Called on the reaping thread at the end of each busy period (the time with
  // at least one operation in flight) with the bytes it moved: for traces.
  // It must not call back into the store.
  std::function<void(std::chrono::steady_clock::time_point begin, std::chrono::steady_clock::time_point end,
                     uint64_t bytes_read, uint64_t bytes_written)>
      on_busy;
  // Priority between stores on one device, whose queue serves requests in
  // the order they arrive: a store given `count_reads` keeps there how many
  // of its reads are unfinished; a store given `yield_to` keeps at most
  // `yield_depth` operations in flight while that count is above zero, so a
  // read on the critical path waits behind little of its I/O.
  std::shared_ptr<std::atomic<int>> count_reads;
  std::shared_ptr<const std::atomic<int>> yield_to;
  unsigned yield_depth = 2;
};

// A named byte range of the store. Cheap to copy; valid for its store's life.
struct Region {
  uint32_t id = UINT32_MAX;
  uint64_t offset = 0;  // logical offset (4096-aligned)
  uint64_t bytes = 0;
  bool valid() const { return id != UINT32_MAX; }
};

// Handle of one asynchronous request; wait for each exactly once (or wait_all).
struct Ticket {
  uint64_t id = 0;
};

struct StoreCounters {
  uint64_t bytes_read = 0;     // bytes the device moved (includes the padding of
  uint64_t bytes_written = 0;  //   a region's last page in direct mode)
  uint64_t read_ops = 0;       // completed io_uring operations, resubmissions included
  uint64_t write_ops = 0;
  double busy_seconds = 0;     // wall time with at least one operation in flight
  unsigned peak_in_flight = 0; // most operations in flight at once
  double wait_seconds = 0;     // time callers spent blocked in wait()/wait_all()
};

namespace detail {
struct Core;
}

// Zero-filled host memory, 4096-aligned, size rounded up to 4096. Move-only.
// If registered with a store, it unregisters itself when destroyed (it may
// outlive the store).
class AlignedBuffer {
 public:
  AlignedBuffer() = default;
  explicit AlignedBuffer(size_t bytes);
  ~AlignedBuffer();
  AlignedBuffer(AlignedBuffer&& o) noexcept;
  AlignedBuffer& operator=(AlignedBuffer&& o) noexcept;
  AlignedBuffer(const AlignedBuffer&) = delete;
  AlignedBuffer& operator=(const AlignedBuffer&) = delete;

  void* data() const { return p_; }
  size_t size() const { return n_; }
  bool registered() const { return !slots_.empty(); }

 private:
  friend struct detail::Core;
  friend class TensorStore;
  void release();
  void* p_ = nullptr;
  size_t n_ = 0;
  std::weak_ptr<detail::Core> owner_;
  std::vector<unsigned> slots_;
};

class TensorStore {
 public:
  static constexpr uint64_t kAll = ~uint64_t(0);

  // Opens or creates DIR/fuyou.store in every directory (locked against other
  // processes). Fails with one line naming the directory or file at fault.
  explicit TensorStore(const StoreOptions& opt);
  // Waits for every request still in flight (errors are dropped: wait first).
  ~TensorStore();
  TensorStore(TensorStore&&) noexcept;
  TensorStore& operator=(TensorStore&&) noexcept;

  // A new region of `bytes` bytes; names are unique.
  Region allocate(const std::string& name, uint64_t bytes);
  Region find(const std::string& name) const;  // fails if absent
  bool contains(const std::string& name) const;
  std::string name(const Region& r) const;
  // False after a failed write, until a write of the whole region succeeds.
  bool region_valid(const Region& r) const;

  // Moves bytes [offset, offset + bytes) of the region to/from host.
  Ticket read(const Region& r, void* host, uint64_t offset = 0, uint64_t bytes = kAll);
  Ticket write(const Region& r, const void* host, uint64_t offset = 0, uint64_t bytes = kAll);
  // Blocks until the request is done; throws its error. Returns the request's
  // place in the store's completion order (1, 2, ...; for tests and traces);
  // 0 for a ticket already consumed by wait_all().
  uint64_t wait(Ticket t);
  bool ready(Ticket t) const;  // done (successfully or not) without blocking
  // Waits for every outstanding request; throws the first error among them.
  void wait_all();

  void read_sync(const Region& r, void* host, uint64_t offset = 0, uint64_t bytes = kAll);
  void write_sync(const Region& r, const void* host, uint64_t offset = 0, uint64_t bytes = kAll);
  // wait_all(), then fsync every file.
  void sync();

  // A host buffer of at least `bytes`, registered when the limits allow.
  AlignedBuffer buffer(size_t bytes);
  // Registers an existing buffer; false when registration is off or refused.
  bool register_buffer(AlignedBuffer& b);

  StoreCounters counters() const;
  void reset_counters();
  const StoreOptions& options() const;
  const std::vector<std::string>& files() const;
  uint64_t allocated_bytes() const;  // end of the last region, logical

 private:
  std::shared_ptr<detail::Core> core_;
};

}  // namespace fy::store
