// io_uring implementation of the tensor store (see store.h for the contract).
//
// One mutex guards everything but the completion queue. The caller's thread
// cuts requests into operations (Chunk), queues them and fills the submission
// queue up to queue_depth; the reaper thread waits on the completion queue,
// accounts each completion (resubmitting the remainder of short ones), refills
// the submission queue from the backlog (reads first) and wakes waiters.
#include "store/store.h"

#include <fcntl.h>
#include <liburing.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "core/tensor.h"

namespace fy::store {

namespace {

constexpr uint64_t kWakeTag = 1;            // user_data of the shutdown NOP
constexpr unsigned kBufferSlots = 1024;     // sparse registered-buffer table
constexpr size_t kMaxRegisterBytes = 1ull << 30;  // kernel limit per registered iovec

uint64_t round_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

std::string errno_text(int e) {
  char buf[256];
  // GNU strerror_r returns the message (maybe not in buf).
  return std::string(strerror_r(e, buf, sizeof buf));
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

void* map_pages(size_t bytes) {
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    fail("fy::store: out of memory allocating a " + std::to_string(bytes) + "-byte aligned buffer");
  return p;
}

}  // namespace

namespace detail {

// One io_uring operation: a contiguous piece of one file.
struct Chunk {
  uint64_t ticket = 0;
  unsigned file = 0;
  uint64_t file_off = 0;     // of the whole chunk
  uint64_t pos = 0;          // offset of the chunk inside its request
  char* io = nullptr;        // memory the kernel reads or writes
  uint32_t len = 0;          // bytes to move
  uint32_t done = 0;         // bytes already moved (short I/O)
  char* copy_to = nullptr;   // read through a bounce page: copy copy_len bytes here
  uint32_t copy_len = 0;
  int buf_index = -1;        // registered buffer slot, or -1
  bool write = false;
  bool bounce = false;       // io is a bounce page owned by the store
};

struct TicketState {
  uint32_t region = 0;
  bool write = false;
  bool whole = false;      // covers the whole region
  size_t pending = 0;      // chunks queued or in flight
  std::string error;       // error at the lowest position of the request
  uint64_t error_pos = UINT64_MAX;
  uint64_t seq = 0;        // completion order, set when pending reaches 0
};

struct RegionState {
  std::string name;
  uint64_t offset = 0, bytes = 0;
  bool invalid = false;
  std::string why;
};

struct Core : std::enable_shared_from_this<Core> {
  StoreOptions opt;
  std::vector<std::string> paths;
  std::vector<int> fds;
  std::vector<uint64_t> file_sizes;
  bool files_registered = false;

  io_uring ring{};
  bool ring_ok = false;
  std::thread reaper;

  mutable std::mutex mu;
  std::condition_variable cv;
  std::deque<Chunk*> rq, wq;
  unsigned inflight = 0;
  std::unordered_map<uint64_t, TicketState> tickets;
  size_t unfinished = 0;  // tickets with pending > 0
  int reads_counted = 0;  // this store's part of *opt.count_reads
  uint64_t next_ticket = 1, next_seq = 0;
  std::vector<RegionState> regions;
  std::unordered_map<std::string, uint32_t> by_name;
  uint64_t logical_end = 0;
  std::string fatal;  // the ring itself broke; every wait fails with this
  bool stopping = false;

  struct Reg {
    char* base;
    size_t len;
    unsigned slot;
  };
  bool reg_enabled = false;
  std::vector<bool> slot_used;
  std::vector<Reg> regs;  // sorted by base

  // Free lists keep room for every chunk and page ever made, so that
  // release() cannot fail (a failed submit undoes its work with it).
  std::vector<Chunk*> chunk_free;
  size_t chunks_made = 0;
  std::vector<char*> bounce_free;
  std::vector<char*> bounce_all;

  StoreCounters counters;
  double busy_start = 0;
  // The current busy period, for opt.on_busy.
  std::chrono::steady_clock::time_point busy_begin;
  uint64_t busy_read0 = 0, busy_written0 = 0;
  bool busy_open = false;  // closed by the reaper once nothing is in flight after a refill

  ~Core();
  void open();
  void reap_loop();

