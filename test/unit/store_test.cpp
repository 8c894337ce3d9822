// The io_uring tensor store against real files: striped round trips with
// random sizes (direct and buffered, registered and not), reopening, partial
// ranges, concurrency, the reads-first policy, and the errors: a missing or
// read-only directory, a truncated store file (short reads), a full
// filesystem and a file-size limit (short writes), with earlier regions intact.
#include <fcntl.h>
#include <liburing.h>
#include <linux/capability.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <filesystem>
#include <functional>
#include <mutex>
#include <regex>
#include <thread>

#include "exec/ssd_spill.h"
#include "store/store.h"
#include "test_util.h"

namespace fyt {
namespace {

using fy::store::AlignedBuffer;
using fy::store::Region;
using fy::store::StoreOptions;
using fy::store::TensorStore;
using fy::store::Ticket;

// A fresh directory under the test temp dir, removed (unmounted first if
// needed) at scope exit.
struct TempDir {
  std::string path;
  bool mounted = false;
  explicit TempDir(const std::string& tag) {
    std::string tmpl = ::testing::TempDir() + "fy_store_" + tag + "_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    path = buf.data();
  }
  ~TempDir() {
    if (mounted) ::umount2(path.c_str(), MNT_DETACH);
    ::chmod(path.c_str(), 0755);
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  // Mounts a tmpfs here; false where the sandbox does not allow it.
  bool mount_tmpfs(const std::string& opts, unsigned long flags = 0) {
    mounted = ::mount("tmpfs", path.c_str(), "tmpfs", flags, opts.c_str()) == 0;
    return mounted;
  }
};

uint64_t offset_in(const std::string& msg) {
  std::smatch m;
  std::regex re("offset ([0-9]+)");
  if (!std::regex_search(msg, m, re)) return UINT64_MAX;
  return std::stoull(m[1]);
}

// Fills with bytes that depend on the seed and the position.
void fill(void* p, size_t n, uint64_t seed) {
  auto* b = static_cast<unsigned char*>(p);
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<unsigned char>(x);
  }
}

bool same(const void* a, const void* b, size_t n) { return std::memcmp(a, b, n) == 0; }

// Runs f in a forked child (for process-wide limits and capabilities); f's
// return value is the exit code, and what it writes to the given fd comes back.
int in_child(const std::function<int(int)>& f, std::string* out) {
  int pfd[2];
  if (::pipe(pfd) != 0) return -1;
  pid_t pid = ::fork();
  if (pid == 0) {
    ::close(pfd[0]);
    int rc = 99;
    try {
      rc = f(pfd[1]);
    } catch (const std::exception& e) {
      std::string s = std::string("exception: ") + e.what();
      (void)!::write(pfd[1], s.data(), s.size());
    }
    ::_exit(rc);
  }
  ::close(pfd[1]);
  char buf[4096];
  ssize_t n;
  while ((n = ::read(pfd[0], buf, sizeof buf)) > 0) out->append(buf, size_t(n));
  ::close(pfd[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void send(int fd, const std::string& s) { (void)!::write(fd, s.data(), s.size()); }

// Clears capabilities from this process's effective set.
bool drop_caps(std::initializer_list<int> caps) {
  __user_cap_header_struct h{_LINUX_CAPABILITY_VERSION_3, 0};
  __user_cap_data_struct d[2];
  if (::syscall(SYS_capget, &h, d) != 0) return false;
  for (int c : caps) d[c / 32].effective &= ~(1u << (c % 32));
  return ::syscall(SYS_capset, &h, d) == 0;
}

class Store : public ::testing::Test {
 protected:
  void SetUp() override { FYT_SKIP_WITHOUT_IO_URING(); }
};

// ---- round trips ----------------------------------------------------------------

struct Mode {
  bool direct;
  bool reg;
};
void PrintTo(const Mode& m, std::ostream* os) {
  *os << (m.direct ? "direct" : "buffered") << (m.reg ? ", registered" : ", unregistered");
}

class StoreRoundTrip : public ::testing::TestWithParam<Mode> {
 protected:
  void SetUp() override { FYT_SKIP_WITHOUT_IO_URING(); }
};

TEST_P(StoreRoundTrip, ManyRandomRegionsStripedOverTwoDirs) {
  TempDir d0("rt0"), d1("rt1");
  StoreOptions opt;
  opt.dirs = {d0.path, d1.path};
  opt.block_bytes = 64 << 10;
  opt.queue_depth = 8;
  opt.direct = GetParam().direct;
  opt.register_buffers = GetParam().reg;
  TensorStore st(opt);

  Rng rng(7);
  const int kN = 120;
  std::vector<Region> regions;
  std::vector<AlignedBuffer> src, dst;
  for (int i = 0; i < kN; ++i) {
    uint64_t bytes;
    switch (i % 4) {
      case 0: bytes = uint64_t(rng.integer(1, 4096)); break;                // under a page
      case 1: bytes = uint64_t(rng.integer(1, 6)) * opt.block_bytes; break;  // whole blocks
      case 2: bytes = uint64_t(rng.integer(1, 64)) * 4096; break;            // whole pages
      default: bytes = uint64_t(rng.integer(4097, 400000)); break;           // anything
    }
    regions.push_back(st.allocate("r" + std::to_string(i), bytes));
    EXPECT_EQ(regions.back().offset % 4096, 0u);
    src.push_back(st.buffer(bytes));
    dst.push_back(st.buffer(bytes));
    fill(src.back().data(), bytes, uint64_t(i) + 1);
    std::memset(dst.back().data(), 0xAB, dst.back().size());
    if (!opt.register_buffers) {
      EXPECT_FALSE(src.back().registered());
    }
  }
  // Everything in flight at once, then everything back.
  for (int i = 0; i < kN; ++i) st.write(regions[size_t(i)], src[size_t(i)].data());
  st.wait_all();
  std::vector<Ticket> reads;
  for (int i = 0; i < kN; ++i) reads.push_back(st.read(regions[size_t(i)], dst[size_t(i)].data()));
  for (Ticket t : reads) st.wait(t);
  for (int i = 0; i < kN; ++i) {
    size_t n = regions[size_t(i)].bytes;
    ASSERT_TRUE(same(src[size_t(i)].data(), dst[size_t(i)].data(), n)) << "region " << i;
    // Bytes past the region in the host buffer are untouched (bounce page).
    auto* tail = static_cast<unsigned char*>(dst[size_t(i)].data());
    for (size_t k = n; k < dst[size_t(i)].size(); ++k) ASSERT_EQ(tail[k], 0xAB) << "region " << i;
  }

  // Striping: logical block b lives in file b % 2 at (b / 2) * block.
  const Region& r = regions[5];
  uint64_t L = r.offset + opt.block_bytes;  // somewhere inside region 5's second block
  L -= L % opt.block_bytes;
  ASSERT_LT(L, r.offset + r.bytes);
  uint64_t b = L / opt.block_bytes;
  std::vector<unsigned char> got(64);
  int fd = ::open(st.files()[b % 2].c_str(), O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::pread(fd, got.data(), got.size(), off_t((b / 2) * opt.block_bytes)), 64);
  ::close(fd);
  EXPECT_TRUE(same(got.data(), static_cast<char*>(src[5].data()) + (L - r.offset), 64));

  auto c = st.counters();
  EXPECT_GE(c.bytes_written, st.allocated_bytes() / 2);
  EXPECT_GE(c.bytes_read, st.allocated_bytes() / 2);
  EXPECT_GT(c.write_ops, 0u);
  EXPECT_GT(c.busy_seconds, 0.0);
}

INSTANTIATE_TEST_SUITE_P(Store, StoreRoundTrip,
                         ::testing::Values(Mode{true, true}, Mode{true, false}, Mode{false, true},
                                           Mode{false, false}),
                         [](const ::testing::TestParamInfo<Mode>& i) {
                           return std::string(i.param.direct ? "Direct" : "Buffered") +
                                  (i.param.reg ? "Registered" : "Unregistered");
                         });

// A tensor of more than 2^31 bytes (a 175B model's token embedding is 2.5 GB
// and its Adam moments as much) behind a 2 GiB region never written, so that
// its bytes lie at file offsets past 4 GiB: written in 1 GiB pieces (the
// largest block), read back whole through a buffer the store registered, and
// its last two pages alone after the store is reopened. The file is sparse
// where nothing was written.
TEST_F(Store, RegionPast2GiBAtFileOffsetsPast4GiB) {
  TempDir d("big");
  StoreOptions opt;
  opt.dirs = {d.path};
  opt.block_bytes = size_t(1) << 30;
  const uint64_t gap = uint64_t(2) << 30, n = (uint64_t(3) << 30) + 5;
  // Word k holds k * an odd constant: a piece out of place or lost shows.
  auto word = [](uint64_t k) { return k * 0x9E3779B97F4A7C15ull + 1; };
  const uint64_t words = n / 8;
  {
    TensorStore st(opt);
    st.allocate("gap", gap);
    Region r = st.allocate("big", n);
    ASSERT_EQ(r.offset, gap);
    AlignedBuffer b = st.buffer(n);
    auto* w = static_cast<uint64_t*>(b.data());
    for (uint64_t k = 0; k < words; ++k) w[k] = word(k);
    std::memcpy(static_cast<char*>(b.data()) + words * 8, "tail!", 5);
    st.write_sync(r, b.data());
    std::memset(b.data(), 0, b.size());
    st.read_sync(r, b.data());
    uint64_t bad = 0;
    for (uint64_t k = 0; k < words; ++k) bad += w[k] != word(k);
    EXPECT_EQ(bad, 0u) << "8-byte words of the region read back wrong";
    EXPECT_EQ(std::memcmp(static_cast<char*>(b.data()) + words * 8, "tail!", 5), 0);
    st.sync();
  }
  struct stat s {};
  ASSERT_EQ(::stat((d.path + "/" + opt.file_name).c_str(), &s), 0);
  EXPECT_GE(uint64_t(s.st_size), gap + n);
  EXPECT_LT(uint64_t(s.st_blocks) * 512, gap + n - (uint64_t(1) << 30)) << "the gap is not sparse";
  TensorStore st(opt);
  st.allocate("gap", gap);
  Region r = st.allocate("big", n);
  // The last two pages: a whole one and the partial one (the 5 bytes).
  const uint64_t from = ((n - 1) & ~uint64_t(fy::store::kPageBytes - 1)) - fy::store::kPageBytes;
  AlignedBuffer last(2 * fy::store::kPageBytes);
  st.wait(st.read(r, last.data(), from, n - from));
  EXPECT_EQ(std::memcmp(static_cast<char*>(last.data()) + (words * 8 - from), "tail!", 5), 0);
  uint64_t w0;
  std::memcpy(&w0, last.data(), 8);
  EXPECT_EQ(w0, word(from / 8));
}

// The busy hook (traces): periods follow one another without overlapping,
// their bytes add up to the counters, and their lengths to busy_seconds.
TEST_F(Store, BusyPeriodsAccountForEveryByteAndSecond) {
  TempDir d("busy");
  StoreOptions opt;
  opt.dirs = {d.path};
  opt.block_bytes = 64 << 10;
  struct Period {
    std::chrono::steady_clock::time_point b, e;
    uint64_t rd, wr;
  };
  std::mutex mu;
  std::vector<Period> periods;
  opt.on_busy = [&](auto b, auto e, uint64_t rd, uint64_t wr) {
    std::lock_guard<std::mutex> lk(mu);
    periods.push_back({b, e, rd, wr});
  };
  TensorStore st(opt);
  Region r = st.allocate("r", 1 << 20);
  AlignedBuffer buf(1 << 20);
  fill(buf.data(), 1 << 20, 3);
  for (int i = 0; i < 3; ++i) {  // three separate periods, then one with both directions
    st.write_sync(r, buf.data());
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  Ticket a = st.read(r, buf.data(), 0, 1 << 19), b = st.write(r, buf.data(), 1 << 19, 1 << 19);
  st.wait(a);
  st.wait(b);
  auto c = st.counters();
  std::lock_guard<std::mutex> lk(mu);
  ASSERT_GE(periods.size(), 4u);
  uint64_t rd = 0, wr = 0;
  double secs = 0;
  for (size_t i = 0; i < periods.size(); ++i) {
    EXPECT_LE(periods[i].b, periods[i].e);
    if (i) EXPECT_LE(periods[i - 1].e, periods[i].b) << i;
    rd += periods[i].rd;
    wr += periods[i].wr;
    secs += std::chrono::duration<double>(periods[i].e - periods[i].b).count();
  }
  EXPECT_EQ(rd, c.bytes_read);
  EXPECT_EQ(wr, c.bytes_written);
  EXPECT_EQ(wr, 3u * (1 << 20) + (1 << 19));
  EXPECT_NEAR(secs, c.busy_seconds, 1e-3 + 0.01 * secs);
}

TEST_F(Store, ReopenFindsTheSameBytesAndUnwrittenRegionsReadZero) {
  TempDir d0("re0"), d1("re1");
  StoreOptions opt;
  opt.dirs = {d0.path, d1.path};
  opt.block_bytes = 32 << 10;
  std::vector<uint64_t> sizes = {100, 70000, 32768, 5};
  {
    TensorStore st(opt);
    for (size_t i = 0; i < sizes.size(); ++i) {
      Region r = st.allocate("p" + std::to_string(i), sizes[i]);
      AlignedBuffer b(sizes[i]);
      fill(b.data(), sizes[i], i + 100);
      st.write_sync(r, b.data());
    }
    st.allocate("never_written", 50000);
    st.sync();
  }
  TensorStore st(opt);
  for (size_t i = 0; i < sizes.size(); ++i) {
    Region r = st.allocate("p" + std::to_string(i), sizes[i]);
    AlignedBuffer want(sizes[i]), got(sizes[i]);
    fill(want.data(), sizes[i], i + 100);
    st.read_sync(r, got.data());
    EXPECT_TRUE(same(want.data(), got.data(), sizes[i])) << "region " << i;
  }
  Region z = st.allocate("never_written", 50000);
  AlignedBuffer zb(50000), zeros(50000);
  std::memset(zb.data(), 1, zb.size());
  st.read_sync(z, zb.data());
  EXPECT_TRUE(same(zb.data(), zeros.data(), 50000));
  EXPECT_EQ(st.find("p1").bytes, 70000u);
  EXPECT_NE(error_of([&] { st.allocate("p1", 8); }).find("already allocated"), std::string::npos);
  EXPECT_NE(error_of([&] { st.find("nope"); }).find("no region named 'nope'"), std::string::npos);
}

// A run's scratch (remove_on_close) leaves no file behind, in every
// directory; a store that could not lock its file (another process's) never
// removes it.
TEST_F(Store, ScratchFilesGoWhenTheStoreCloses) {
  TempDir d0("scratch0"), d1("scratch1");
  StoreOptions opt;
  opt.dirs = {d0.path, d1.path};
  opt.truncate = opt.remove_on_close = true;
  {
    TensorStore st(opt);
    Region r = st.allocate("m", 3 << 20);
    AlignedBuffer b(r.bytes);
    fill(b.data(), r.bytes, 7);
    st.write_sync(r, b.data());
    EXPECT_TRUE(std::filesystem::exists(d0.path + "/fuyou.store"));
    EXPECT_TRUE(std::filesystem::exists(d1.path + "/fuyou.store"));
    // Another store on the same files cannot lock them, and leaves them be.
    EXPECT_NE(error_of([&] { TensorStore other(opt); }).find("in use by another process"), std::string::npos);
    EXPECT_TRUE(std::filesystem::exists(d0.path + "/fuyou.store"));
  }
  EXPECT_FALSE(std::filesystem::exists(d0.path + "/fuyou.store"));
  EXPECT_FALSE(std::filesystem::exists(d1.path + "/fuyou.store"));
}

TEST_F(Store, PartialRangesAndDirectModeRules) {
  TempDir d("part");
  StoreOptions opt;
  opt.dirs = {d.path};
  opt.block_bytes = 16 << 10;
  TensorStore st(opt);
  const size_t n = 10 * 4096 + 123;
  Region r = st.allocate("x", n);
  AlignedBuffer all(n), part(3 * 4096), got(n);
  fill(all.data(), n, 1);
  st.write_sync(r, all.data());
  // Overwrite pages 2..4 and check the whole region.
  fill(part.data(), part.size(), 2);
  st.write_sync(r, part.data(), 2 * 4096, 3 * 4096);
  std::memcpy(static_cast<char*>(all.data()) + 2 * 4096, part.data(), 3 * 4096);
  st.read_sync(r, got.data());
  EXPECT_TRUE(same(all.data(), got.data(), n));
  // A read of the unaligned tail only.
  AlignedBuffer tail(4096 + 123);
  st.read_sync(r, tail.data(), 9 * 4096);
  EXPECT_TRUE(same(tail.data(), static_cast<char*>(all.data()) + 9 * 4096, 4096 + 123));
  // A write ending at the region's end may be unaligned.
  fill(tail.data(), 4096 + 123, 3);
  st.write_sync(r, tail.data(), 9 * 4096);
  st.read_sync(r, got.data());
  EXPECT_TRUE(same(static_cast<char*>(got.data()) + 9 * 4096, tail.data(), 4096 + 123));

  std::vector<char> plain(8192 + 1);
  char* unaligned = plain.data() + (reinterpret_cast<uintptr_t>(plain.data()) % 4096 ? 0 : 1);
  EXPECT_NE(error_of([&] { st.read_sync(r, unaligned, 0, 4096); }).find("not 4096-aligned"), std::string::npos);
  EXPECT_NE(error_of([&] { st.read_sync(r, got.data(), 100, 4096); }).find("multiple of 4096"),
            std::string::npos);
  EXPECT_NE(error_of([&] { st.write_sync(r, got.data(), 0, 5000); }).find("partial write"), std::string::npos);
  EXPECT_NE(error_of([&] { st.read_sync(r, got.data(), 0, n + 1); }).find("runs past the end of region 'x'"),
            std::string::npos);
  EXPECT_NE(error_of([&] { st.read_sync(r, got.data(), n + 4096); }).find("past its end"), std::string::npos);
  Region foreign;
  EXPECT_NE(error_of([&] { st.read_sync(foreign, got.data()); }).find("does not belong"), std::string::npos);
  // Zero bytes is a no-op.
  st.read_sync(r, nullptr, 0, 0);
}

// A request that runs out of memory while it is split into pieces must leave
// none of them queued: its caller got no ticket and may reuse the buffer, so a
// piece issued later would write garbage to the store, or read into memory
// that is no longer the request's.
TEST_F(Store, ARequestThatCannotBeQueuedLeavesNothingBehind) {
  TempDir d("oom");
  StoreOptions opt;
  opt.dirs = {d.path};
  opt.block_bytes = 4096;  // a piece per page: 64 of them, and a bounce page for the tail
  TensorStore st(opt);
  const size_t n = 64 * 4096 + 100;
  Region r = st.allocate("x", n);
  AlignedBuffer want(n), buf(n), got(n);
  fill(want.data(), n, 1);
  st.write_sync(r, want.data());
  for (bool write : {true, false}) {
    int failed = 0;
    for (long k = 0;; ++k) {
      fill(buf.data(), n, 100 + k);
      Ticket t;
      bool threw = false;
      {
        FailNthAllocation oom(k);
        try {
          t = write ? st.write(r, buf.data()) : st.read(r, buf.data());
        } catch (const std::bad_alloc&) {
          threw = true;
        }
      }
      if (!threw) {  // k passed every allocation the request makes
        st.wait(t);
        if (write) st.write_sync(r, want.data());
        break;
      }
      ++failed;
      std::memset(buf.data(), 0xee, n);  // the caller's buffer, reused at once
      st.wait_all();
      st.read_sync(r, got.data());
      ASSERT_TRUE(same(got.data(), want.data(), n)) << (write ? "write" : "read") << " failing at allocation " << k;
      ASSERT_EQ(static_cast<unsigned char*>(buf.data())[0], 0xee) << "a read failing at allocation " << k;
      ASSERT_TRUE(same(buf.data(), static_cast<char*>(buf.data()) + 1, n - 1)) << k;
    }
    // Pieces made by earlier tries are reused, so later tries fail sooner;
    // a fresh store still fails at many points of the request.
    EXPECT_GT(failed, 1) << (write ? "write" : "read");
  }
}

// ---- concurrency and ordering ----------------------------------------------------

TEST_F(Store, ConcurrentReadsAndWrites) {
  TempDir d0("cc0"), d1("cc1");
  StoreOptions opt;
  opt.dirs = {d0.path, d1.path};
  opt.block_bytes = 128 << 10;
  opt.queue_depth = 16;
  TensorStore st(opt);
  const int kN = 48;
  const size_t kBytes = 300000;
  std::vector<Region> rs;
  std::vector<AlignedBuffer> bufs;
  for (int i = 0; i < kN; ++i) {
    rs.push_back(st.allocate("c" + std::to_string(i), kBytes));
    bufs.push_back(st.buffer(kBytes));
    fill(bufs.back().data(), kBytes, uint64_t(i) + 11);
  }
  // The first half is on disk before the threads start.
  for (int i = 0; i < kN / 2; ++i) st.write(rs[size_t(i)], bufs[size_t(i)].data());
  st.wait_all();
  // One thread writes the second half while another reads the first half back,
  // and this thread interleaves async reads and writes of its own.
  std::atomic<int> bad{0};
  std::thread writer([&] {
    for (int i = kN / 2; i < kN; ++i) st.wait(st.write(rs[size_t(i)], bufs[size_t(i)].data()));
  });
  std::thread reader([&] {
    for (int rep = 0; rep < 3; ++rep)
      for (int i = 0; i < kN / 2; ++i) {
        AlignedBuffer b(kBytes);
        st.read_sync(rs[size_t(i)], b.data());
        if (!same(b.data(), bufs[size_t(i)].data(), kBytes)) bad++;
      }
  });
  Region extra = st.allocate("extra", kBytes);
  AlignedBuffer eb = st.buffer(kBytes), back = st.buffer(kBytes);
  fill(eb.data(), kBytes, 999);
  for (int rep = 0; rep < 5; ++rep) {
    Ticket w = st.write(extra, eb.data());
    Ticket r = st.read(rs[size_t(rep)], back.data());
    st.wait(r);
    st.wait(w);
    if (!same(back.data(), bufs[size_t(rep)].data(), kBytes)) bad++;
  }
  writer.join();
  reader.join();
  EXPECT_EQ(bad.load(), 0);
  for (int i = 0; i < kN; ++i) {
    AlignedBuffer b(kBytes);
    st.read_sync(rs[size_t(i)], b.data());
    EXPECT_TRUE(same(b.data(), bufs[size_t(i)].data(), kBytes)) << "region " << i;
  }
}

TEST_F(Store, QueuedReadsGoAheadOfQueuedWrites) {
  TempDir d("order");
  StoreOptions opt;
  opt.dirs = {d.path};
  opt.block_bytes = 1 << 20;
  opt.queue_depth = 1;
  TensorStore st(opt);
  const int kW = 24;
  Region rr = st.allocate("read_me", 1 << 20);
  AlignedBuffer rb = st.buffer(1 << 20);
  st.write_sync(rr, rb.data());
  std::vector<Region> ws;
  for (int i = 0; i < kW; ++i) ws.push_back(st.allocate("w" + std::to_string(i), 1 << 20));
  AlignedBuffer wb = st.buffer(1 << 20);
  std::vector<Ticket> wt;
  for (int i = 0; i < kW; ++i) wt.push_back(st.write(ws[size_t(i)], wb.data()));
  Ticket rt = st.read(rr, rb.data());
  std::vector<uint64_t> wseq;
  uint64_t rseq = st.wait(rt);
  for (Ticket t : wt) wseq.push_back(st.wait(t));
  // With one operation in flight, the read goes right after the write (or
  // the few writes) that had been submitted before it was queued.
  EXPECT_LT(rseq, wseq.back());
  EXPECT_LE(rseq, wseq.front() + 3);
}

// Two stores on one device: while the critical one has a read unfinished,
// the other keeps at most yield_depth operations in flight.
TEST_F(Store, YieldsToAnotherStoresUnfinishedReads) {
  TempDir d("yield");
  auto reads = std::make_shared<std::atomic<int>>(0);
  StoreOptions ca, ya;
  ca.dirs = ya.dirs = {d.path};
  ca.file_name = "critical.store";
  ca.count_reads = reads;
  ya.file_name = "yielding.store";
  ya.block_bytes = 64 << 10;
  ya.queue_depth = 32;
  ya.yield_to = reads;
  TensorStore critical(ca), yielding(ya);
  Region cr = critical.allocate("act", 1 << 20), yr = yielding.allocate("state", 4 << 20);
  AlignedBuffer cb = critical.buffer(1 << 20), yb = yielding.buffer(4 << 20);
  fill(yb.data(), 4 << 20, 5);
  critical.write_sync(cr, cb.data());
  // No read pending: the 64 operations go out 32 at a time.
  yielding.write_sync(yr, yb.data());
  EXPECT_EQ(yielding.counters().peak_in_flight, 32u);
  // A read pending (held in the count as the critical store holds it while
  // its read is in flight): two at a time.
  reads->store(1);
  yielding.reset_counters();
  yielding.write_sync(yr, yb.data());
  EXPECT_LE(yielding.counters().peak_in_flight, ya.yield_depth);
  reads->store(0);
  // The critical store counts its reads until they finish, and only reads.
  Ticket t = critical.read(cr, cb.data());
  // Counted, or already finished (the count is read first: never both 0).
  const int counted = reads->load();
  EXPECT_GE(counted + int(critical.ready(t)), 1);
  critical.wait(t);
  Ticket w = critical.write(cr, cb.data());
  EXPECT_EQ(reads->load(), 0);
  critical.wait(w);
  EXPECT_EQ(reads->load(), 0);
}

// ---- errors ----------------------------------------------------------------------

TEST_F(Store, MissingDirectory) {
  StoreOptions opt;
  opt.dirs = {::testing::TempDir() + "fy_store_no_such_dir_" + std::to_string(::getpid())};
  std::string e = error_of([&] { TensorStore st(opt); });
  EXPECT_NE(e.find("store directory " + opt.dirs[0]), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos);

  opt.dirs = {};
  EXPECT_NE(error_of([&] { TensorStore st(opt); }).find("no store directory"), std::string::npos);
  TempDir d("twice");
  opt.dirs = {d.path, d.path + "/"};
  EXPECT_NE(error_of([&] { TensorStore st(opt); }).find("listed twice"), std::string::npos);
  opt.dirs = {d.path};
  opt.block_bytes = 1000;
  EXPECT_NE(error_of([&] { TensorStore st(opt); }).find("block size 1000"), std::string::npos);
}

TEST_F(Store, SecondOpenOfTheSameStoreIsRefused) {
  TempDir d("lock");
  StoreOptions opt;
  opt.dirs = {d.path};
  TensorStore a(opt);
  std::string e = error_of([&] { TensorStore b(opt); });
  EXPECT_NE(e.find("in use by another process"), std::string::npos) << e;
}

TEST_F(Store, ReadOnlyDirectoryByPermissions) {
  TempDir d("ro");
  ASSERT_EQ(::chmod(d.path.c_str(), 0555), 0);
  std::string out;
  // Root ignores directory permissions: drop the override capabilities in a
  // child process so that chmod 0555 means what it says.
  int rc = in_child(
      [&](int fd) {
        if (::geteuid() == 0 && !drop_caps({CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER})) return 3;
        StoreOptions opt;
        opt.dirs = {d.path};
        send(fd, error_of([&] { TensorStore st(opt); }));
        return 0;
      },
      &out);
  if (rc == 3) GTEST_SKIP() << "running as root and cannot drop CAP_DAC_OVERRIDE";
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("cannot open " + d.path + "/fuyou.store"), std::string::npos) << out;
  EXPECT_NE(out.find("Permission denied"), std::string::npos) << out;
}

TEST_F(Store, ReadOnlyFilesystem) {
  TempDir d("rofs");
  if (!d.mount_tmpfs("size=1m", MS_RDONLY))
    GTEST_SKIP() << "cannot mount a read-only tmpfs here (" << std::strerror(errno) << ")";
  StoreOptions opt;
  opt.dirs = {d.path};
  std::string e = error_of([&] { TensorStore st(opt); });
  EXPECT_NE(e.find("cannot open " + d.path + "/fuyou.store"), std::string::npos) << e;
  EXPECT_NE(e.find("Read-only file system"), std::string::npos) << e;
}

// The store file cut short behind the store's back: the read gets a short
// result, resubmits the remainder and then fails at the cut, naming it.
TEST_F(Store, TruncatedFileShortReadFailsAtTheCut) {
  for (bool direct : {false, true}) {
    TempDir d(direct ? "trd" : "trb");
    StoreOptions opt;
    opt.dirs = {d.path};
    opt.block_bytes = 64 << 10;
    opt.direct = direct;
    TensorStore st(opt);
    Region a = st.allocate("a", 100000);
    Region b = st.allocate("b", 3 * 65536);
    AlignedBuffer ab(a.bytes), bb(b.bytes);
    fill(ab.data(), a.bytes, 1);
    fill(bb.data(), b.bytes, 2);
    st.write_sync(a, ab.data());
    st.write_sync(b, bb.data());
    uint64_t cut = b.offset + 65536 + (direct ? 8192 : 5000);
    ASSERT_EQ(::truncate(st.files()[0].c_str(), off_t(cut)), 0);
    AlignedBuffer got(b.bytes);
    std::string e = error_of([&] { st.read_sync(b, got.data()); });
    EXPECT_NE(e.find("read of region 'b' failed at " + st.files()[0]), std::string::npos) << e;
    EXPECT_NE(e.find("unexpected end of file"), std::string::npos) << e;
    EXPECT_EQ(offset_in(e), cut) << e;
    // The bytes before the cut are fine.
    AlignedBuffer ag(a.bytes);
    st.read_sync(a, ag.data());
    EXPECT_TRUE(same(ag.data(), ab.data(), a.bytes));
    st.read_sync(b, got.data(), 0, 65536);
    EXPECT_TRUE(same(got.data(), bb.data(), 65536));
  }
}

// A full filesystem: the write that does not fit fails naming the file and
// offset; regions written before it read back intact; the failed region is
// marked invalid and reading it fails clearly.
TEST_F(Store, DiskFullOnSmallTmpfs) {
  TempDir d("full");
  if (!d.mount_tmpfs("size=2m"))
    GTEST_SKIP() << "cannot mount a tmpfs here (" << std::strerror(errno)
                 << "); Store.FileSizeLimit covers the short-write path";
  for (bool direct : {true, false}) {
    SCOPED_TRACE(direct ? "direct" : "buffered");
    StoreOptions opt;
    opt.dirs = {d.path};
    opt.block_bytes = 256 << 10;
    opt.direct = direct;
    opt.truncate = true;
    TensorStore st(opt);
    Region a = st.allocate("a", 300000), b = st.allocate("b", 500000), big = st.allocate("big", 4 << 20);
    AlignedBuffer ab(a.bytes), bb(b.bytes), gb = st.buffer(big.bytes);
    fill(ab.data(), a.bytes, 1);
    fill(bb.data(), b.bytes, 2);
    fill(gb.data(), big.bytes, 3);
    st.write_sync(a, ab.data());
    st.write_sync(b, bb.data());
    std::string e = error_of([&] { st.write_sync(big, gb.data()); });
    EXPECT_NE(e.find("write of region 'big' failed at " + st.files()[0] + " offset "), std::string::npos) << e;
    EXPECT_NE(e.find("No space left on device"), std::string::npos) << e;
    uint64_t off = offset_in(e);
    EXPECT_GE(off, big.offset) << e;
    EXPECT_LT(off, big.offset + big.bytes) << e;
    EXPECT_FALSE(st.region_valid(big));
    AlignedBuffer got(big.bytes);
    std::string re = error_of([&] { st.read_sync(big, got.data()); });
    EXPECT_NE(re.find("region 'big' is invalid: its last write failed"), std::string::npos) << re;
    st.read_sync(a, got.data());
    EXPECT_TRUE(same(got.data(), ab.data(), a.bytes));
    st.read_sync(b, got.data());
    EXPECT_TRUE(same(got.data(), bb.data(), b.bytes));
    // A later write of a region that fits still works.
    fill(ab.data(), a.bytes, 4);
    st.write_sync(a, ab.data());
    st.read_sync(a, got.data());
    EXPECT_TRUE(same(got.data(), ab.data(), a.bytes));
  }
}

// The same through RLIMIT_FSIZE (no mount needed): the write that crosses the
// limit is short, its remainder is resubmitted and fails with EFBIG exactly at
// the limit; earlier regions read back intact; rewriting the whole region once
// the limit is lifted makes it valid again.
TEST_F(Store, FileSizeLimitShortWriteThenError) {
  TempDir d("fsize");
  std::string out;
  int rc = in_child(
      [&](int fd) {
        ::signal(SIGXFSZ, SIG_IGN);
        for (bool direct : {true, false}) {
          StoreOptions opt;
          opt.dirs = {d.path};
          opt.block_bytes = 1 << 20;
          // Several operations fail (those past the limit at once); the error
          // reported is the one nearest the request's start.
          opt.queue_depth = direct ? 32 : 4;
          opt.direct = direct;
          opt.truncate = true;
          TensorStore st(opt);
          Region a = st.allocate("a", 1 << 20), big = st.allocate("big", 4 << 20);
          AlignedBuffer ab(a.bytes), gb(big.bytes), got(big.bytes);
          fill(ab.data(), a.bytes, 1);
          fill(gb.data(), big.bytes, 2);
          st.write_sync(a, ab.data());
          rlimit lim{2621440, RLIM_INFINITY};  // 2.5 MiB: inside big's second block
          if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
          send(fd, error_of([&] { st.write_sync(big, gb.data()); }) + "\n");
          if (st.region_valid(big)) return 5;
          send(fd, error_of([&] { st.read_sync(big, got.data()); }) + "\n");
          st.read_sync(a, got.data());
          if (!same(got.data(), ab.data(), a.bytes)) return 6;
          lim.rlim_cur = RLIM_INFINITY;
          if (::setrlimit(RLIMIT_FSIZE, &lim) != 0) return 4;
          st.write_sync(big, gb.data());
          if (!st.region_valid(big)) return 7;
          st.read_sync(big, got.data());
          if (!same(got.data(), gb.data(), big.bytes)) return 8;
        }
        return 0;
      },
      &out);
  ASSERT_EQ(rc, 0) << out;
  std::string path = d.path + "/fuyou.store";
  std::string want = "fy::store: write of region 'big' failed at " + path + " offset 2621440: File too large\n";
  std::string invalid = "fy::store: region 'big' is invalid: its last write failed (" + want.substr(0, want.size() - 1) + ")\n";
  EXPECT_EQ(out, want + invalid + want + invalid);
}

// Registration refused (no CAP_IPC_LOCK, tiny RLIMIT_MEMLOCK): buffers stay
// unregistered and everything works the same.
TEST_F(Store, UnregisteredFallbackUnderMemlockLimit) {
  TempDir d("memlock");
  std::string out;
  int rc = in_child(
      [&](int fd) {
        if (::geteuid() == 0 && !drop_caps({CAP_IPC_LOCK})) return 3;
        rlimit lim{64 << 10, 64 << 10};
        if (::setrlimit(RLIMIT_MEMLOCK, &lim) != 0) return 3;
        StoreOptions opt;
        opt.dirs = {d.path};
        opt.block_bytes = 256 << 10;
        TensorStore st(opt);
        Region r = st.allocate("r", (8 << 20) + 77);
        AlignedBuffer src = st.buffer(r.bytes), dst = st.buffer(r.bytes);
        send(fd, src.registered() ? "registered" : "unregistered");
        fill(src.data(), r.bytes, 5);
        st.write_sync(r, src.data());
        st.read_sync(r, dst.data());
        return same(src.data(), dst.data(), r.bytes) ? 0 : 6;
      },
      &out);
  if (rc == 3) GTEST_SKIP() << "cannot drop CAP_IPC_LOCK or lower RLIMIT_MEMLOCK";
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "unregistered");
}

TEST_F(Store, RegisteredBuffersOutliveTheStore) {
  TempDir d("outlive");
  AlignedBuffer keep;
  {
    StoreOptions opt;
    opt.dirs = {d.path};
    TensorStore st(opt);
    keep = st.buffer(1 << 20);
    Region r = st.allocate("r", 1 << 20);
    st.write_sync(r, keep.data());
    AlignedBuffer moved = std::move(keep);
    keep = std::move(moved);
  }
  std::memset(keep.data(), 1, keep.size());  // still mapped, unregistration is a no-op
  EXPECT_EQ(keep.size(), size_t(1) << 20);
}

// ---- SsdSpill: activations waiting on SSD (exec/ssd_spill.h) ----

StoreOptions spill_options(const std::string& dir) {
  StoreOptions so;
  so.dirs = {dir};
  so.file_name = "fuyou.activations";
  so.truncate = true;
  return so;
}

// Fills a page-rounded host buffer's first n floats with a pattern of `seed`.
void pattern(AlignedBuffer& b, int64_t n, float seed) {
  float* f = static_cast<float*>(b.data());
  for (int64_t i = 0; i < n; ++i) f[i] = seed + float(i) * 0.25f;
}

TEST(SsdSpill, BuffersComeBackBitExactThroughTheirOwnFile) {
  TempDir dir("spill");
  fy::SsdSpill spill(spill_options(dir.path), 3 * 4096);
  // 5000 bytes (not whole pages) at 0, 40 at 8192: the plan's page slots.
  const int64_t na = 1250, nb = 10;
  fy::View a = spill.place(0, fy::Shape{na}, fy::DType::F32), b = spill.place(8192, fy::Shape{nb}, fy::DType::F32);
  AlignedBuffer ha(na * 4), hb(nb * 4), ra(na * 4), rb(nb * 4);
  pattern(ha, na, 1.0f);
  pattern(hb, nb, -3.0f);
  auto view = [](AlignedBuffer& h, int64_t n) { return fy::View{h.data(), fy::Shape{n}, fy::DType::F32}; };
  spill.write(view(ha, na), a);
  spill.write(view(hb, nb), b);
  spill.settle(ha.data());
  spill.settle(hb.data());
  // The host copies may change once settled: what comes back is what was written.
  pattern(ha, na, 9.0f);
  spill.read(a, view(ra, na));
  spill.read(b, view(rb, nb));
  spill.settle_all();
  AlignedBuffer want(na * 4);
  pattern(want, na, 1.0f);
  EXPECT_EQ(std::memcmp(ra.data(), want.data(), na * 4), 0);
  pattern(want, nb, -3.0f);
  EXPECT_EQ(std::memcmp(rb.data(), want.data(), nb * 4), 0);
  EXPECT_TRUE(std::filesystem::exists(dir.path + "/fuyou.activations"));
  EXPECT_FALSE(std::filesystem::exists(dir.path + "/fuyou.store"));
  EXPECT_EQ(spill.counters().bytes_written, uint64_t(2 * 4096 + 4096));
}

TEST(SsdSpill, AReadRightAfterAWriteOfTheSamePagesSeesTheWrite) {
  TempDir dir("spill_raw");
  fy::SsdSpill spill(spill_options(dir.path), 64 * 4096);
  const int64_t n = 64 * 1024;  // 64 pages: several operations per request
  fy::View s = spill.place(0, fy::Shape{n}, fy::DType::F32);
  AlignedBuffer h(n * 4), r(n * 4), want(n * 4);
  for (int round = 0; round < 8; ++round) {
    pattern(h, n, float(round));
    spill.write(fy::View{h.data(), fy::Shape{n}, fy::DType::F32}, s);
    spill.read(s, fy::View{r.data(), fy::Shape{n}, fy::DType::F32});  // no settle in between
    spill.settle(r.data());
    pattern(want, n, float(round));
    ASSERT_EQ(std::memcmp(r.data(), want.data(), n * 4), 0) << "round " << round;
    spill.settle(h.data());
  }
}

TEST(SsdSpill, WritesInFlightFromTheirOwnBuffersAreWaitedForByTicket) {
  // fy-async-copies' write-behind: several writes in flight, each waited for
  // by its ticket, out of order, after which its host buffer is reused.
  TempDir dir("spill_tickets");
  const int64_t n = 16 * 1024, k = 4;
  fy::SsdSpill spill(spill_options(dir.path), k * n * 4);
  std::vector<AlignedBuffer> h;
  std::vector<fy::View> s;
  std::vector<int64_t> tickets;
  for (int64_t i = 0; i < k; ++i) {
    h.emplace_back(n * 4);
    pattern(h.back(), n, float(i));
    s.push_back(spill.place(i * n * 4, fy::Shape{n}, fy::DType::F32));
    tickets.push_back(spill.write(fy::View{h.back().data(), fy::Shape{n}, fy::DType::F32}, s.back()));
  }
  EXPECT_EQ(tickets, (std::vector<int64_t>{1, 2, 3, 4}));
  for (int64_t i : {2, 0, 3, 1}) {
    spill.wait(tickets[size_t(i)]);
    std::memset(h[size_t(i)].data(), 0xff, size_t(n) * 4);  // the write must have read it already
  }
  spill.wait(tickets[0]);  // again: done, returns at once
  AlignedBuffer r(n * 4), want(n * 4);
  for (int64_t i = 0; i < k; ++i) {
    spill.read(s[size_t(i)], fy::View{r.data(), fy::Shape{n}, fy::DType::F32});
    spill.settle(r.data());
    pattern(want, n, float(i));
    EXPECT_EQ(std::memcmp(r.data(), want.data(), size_t(n) * 4), 0) << "buffer " << i;
  }
  EXPECT_NE(error_of([&] { spill.wait(5); }).find("no write to SSD started with ticket 5"), std::string::npos);
  EXPECT_NE(error_of([&] { spill.wait(0); }), "");
}

TEST(SsdSpill, APlanThatOverlapsLiveBuffersIsRefused) {
  TempDir dir("spill_plan");
  fy::SsdSpill spill(spill_options(dir.path), 2 * 4096);
  fy::View a = spill.place(0, fy::Shape{1500}, fy::DType::F32);  // 6000 bytes: two pages
  EXPECT_NE(error_of([&] { spill.place(4096, fy::Shape{4}, fy::DType::F32); }), "");
  EXPECT_NE(error_of([&] { spill.place(8192, fy::Shape{4}, fy::DType::F32); }), "");  // past the end
  spill.release(a);
  EXPECT_EQ(error_of([&] { spill.place(4096, fy::Shape{4}, fy::DType::F32); }), "");
}

}  // namespace
}  // namespace fyt
