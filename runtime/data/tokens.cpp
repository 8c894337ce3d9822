#include "data/tokens.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/tensor.h"

namespace fy {

namespace {
[[noreturn]] void file_fail(const std::string& path, const std::string& what) {
  fail("token file '" + path + "': " + what);
}
}  // namespace

TokenFile::TokenFile(const std::string& path, int64_t vocab) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) file_fail(path, std::string("cannot open: ") + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    file_fail(path, std::string("cannot stat: ") + std::strerror(e));
  }
  const size_t bytes = size_t(st.st_size);
  if (bytes == 0) {
    ::close(fd);
    file_fail(path, "file is empty");
  }
  // Read-only private mapping: the data set may be larger than RAM and is
  // read sequentially, so let the page cache do the work.
  void* p = ::mmap(nullptr, bytes, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) file_fail(path, std::string("cannot mmap: ") + std::strerror(e));
  map_ = p;
  map_bytes_ = bytes;
  ::madvise(p, bytes, MADV_SEQUENTIAL);

  const unsigned char* base = static_cast<const unsigned char*>(p);
  int32_t magic = 0;
  if (bytes >= 4) std::memcpy(&magic, base, 4);
  try {
    if (magic == kLlmcMagic) {
      llmc_ = true;
      if (int64_t(bytes) < kLlmcHeaderBytes)
        file_fail(path, "llm.c header truncated: " + std::to_string(bytes) + " bytes, header needs " +
                            std::to_string(kLlmcHeaderBytes));
      int32_t hdr[3];
      std::memcpy(hdr, base, sizeof hdr);
      if (hdr[1] != 1)
        file_fail(path, "llm.c header version " + std::to_string(hdr[1]) + " unsupported (want 1: uint16 tokens)");
      if (hdr[2] < 0) file_fail(path, "llm.c header has negative token count " + std::to_string(hdr[2]));
      const int64_t body = int64_t(bytes) - kLlmcHeaderBytes;
      if (body != int64_t(hdr[2]) * 2)
        file_fail(path, "llm.c header says " + std::to_string(hdr[2]) + " tokens but the file holds " +
                            std::to_string(body) + " bytes of tokens (" + std::to_string(body / 2) + " tokens)");
      ntokens_ = hdr[2];
      tokens_ = reinterpret_cast<const uint16_t*>(base + kLlmcHeaderBytes);
    } else {
      if (bytes % 2 != 0) file_fail(path, "size " + std::to_string(bytes) + " is odd; expected uint16 tokens");
      ntokens_ = int64_t(bytes / 2);
      tokens_ = reinterpret_cast<const uint16_t*>(base);
    }
    if (ntokens_ == 0) file_fail(path, "holds no tokens");
    if (vocab > 0) {
      for (int64_t i = 0; i < ntokens_; ++i)
        if (tokens_[i] >= vocab)
          file_fail(path, "token id " + std::to_string(tokens_[i]) + " at token offset " + std::to_string(i) +
                              " is >= vocabulary size " + std::to_string(vocab));
    }
  } catch (...) {
    ::munmap(map_, map_bytes_);
    map_ = nullptr;
    throw;
  }
}

TokenFile::~TokenFile() {
  if (map_) ::munmap(map_, map_bytes_);
}

int64_t TokenFile::windows(int64_t T) const { return T > 0 ? (ntokens_ - 1) / T : 0; }

void TokenFile::require_window(int64_t T) const {
  if (T <= 0) file_fail(path_, "sequence length must be positive, got " + std::to_string(T));
  if (ntokens_ < T + 1)
    file_fail(path_, "too short: " + std::to_string(ntokens_) + " tokens, need at least " + std::to_string(T + 1) +
                         " for one window of T=" + std::to_string(T));
}

void TokenFile::batch(int64_t step, int64_t B, int64_t T, int64_t* inputs, int64_t* targets) const {
  require_window(T);
  if (step < 0 || B <= 0) file_fail(path_, "invalid batch request step=" + std::to_string(step) + " B=" + std::to_string(B));
  const int64_t W = windows(T);
  for (int64_t b = 0; b < B; ++b) {
    // 128-bit so s*B cannot overflow on very long runs.
    const int64_t k = int64_t((__int128(step) * B + b) % W);
    const uint16_t* w = tokens_ + k * T;
    for (int64_t t = 0; t < T; ++t) {
      inputs[b * T + t] = w[t];
      targets[b * T + t] = w[t + 1];
    }
  }
}

}  // namespace fy