  // All below: caller holds mu.
  Chunk* new_chunk();
  void release(Chunk* c);
  char* new_bounce();
  int find_reg(const char* p, size_t n) const;
  // Queues a piece of a request, through `io` or (nullptr) a bounce page
  // of its own, which goes back with it.
  Chunk* add_chunk(uint64_t ticket, bool write, unsigned file, uint64_t foff, char* io, uint32_t len,
                   uint64_t pos);
  // After an error, the request goes on only below the failing position.
  static bool dropped(const Chunk* c, const TicketState& t) { return c->pos + c->done > t.error_pos; }
  void pump();
  void submit_all();
  void handle(const io_uring_cqe* cqe);
  void end_busy();  // inflight went to 0
  void chunk_failed(Chunk* c, TicketState& t, const std::string& what);
  void finish(TicketState& t);
  uint64_t submit(const Region& r, char* host, uint64_t offset, uint64_t bytes, bool write);
  const RegionState& region_of(const Region& r) const;
  void grow_files(uint64_t logical_end);
  void unregister(AlignedBuffer& b);
};

Core::~Core() {
  if (ring_ok) {
    {
      std::unique_lock<std::mutex> lk(mu);
      cv.wait(lk, [&] { return unfinished == 0 || !fatal.empty(); });
      stopping = true;
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      if (sqe) {
        io_uring_prep_nop(sqe);
        io_uring_sqe_set_data64(sqe, kWakeTag);
      }
      // Without the NOP the reaper stops at its next tick (reap_loop).
      if ((!sqe || io_uring_submit(&ring) < 0) && fatal.empty()) fatal = "fy::store: stopping";
    }
    if (reaper.joinable()) reaper.join();
    io_uring_queue_exit(&ring);
    // Reads a broken ring never finished must not hold other stores back.
    if (opt.count_reads && reads_counted) opt.count_reads->fetch_sub(reads_counted);
  }
  // Scratch goes while the lock is still held (every file in fds is locked
  // by this store; one that waits for it reopens the path once it is gone).
  if (opt.remove_on_close)
    for (size_t i = 0; i < fds.size(); ++i) ::unlink(paths[i].c_str());
  // The ring may hold references to the files for a while after it is torn
  // down; unlock explicitly so that the store can be reopened at once.
  for (int fd : fds)
    if (fd >= 0) {
      ::flock(fd, LOCK_UN);
      ::close(fd);
    }
  for (Chunk* c : chunk_free) delete c;
  for (char* b : bounce_all) std::free(b);
}

void Core::open() {
  if (opt.dirs.empty()) fail("fy::store: no store directory given");
  if (opt.block_bytes < kPageBytes || opt.block_bytes % kPageBytes || opt.block_bytes > (1u << 30))
    fail("fy::store: block size " + std::to_string(opt.block_bytes) +
         " must be a multiple of 4096 between 4096 and 1 GiB");
  if (opt.yield_depth < 1) fail("fy::store: yield depth must be at least 1");
  if (opt.queue_depth < 1 || opt.queue_depth > 4096)
    fail("fy::store: queue depth " + std::to_string(opt.queue_depth) + " must be between 1 and 4096");

  std::vector<std::pair<dev_t, ino_t>> seen;
  for (const std::string& d : opt.dirs) {
    struct stat st;
    if (::stat(d.c_str(), &st) != 0)
      fail("fy::store: store directory " + d + ": " + errno_text(errno));
    if (!S_ISDIR(st.st_mode)) fail("fy::store: store directory " + d + ": not a directory");
    for (auto& s : seen)
      if (s.first == st.st_dev && s.second == st.st_ino)
        fail("fy::store: store directory " + d + " is listed twice");
    seen.emplace_back(st.st_dev, st.st_ino);

    std::string path = d + (d.empty() || d.back() != '/' ? "/" : "") + opt.file_name;
    int flags = O_RDWR | O_CREAT | O_CLOEXEC | (opt.direct ? O_DIRECT : 0);
    for (int opened = 0;; ++opened) {
      int fd = ::open(path.c_str(), flags, 0644);
      if (fd < 0) {
        int e = errno;
        std::string msg = "fy::store: cannot open " + path + ": " + errno_text(e);
        if (e == EINVAL && opt.direct) msg += " (the filesystem refuses O_DIRECT; use buffered mode)";
        fail(msg);
      }
      // A process killed a moment ago may hold the lock a little longer: the
      // kernel tears its io_uring down (and drops the file) asynchronously.
      int locked = -1;
      for (int tries = 0; tries < 100 && (locked = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EWOULDBLOCK; ++tries)
        ::usleep(50 * 1000);
      if (locked != 0) {
        const int e = errno;
        ::close(fd);
        fail("fy::store: " + path + " is in use by another process (" + errno_text(e) + ")");
      }
      // The store that held it may have removed its scratch file meanwhile
      // (remove_on_close): then the path names another file, or none.
      struct stat mine, now;
      if (opened < 8 && ::fstat(fd, &mine) == 0 &&
          (::stat(path.c_str(), &now) != 0 || now.st_dev != mine.st_dev || now.st_ino != mine.st_ino)) {
        ::close(fd);
        continue;
      }
      fds.push_back(fd);
      paths.push_back(path);
      break;
    }
    const int fd = fds.back();
    if (opt.truncate && ::ftruncate(fd, 0) != 0)
      fail("fy::store: cannot truncate " + path + ": " + errno_text(errno));
    if (::fstat(fd, &st) != 0) fail("fy::store: cannot stat " + path + ": " + errno_text(errno));
    file_sizes.push_back(uint64_t(st.st_size));
  }

  int r = io_uring_queue_init(opt.queue_depth + 1, &ring, 0);
  if (r < 0)
    fail("fy::store: io_uring_queue_init failed: " + errno_text(-r) +
         (r == -EPERM || r == -ENOSYS ? " (io_uring is disabled here: seccomp or kernel.io_uring_disabled)" : ""));
  ring_ok = true;
  files_registered = io_uring_register_files(&ring, fds.data(), unsigned(fds.size())) == 0;
  if (opt.register_buffers) {
    reg_enabled = io_uring_register_buffers_sparse(&ring, kBufferSlots) == 0;
    if (reg_enabled) slot_used.assign(kBufferSlots, false);
  }
  reaper = std::thread([this] { reap_loop(); });
}

Chunk* Core::new_chunk() {
  if (chunk_free.empty()) {
    chunk_free.reserve(chunks_made + 1);
    Chunk* c = new Chunk();
    chunks_made++;
    return c;
  }
  Chunk* c = chunk_free.back();
  chunk_free.pop_back();
  *c = Chunk();
  return c;
}

void Core::release(Chunk* c) {
  if (c->bounce) bounce_free.push_back(c->io);
  chunk_free.push_back(c);
}

char* Core::new_bounce() {
  if (!bounce_free.empty()) {
    char* b = bounce_free.back();
    bounce_free.pop_back();
    return b;
  }
  bounce_all.reserve(bounce_all.size() + 1);
  bounce_free.reserve(bounce_all.size() + 1);
  char* b = static_cast<char*>(std::aligned_alloc(kPageBytes, kPageBytes));
  if (!b) fail("fy::store: out of memory allocating a bounce page");
  bounce_all.push_back(b);
  return b;
}

int Core::find_reg(const char* p, size_t n) const {
  auto it = std::upper_bound(regs.begin(), regs.end(), p,
                             [](const char* x, const Reg& r) { return x < r.base; });
  if (it == regs.begin()) return -1;
  --it;
  if (p >= it->base && p + n <= it->base + it->len) return int(it->slot);
  return -1;
}

Chunk* Core::add_chunk(uint64_t ticket, bool write, unsigned file, uint64_t foff, char* io, uint32_t len,
                       uint64_t pos) {
  Chunk* c = new_chunk();
  c->ticket = ticket;
  c->write = write;
  c->file = file;
  c->file_off = foff;
  c->io = io;
  c->len = len;
  c->pos = pos;
  try {
    if (!io) {
      c->io = new_bounce();
      c->bounce = true;
    }
    c->buf_index = reg_enabled ? find_reg(c->io, len) : -1;
    (write ? wq : rq).push_back(c);
  } catch (...) {
    release(c);  // with its page, if it got one
    throw;
  }
  tickets[ticket].pending++;
  return c;
}

const RegionState& Core::region_of(const Region& r) const {
  if (!r.valid() || r.id >= regions.size() || regions[r.id].offset != r.offset ||
      regions[r.id].bytes != r.bytes)
    fail("fy::store: region handle does not belong to this store");
  return regions[r.id];
}

uint64_t Core::submit(const Region& r, char* host, uint64_t offset, uint64_t bytes, bool write) {
  const RegionState& rs = region_of(r);
  const char* what = write ? "write" : "read";
  if (!fatal.empty()) fail(fatal);
  if (offset > rs.bytes)
    fail("fy::store: " + std::string(what) + " of region '" + rs.name + "' at offset " +
         std::to_string(offset) + " is past its end (" + std::to_string(rs.bytes) + " bytes)");
  if (bytes == TensorStore::kAll) bytes = rs.bytes - offset;
  if (bytes > rs.bytes - offset)
    fail("fy::store: " + std::string(what) + " of " + std::to_string(bytes) + " bytes at offset " +
         std::to_string(offset) + " runs past the end of region '" + rs.name + "' (" +
         std::to_string(rs.bytes) + " bytes)");
  if (bytes && !host) fail("fy::store: " + std::string(what) + " of region '" + rs.name + "' with a null buffer");
  if (opt.direct && bytes) {
    if (reinterpret_cast<uintptr_t>(host) % kPageBytes)
      fail("fy::store: " + std::string(what) + " of region '" + rs.name +
           "': host buffer is not 4096-aligned (required by O_DIRECT; use AlignedBuffer)");
    if (offset % kPageBytes)
      fail("fy::store: " + std::string(what) + " of region '" + rs.name + "' at offset " +
           std::to_string(offset) + ": offset must be a multiple of 4096 with O_DIRECT");
    if (write && bytes % kPageBytes && offset + bytes != rs.bytes)
      fail("fy::store: write of region '" + rs.name + "' of " + std::to_string(bytes) +
           " bytes at offset " + std::to_string(offset) +
           ": with O_DIRECT a partial write must be a multiple of 4096 bytes");
  }
  if (!write && rs.invalid)
    fail("fy::store: region '" + rs.name + "' is invalid: its last write failed (" + rs.why + ")");

  uint64_t id = next_ticket++;
  TicketState& t = tickets[id];
  t.region = r.id;
  t.write = write;
  t.whole = offset == 0 && bytes == rs.bytes;

  const uint64_t B = opt.block_bytes, nd = fds.size();
  const uint64_t start = rs.offset + offset;
  uint64_t L = start, rem = bytes;
  char* h = host;
  try {
    while (rem) {
      uint64_t b = L / B, within = L % B;
      uint64_t n = std::min(rem, B - within);
      unsigned file = unsigned(b % nd);
      uint64_t foff = (b / nd) * B + within;
      if (opt.direct && n % kPageBytes) {
        // Only a request's last piece can end off a page boundary: the aligned
        // part goes directly, the partial page through a bounce page.
        uint64_t al = n & ~uint64_t(kPageBytes - 1), tail = n - al;
        if (al) add_chunk(id, write, file, foff, h, uint32_t(al), L - start);
        Chunk* c = add_chunk(id, write, file, foff + al, nullptr, uint32_t(kPageBytes), L - start + al);
        if (write) {
          std::memcpy(c->io, h + al, tail);
          std::memset(c->io + tail, 0, kPageBytes - tail);
        } else {
          c->copy_to = h + al;
          c->copy_len = uint32_t(tail);
        }
      } else {
        add_chunk(id, write, file, foff, h, uint32_t(n), L - start);
      }
      L += n;
      h += n;
      rem -= n;
    }
  } catch (...) {
    // Out of memory part way: none of the request may reach the disk or the
    // buffer, since its caller gets no ticket and may reuse the buffer at
    // once. Its pieces are the newest in their queue (nothing was pumped).
    std::deque<Chunk*>& q = write ? wq : rq;
    while (!q.empty() && q.back()->ticket == id) {
      release(q.back());
      q.pop_back();
    }
    tickets.erase(id);
    throw;
  }
  if (t.pending == 0) {
    t.seq = ++next_seq;  // empty request: done at once
  } else {
    unfinished++;
    if (!write && opt.count_reads) {
      opt.count_reads->fetch_add(1);
      reads_counted++;
    }
    pump();
  }
  return id;
}

void Core::pump() {
  unsigned prepared = 0;
  const unsigned depth = opt.yield_to && opt.yield_to->load(std::memory_order_relaxed) > 0
                             ? std::min(opt.queue_depth, opt.yield_depth)
                             : opt.queue_depth;
  while (inflight < depth && (!rq.empty() || !wq.empty())) {
    std::deque<Chunk*>& q = rq.empty() ? wq : rq;
    Chunk* c = q.front();
    TicketState& t = tickets[c->ticket];
    if (dropped(c, t)) {  // its request already failed before this point
      q.pop_front();
      release(c);
      if (--t.pending == 0) finish(t);
      continue;
    }
    io_uring_sqe* sqe = io_uring_get_sqe(&ring);
    if (!sqe) break;
    q.pop_front();
    int fd = files_registered ? int(c->file) : fds[c->file];
    char* p = c->io + c->done;
    unsigned n = c->len - c->done;
    uint64_t off = c->file_off + c->done;
    if (c->buf_index >= 0) {
      if (c->write)
        io_uring_prep_write_fixed(sqe, fd, p, n, off, c->buf_index);
      else
        io_uring_prep_read_fixed(sqe, fd, p, n, off, c->buf_index);
    } else {
      if (c->write)
        io_uring_prep_write(sqe, fd, p, n, off);
      else
        io_uring_prep_read(sqe, fd, p, n, off);
    }
    if (files_registered) sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, c);
    counters.peak_in_flight = std::max(counters.peak_in_flight, inflight + 1);
    if (inflight++ == 0 && !busy_open) {
      busy_open = true;
      busy_start = now_s();
      busy_begin = std::chrono::steady_clock::now();
      busy_read0 = counters.bytes_read;
      busy_written0 = counters.bytes_written;
    }
    prepared++;
  }
  if (prepared) submit_all();
}

void Core::submit_all() {
  for (int tries = 0;; ++tries) {
    int r = io_uring_submit(&ring);
    if (r >= 0) return;
    if ((r == -EINTR || r == -EAGAIN || r == -EBUSY) && tries < 10000) {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      continue;
    }
    fatal = "fy::store: io_uring_submit failed: " + errno_text(-r);
    cv.notify_all();
    return;
  }
}

void Core::chunk_failed(Chunk* c, TicketState& t, const std::string& what) {
  uint64_t pos = c->pos + c->done;
  if (pos < t.error_pos) {  // keep the error nearest the request's start
    t.error_pos = pos;
    RegionState& rs = regions[t.region];
    t.error = "fy::store: " + std::string(c->write ? "write" : "read") + " of region '" + rs.name +
              "' failed at " + paths[c->file] + " offset " + std::to_string(c->file_off + c->done) +
              ": " + what;
    if (c->write) {
      rs.invalid = true;
      rs.why = t.error;
    }
  }
}

void Core::finish(TicketState& t) {
  t.seq = ++next_seq;
  unfinished--;
  if (!t.write && opt.count_reads) {
    opt.count_reads->fetch_sub(1);
    reads_counted--;
  }
  if (t.write && t.error.empty() && t.whole) {
    regions[t.region].invalid = false;
    regions[t.region].why.clear();
  }
}

void Core::handle(const io_uring_cqe* cqe) {
  Chunk* c = reinterpret_cast<Chunk*>(io_uring_cqe_get_data(cqe));
  int res = cqe->res;
  inflight--;
  TicketState& t = tickets[c->ticket];
  if (res == -EAGAIN || res == -EINTR) {  // transient: try again
    (c->write ? wq : rq).push_front(c);
    return;
  }
  if (res < 0) {
    chunk_failed(c, t, errno_text(-res));
  } else if (res == 0) {
    chunk_failed(c, t, c->write ? "the write made no progress"
                                : "unexpected end of file (the store file is shorter than its regions)");
  } else {
    c->done += uint32_t(res);
    if (c->write) {
      counters.bytes_written += uint64_t(res);
      counters.write_ops++;
    } else {
      counters.bytes_read += uint64_t(res);
      counters.read_ops++;
    }
    if (c->done < c->len) {  // short: resubmit the remainder, ahead of other work
      if (!dropped(c, t)) {
        (c->write ? wq : rq).push_front(c);
        return;
      }
    } else if (c->copy_to) {
      std::memcpy(c->copy_to, c->io, c->copy_len);
    }
  }
  release(c);
  if (--t.pending == 0) finish(t);
}

void Core::end_busy() {
  busy_open = false;
  counters.busy_seconds += now_s() - busy_start;
  if (opt.on_busy)
    opt.on_busy(busy_begin, std::chrono::steady_clock::now(), counters.bytes_read - busy_read0,
                counters.bytes_written - busy_written0);
}

void Core::reap_loop() {
  for (;;) {
    io_uring_cqe* cqe = nullptr;
    // Woken now and then: after a failed submit the ring may hold requests
    // (the stop's NOP among them) that never reach the kernel, and an owner
    // going away must not wait for them for ever. Only where the kernel
    // takes the timeout as an argument (5.11 on): older ones need a timeout
    // request in the submission queue, which is the submitter's.
    __kernel_timespec tick{0, 100 * 1000 * 1000};
    int r = (ring.features & IORING_FEAT_EXT_ARG) ? io_uring_wait_cqe_timeout(&ring, &cqe, &tick)
                                                  : io_uring_wait_cqe(&ring, &cqe);
    if (r == -EINTR) continue;
    if (r == -ETIME) {
      std::lock_guard<std::mutex> lk(mu);
      if (stopping && !fatal.empty()) return;
      continue;
    }
    std::lock_guard<std::mutex> lk(mu);
    if (r < 0) {
      fatal = "fy::store: waiting for io_uring completions failed: " + errno_text(-r);
      cv.notify_all();
      return;
    }
    bool wake = false;
    unsigned head, n = 0;
    io_uring_for_each_cqe(&ring, head, cqe) {
      if (io_uring_cqe_get_data64(cqe) == kWakeTag)
        wake = true;
      else
        handle(cqe);
      ++n;
    }
    io_uring_cq_advance(&ring, n);
    pump();
    if (inflight == 0 && busy_open) end_busy();
    cv.notify_all();
    if (wake && stopping) return;
  }
}

void Core::grow_files(uint64_t end) {
  const uint64_t B = opt.block_bytes, nd = fds.size();
  uint64_t full = end / B, rem = end % B;
  for (uint64_t d = 0; d < nd; ++d) {
    uint64_t size = (full / nd + (d < full % nd ? 1 : 0)) * B + (d == full % nd ? rem : 0);
    if (size > file_sizes[d]) {
      const off_t at = off_t(file_sizes[d]), more = off_t(size - file_sizes[d]);
      // Reserved blocks read as zeros, as a sparse file's; a filesystem
      // without fallocate gets the sparse file.
      int e = EOPNOTSUPP;
      if (opt.reserve) {
        do e = ::fallocate(fds[d], 0, at, more) != 0 ? errno : 0;
        while (e == EINTR);
      }
      if (e == EOPNOTSUPP || e == ENOSYS) e = ::ftruncate(fds[d], off_t(size)) != 0 ? errno : 0;
      if (e != 0)
        fail("fy::store: cannot grow " + paths[d] + " to " + std::to_string(size) + " bytes: " + errno_text(e));
      file_sizes[d] = size;
    }
  }
}

void Core::unregister(AlignedBuffer& b) {
  for (unsigned slot : b.slots_) {
    iovec iov{nullptr, 0};
    io_uring_register_buffers_update_tag(&ring, slot, &iov, nullptr, 1);
    slot_used[slot] = false;
    regs.erase(std::remove_if(regs.begin(), regs.end(), [&](const Reg& r) { return r.slot == slot; }),
               regs.end());
  }
  b.slots_.clear();
  b.owner_.reset();
}

}  // namespace detail

// ---- AlignedBuffer ------------------------------------------------------------

AlignedBuffer::AlignedBuffer(size_t bytes) {
  n_ = round_up(std::max<size_t>(bytes, 1), kPageBytes);
  p_ = map_pages(n_);
}

void AlignedBuffer::release() {
  if (auto core = owner_.lock()) {
    std::lock_guard<std::mutex> lk(core->mu);
    core->unregister(*this);
  }
  owner_.reset();
  slots_.clear();
  if (p_) ::munmap(p_, n_);
  p_ = nullptr;
  n_ = 0;
}

AlignedBuffer::~AlignedBuffer() { release(); }

AlignedBuffer::AlignedBuffer(AlignedBuffer&& o) noexcept
    : p_(o.p_), n_(o.n_), owner_(std::move(o.owner_)), slots_(std::move(o.slots_)) {
  o.p_ = nullptr;
  o.n_ = 0;
  o.slots_.clear();
}

AlignedBuffer& AlignedBuffer::operator=(AlignedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    p_ = o.p_;
    n_ = o.n_;
    owner_ = std::move(o.owner_);
    slots_ = std::move(o.slots_);
    o.p_ = nullptr;
    o.n_ = 0;
    o.slots_.clear();
  }
  return *this;
}

// ---- TensorStore --------------------------------------------------------------

TensorStore::TensorStore(const StoreOptions& opt) : core_(std::make_shared<detail::Core>()) {
  core_->opt = opt;
  core_->open();
}

TensorStore::~TensorStore() = default;
TensorStore::TensorStore(TensorStore&&) noexcept = default;
TensorStore& TensorStore::operator=(TensorStore&&) noexcept = default;

Region TensorStore::allocate(const std::string& name, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(core_->mu);
  if (core_->by_name.count(name)) fail("fy::store: region '" + name + "' is already allocated");
  uint64_t off = core_->logical_end;
  uint64_t end = off + round_up(bytes, kPageBytes);
  core_->grow_files(end);
  Region r;
  r.id = uint32_t(core_->regions.size());
  r.offset = off;
  r.bytes = bytes;
  detail::RegionState rs;
  rs.name = name;
  rs.offset = off;
  rs.bytes = bytes;
  core_->regions.push_back(rs);
  core_->by_name[name] = r.id;
  core_->logical_end = end;
  return r;
}

Region TensorStore::find(const std::string& name) const {
  std::lock_guard<std::mutex> lk(core_->mu);
  auto it = core_->by_name.find(name);
  if (it == core_->by_name.end()) fail("fy::store: no region named '" + name + "'");
  const detail::RegionState& rs = core_->regions[it->second];
  Region r;
  r.id = it->second;
  r.offset = rs.offset;
  r.bytes = rs.bytes;
  return r;
}

bool TensorStore::contains(const std::string& name) const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return core_->by_name.count(name) != 0;
}

