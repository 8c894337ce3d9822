// fuyou-bench-store: sequential write and read throughput of the tensor store.
//
//   fuyou-bench-store --size 1G --block 1M --qd 32 --dir /mnt/nvme0 [--dir DIR2 ...]
//                     [--direct 1] [--register 1] [--repeat 1] [--layout 1] [--keep 0]
//
// One region of --size bytes is written from and read into one host buffer
// (one request each, cut by the store into --block operations, --qd in
// flight). Before the timed write the region is written once untimed
// (--layout 1) so the timed write overwrites allocated blocks, as fio's does
// after it lays out its file. Prints one line per mode and repetition:
//   write 1.234 GB/s (1073741824 bytes in 0.870 s; block 1048576, qd 32, direct 1, registered 1, files 1)
// GB/s is 1e9 bytes per second. The store files are removed at exit unless --keep 1.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "store/store.h"

namespace {

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "fuyou-bench-store: error: %s\n", msg.c_str());
  std::exit(2);
}

uint64_t parse_size(const std::string& flag, const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || v < 0) usage_error("bad value '" + s + "' for " + flag);
  std::string suf(end);
  uint64_t mul = 1;
  if (suf == "" || suf == "B") mul = 1;
  else if (suf == "K" || suf == "k" || suf == "KiB") mul = 1ull << 10;
  else if (suf == "M" || suf == "m" || suf == "MiB") mul = 1ull << 20;
  else if (suf == "G" || suf == "g" || suf == "GiB") mul = 1ull << 30;
  else usage_error("bad size suffix '" + suf + "' for " + flag + " (use K, M or G)");
  return uint64_t(v * double(mul));
}

double now_s() {
  using namespace std::chrono;
  return duration<double>(steady_clock::now().time_since_epoch()).count();
}

// Distinct, non-zero bytes (a page of zeros could be special-cased somewhere).
void fill_pattern(const fy::store::AlignedBuffer& buf) {
  auto* w = static_cast<uint64_t*>(buf.data());
  for (size_t i = 0; i < buf.size() / 8; ++i) w[i] = 0x9E3779B97F4A7C15ull * (i + 1);
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t size = 1ull << 30;
  fy::store::StoreOptions opt;
  opt.truncate = true;
  int repeat = 1;
  bool layout = true, keep = false;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::printf(
          "usage: fuyou-bench-store --size SIZE --block SIZE --qd N --dir DIR [--dir DIR...]\n"
          "                         [--direct 0|1] [--register 0|1] [--repeat N] [--layout 0|1] [--keep 0|1]\n");
      return 0;
    }
    if (i + 1 >= argc) usage_error("missing value for " + a);
    std::string v = argv[++i];
    if (a == "--size") size = parse_size(a, v);
    else if (a == "--block") opt.block_bytes = parse_size(a, v);
    else if (a == "--qd") opt.queue_depth = unsigned(std::atoi(v.c_str()));
    else if (a == "--dir") {
      size_t start = 0;  // also accepts DIR,DIR
      for (;;) {
        size_t comma = v.find(',', start);
        opt.dirs.push_back(v.substr(start, comma - start));
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    } else if (a == "--direct") opt.direct = v != "0";
    else if (a == "--register") opt.register_buffers = v != "0";
    else if (a == "--repeat") repeat = std::max(1, std::atoi(v.c_str()));
    else if (a == "--layout") layout = v != "0";
    else if (a == "--keep") keep = v != "0";
    else usage_error("unknown flag " + a);
  }
  if (opt.dirs.empty()) usage_error("--dir is required");
  if (size == 0) usage_error("--size must be positive");

  try {
    std::vector<std::string> files;
    {
      fy::store::TensorStore st(opt);
      files = st.files();
      fy::store::Region r = st.allocate("bench", size);
      fy::store::AlignedBuffer buf = st.buffer(size);
      auto* w = static_cast<uint64_t*>(buf.data());
      fill_pattern(buf);
      if (layout) st.write_sync(r, buf.data());
      for (int rep = 0; rep < repeat; ++rep) {
        for (int mode = 0; mode < 2; ++mode) {
          bool wr = mode == 0;
          // Clear the buffer before a read so that the check below means something.
          if (!wr) std::memset(buf.data(), 0, buf.size());
          double t0 = now_s();
          if (wr) {
            fill_pattern(buf);
            t0 = now_s();
            st.write_sync(r, buf.data());
          } else {
            st.read_sync(r, buf.data());
          }
          double dt = now_s() - t0;
          std::printf("%s %.3f GB/s (%llu bytes in %.3f s; block %zu, qd %u, direct %d, registered %d, files %zu)\n",
                      wr ? "write" : "read", double(size) / dt / 1e9, (unsigned long long)size, dt,
                      opt.block_bytes, opt.queue_depth, int(opt.direct), int(buf.registered()),
                      opt.dirs.size());
          std::fflush(stdout);
        }
      }
      // The data read back must be what was written.
      for (size_t i = 0; i < size / 8; ++i)
        if (w[i] != 0x9E3779B97F4A7C15ull * (i + 1)) {
          std::fprintf(stderr, "fuyou-bench-store: error: read back wrong data at byte %zu\n", i * 8);
          return 1;
        }
    }
    if (!keep)
      for (auto& f : files) ::unlink(f.c_str());
  } catch (const fy::Error& e) {
    std::fprintf(stderr, "fuyou-bench-store: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
