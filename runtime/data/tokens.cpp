#include "data/tokens.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "core/tensor.h"

namespace fy {

namespace {
[[noreturn]] void file_fail(const std::string& path, const std::string& what) {
  fail("token file '" + path + "': " + what);
}
}  // namespace

TokenFile::TokenFile(const std::string& path, int64_t vocab) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) file_fail(path, std::string("cannot open: ") + std::strerror(errno));
  try {
    struct stat st;
    if (::fstat(fd_, &st) != 0) file_fail(path, std::string("cannot stat: ") + std::strerror(errno));
    const int64_t bytes = int64_t(st.st_size);
    if (bytes == 0) file_fail(path, "file is empty");
    // The data set may be larger than RAM and is read in order.
    ::posix_fadvise(fd_, 0, 0, POSIX_FADV_SEQUENTIAL);
    int32_t hdr[3] = {0, 0, 0};
    if (bytes >= int64_t(sizeof hdr) && ::pread(fd_, hdr, sizeof hdr, 0) != ssize_t(sizeof hdr))
      file_fail(path, std::string("cannot read its first bytes: ") + std::strerror(errno));
    if (hdr[0] == kLlmcMagic || hdr[0] == kLlmcMagic32) {
      llmc_ = true;
      width_ = hdr[0] == kLlmcMagic ? 2 : 4;
      const int32_t version = width_ == 2 ? 1 : 7;
      if (bytes < kLlmcHeaderBytes)
        file_fail(path, "llm.c header truncated: " + std::to_string(bytes) + " bytes, header needs " +
                            std::to_string(kLlmcHeaderBytes));
      if (hdr[1] != version)
        file_fail(path, "llm.c header (magic " + std::to_string(hdr[0]) + ") version " + std::to_string(hdr[1]) +
                            " unsupported (want " + std::to_string(version) + ": uint" + std::to_string(8 * width_) +
                            " tokens)");
      if (hdr[2] < 0) file_fail(path, "llm.c header has negative token count " + std::to_string(hdr[2]));
      const int64_t body = bytes - kLlmcHeaderBytes;
      if (body != int64_t(hdr[2]) * width_)
        file_fail(path, "llm.c header says " + std::to_string(hdr[2]) + " tokens but the file holds " +
                            std::to_string(body) + " bytes of uint" + std::to_string(8 * width_) + " tokens (" +
                            std::to_string(body / width_) + " tokens)");
      ntokens_ = hdr[2];
      body_ = kLlmcHeaderBytes;
    } else {
      if (bytes % 2 != 0) file_fail(path, "size " + std::to_string(bytes) + " is odd; expected uint16 tokens");
      ntokens_ = bytes / 2;
    }
    if (ntokens_ == 0) file_fail(path, "holds no tokens");
    if (vocab > 0) {
      std::vector<uint32_t> buf(size_t(1) << 20);
      for (int64_t i = 0; i < ntokens_; i += int64_t(buf.size())) {
        const int64_t n = std::min<int64_t>(int64_t(buf.size()), ntokens_ - i);
        read_tokens(i, n, buf.data());
        for (int64_t k = 0; k < n; ++k)
          if (buf[size_t(k)] >= vocab)
            file_fail(path, "token id " + std::to_string(buf[size_t(k)]) + " at token offset " +
                                std::to_string(i + k) + " is >= vocabulary size " + std::to_string(vocab));
      }
    }
  } catch (...) {
    ::close(fd_);
    fd_ = -1;
    throw;
  }
}

TokenFile::~TokenFile() {
  if (fd_ >= 0) ::close(fd_);
}

void TokenFile::read_tokens(int64_t first, int64_t n, uint32_t* out) const {
  // uint16 tokens land in out's second half, then widen in place from the front.
  char* dst = reinterpret_cast<char*>(out) + (width_ == 2 ? n * 2 : 0);
  int64_t want = n * width_, off = body_ + first * width_;
  while (want > 0) {
    const ssize_t r = ::pread(fd_, dst, size_t(want), off);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) file_fail(path_, "read failed at byte " + std::to_string(off) + ": " + std::strerror(errno));
    if (r == 0) file_fail(path_, "ends at byte " + std::to_string(off) + ", before token " + std::to_string(first + n) +
                                     " (cut short while training?)");
    dst += r;
    off += r;
    want -= r;
  }
  if (width_ == 2) {
    // Token i's two bytes lie past out[i]'s four until it is written.
    const char* narrow = reinterpret_cast<const char*>(out) + n * 2;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t t;
      std::memcpy(&t, narrow + i * 2, 2);
      out[i] = t;
    }
  }
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
  std::vector<uint32_t> w(size_t(T + 1));
  for (int64_t b = 0; b < B; ++b) {
    // 128-bit so s*B cannot overflow on very long runs.
    const int64_t k = int64_t((__int128(step) * B + b) % W);
    read_tokens(k * T, T + 1, w.data());
    for (int64_t t = 0; t < T; ++t) {
      inputs[b * T + t] = w[t];
      targets[b * T + t] = w[t + 1];
    }
  }
}

}  // namespace fy