std::string TensorStore::name(const Region& r) const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return core_->region_of(r).name;
}

bool TensorStore::region_valid(const Region& r) const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return !core_->region_of(r).invalid;
}

Ticket TensorStore::read(const Region& r, void* host, uint64_t offset, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(core_->mu);
  return Ticket{core_->submit(r, static_cast<char*>(host), offset, bytes, false)};
}

Ticket TensorStore::write(const Region& r, const void* host, uint64_t offset, uint64_t bytes) {
  std::lock_guard<std::mutex> lk(core_->mu);
  // The kernel only reads the buffer of a write.
  return Ticket{core_->submit(r, static_cast<char*>(const_cast<void*>(host)), offset, bytes, true)};
}

uint64_t TensorStore::wait(Ticket t) {
  detail::Core& c = *core_;
  std::unique_lock<std::mutex> lk(c.mu);
  if (!c.tickets.count(t.id)) {
    if (t.id != 0 && t.id < c.next_ticket) return 0;  // consumed by wait_all()
    fail("fy::store: wait on an unknown ticket");
  }
  double t0 = now_s();
  auto done = [&] {
    auto it = c.tickets.find(t.id);
    return it == c.tickets.end() || it->second.pending == 0 || !c.fatal.empty();
  };
  c.cv.wait(lk, done);
  c.counters.wait_seconds += now_s() - t0;
  auto it = c.tickets.find(t.id);
  if (it == c.tickets.end()) return 0;  // consumed by a concurrent wait_all()
  detail::TicketState& ts = it->second;
  if (ts.pending) fail(c.fatal);
  std::string err = std::move(ts.error);
  uint64_t seq = ts.seq;
  c.tickets.erase(t.id);
  if (!err.empty()) fail(err);
  return seq;
}

