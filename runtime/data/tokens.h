// Token files for training: raw little-endian uint16 tokens (nanoGPT .bin)
// or llm.c token files (256 x int32 header: magic, version, ntokens; the
// tokens follow), detected by the magic number: 20240520 version 1 holds
// uint16 tokens (GPT-2's vocabulary), 20240801 version 7 uint32 tokens
// (Llama 3's, and any vocabulary over 65,536).
#pragma once

#include <cstdint>
#include <string>

namespace fy {

class TokenFile {
 public:
  static constexpr int32_t kLlmcMagic = 20240520;    // uint16 tokens
  static constexpr int32_t kLlmcMagic32 = 20240801;  // uint32 tokens
  static constexpr int64_t kLlmcHeaderBytes = 256 * 4;

  // Opens the file and validates it; vocab > 0 checks every token id once.
  // Any problem fails with one line naming the file. Batches are read with
  // pread (not a mapping: an I/O error or a file cut short during the run
  // is then a message, not SIGBUS); batch() may be called from any thread.
  explicit TokenFile(const std::string& path, int64_t vocab = 0);
  ~TokenFile();
  TokenFile(const TokenFile&) = delete;
  TokenFile& operator=(const TokenFile&) = delete;

  int64_t ntokens() const { return ntokens_; }
  const std::string& path() const { return path_; }
  bool has_llmc_header() const { return llmc_; }
  int token_bytes() const { return width_; }  // 2 or 4
  // Number of windows of T+1 tokens: (ntokens - 1) / T.
  int64_t windows(int64_t T) const;
  // Fails unless the file holds at least one window of T+1 tokens.
  void require_window(int64_t T) const;
  // Step s, row b uses window k = (s*B + b) mod W, tokens[k*T, k*T+T+1):
  // inputs[b*T..] = first T, targets[b*T..] = last T.
  void batch(int64_t step, int64_t B, int64_t T, int64_t* inputs, int64_t* targets) const;

 private:
  // Reads tokens [first, first + n) into out, all of them or fails.
  void read_tokens(int64_t first, int64_t n, uint32_t* out) const;

  std::string path_;
  int fd_ = -1;
  int64_t body_ = 0;  // byte offset of token 0
  int64_t ntokens_ = 0;
  bool llmc_ = false;
  int width_ = 2;  // bytes a token
};

}  // namespace fy