bool TensorStore::ready(Ticket t) const {
  std::lock_guard<std::mutex> lk(core_->mu);
  auto it = core_->tickets.find(t.id);
  return it == core_->tickets.end() || it->second.pending == 0;
}

void TensorStore::wait_all() {
  detail::Core& c = *core_;
  std::unique_lock<std::mutex> lk(c.mu);
  double t0 = now_s();
  c.cv.wait(lk, [&] { return c.unfinished == 0 || !c.fatal.empty(); });
  c.counters.wait_seconds += now_s() - t0;
  if (c.unfinished) fail(c.fatal);
  uint64_t first = 0;
  std::string err;
  for (auto& kv : c.tickets)
    if (!kv.second.error.empty() && (first == 0 || kv.first < first)) {
      first = kv.first;
      err = kv.second.error;
    }
  c.tickets.clear();
  if (!err.empty()) fail(err);
}

void TensorStore::read_sync(const Region& r, void* host, uint64_t offset, uint64_t bytes) {
  wait(read(r, host, offset, bytes));
}

void TensorStore::write_sync(const Region& r, const void* host, uint64_t offset, uint64_t bytes) {
  wait(write(r, host, offset, bytes));
}

void TensorStore::sync() {
  wait_all();
  std::lock_guard<std::mutex> lk(core_->mu);
  for (size_t i = 0; i < core_->fds.size(); ++i)
    if (::fsync(core_->fds[i]) != 0)
      fail("fy::store: fsync of " + core_->paths[i] + " failed: " + errno_text(errno));
}

AlignedBuffer TensorStore::buffer(size_t bytes) {
  AlignedBuffer b(bytes);
  register_buffer(b);
  return b;
}

bool TensorStore::register_buffer(AlignedBuffer& b) {
  detail::Core& c = *core_;
  std::lock_guard<std::mutex> lk(c.mu);
  if (b.registered()) return b.owner_.lock() == core_;
  if (!c.reg_enabled || !b.data()) return false;
  char* base = static_cast<char*>(b.data());
  std::vector<detail::Core::Reg> added;
  bool ok = true;
  for (size_t off = 0; off < b.size(); off += kMaxRegisterBytes) {
    auto it = std::find(c.slot_used.begin(), c.slot_used.end(), false);
    if (it == c.slot_used.end()) {
      ok = false;
      break;
    }
    unsigned slot = unsigned(it - c.slot_used.begin());
    iovec iov{base + off, std::min(kMaxRegisterBytes, b.size() - off)};
    int r = io_uring_register_buffers_update_tag(&c.ring, slot, &iov, nullptr, 1);
    if (r != 1) {  // typically ENOMEM: over RLIMIT_MEMLOCK
      ok = false;
      break;
    }
    c.slot_used[slot] = true;
    b.slots_.push_back(slot);
    added.push_back({base + off, iov.iov_len, slot});
  }
  b.owner_ = core_;
  if (!ok) {
    c.unregister(b);
    return false;
  }
  for (auto& r : added) c.regs.push_back(r);
  std::sort(c.regs.begin(), c.regs.end(),
            [](const detail::Core::Reg& x, const detail::Core::Reg& y) { return x.base < y.base; });
  return true;
}

StoreCounters TensorStore::counters() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  StoreCounters s = core_->counters;
  if (core_->busy_open) s.busy_seconds += now_s() - core_->busy_start;
  return s;
}

void TensorStore::reset_counters() {
  std::lock_guard<std::mutex> lk(core_->mu);
  core_->counters = StoreCounters();
  if (core_->busy_open) core_->busy_start = now_s();
}

const StoreOptions& TensorStore::options() const { return core_->opt; }
const std::vector<std::string>& TensorStore::files() const { return core_->paths; }

uint64_t TensorStore::allocated_bytes() const {
  std::lock_guard<std::mutex> lk(core_->mu);
  return core_->logical_end;
}

}  // namespace fy::store
