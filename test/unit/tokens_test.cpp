// TokenFile on small files written here: raw uint16 and llm.c headers, the
// window/batch contract, and one-line errors naming the file.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <vector>

#include "data/tokens.h"
#include "test_util.h"

namespace fyt {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "fy_tokens_" + std::to_string(::getpid()) + "_" + name;
}

void write_bytes(const std::string& path, const void* data, size_t n) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(static_cast<const char*>(data), std::streamsize(n));
}

std::string write_raw(const std::string& name, const std::vector<uint16_t>& toks) {
  std::string p = temp_path(name);
  write_bytes(p, toks.data(), toks.size() * 2);
  return p;
}

// llm.c's layout: uint16 tokens after magic 20240520 (GPT-2), uint32 after 20240801 (Llama 3).
template <class Tok>
std::string write_llmc(const std::string& name, const std::vector<Tok>& toks, int32_t count, int32_t version) {
  std::vector<int32_t> hdr(256, 0);
  hdr[0] = sizeof(Tok) == 2 ? 20240520 : 20240801;
  hdr[1] = version;
  hdr[2] = count;
  std::string p = temp_path(name);
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(hdr.data()), 1024);
  f.write(reinterpret_cast<const char*>(toks.data()), std::streamsize(toks.size() * sizeof(Tok)));
  return p;
}
std::string write_llmc(const std::string& name, const std::vector<uint16_t>& toks, int32_t count, int32_t version = 1) {
  return write_llmc<uint16_t>(name, toks, count, version);
}

std::vector<uint16_t> iota_tokens(int n) {
  std::vector<uint16_t> t(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) t[size_t(i)] = uint16_t(100 + i);
  return t;
}

// Checks the batch contract by hand for the given file contents.
template <class Tok> void check_batches(const fy::TokenFile& tf, const std::vector<Tok>& toks, int64_t B, int64_t T) {
  const int64_t W = (int64_t(toks.size()) - 1) / T;
  EXPECT_EQ(tf.windows(T), W);
  std::vector<int64_t> in(size_t(B * T)), tg(size_t(B * T));
  for (int64_t s = 0; s < 5; ++s) {
    tf.batch(s, B, T, in.data(), tg.data());
    for (int64_t b = 0; b < B; ++b) {
      int64_t k = (s * B + b) % W;
      for (int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[size_t(b * T + t)], toks[size_t(k * T + t)]) << "s" << s << " b" << b << " t" << t;
        ASSERT_EQ(tg[size_t(b * T + t)], toks[size_t(k * T + t + 1)]);
      }
    }
  }
}

TEST(TokenFile, RawWindows) {
  auto toks = iota_tokens(23);  // W = 22 / 4 = 5
  std::string p = write_raw("raw.bin", toks);
  fy::TokenFile tf(p, 1000);
  EXPECT_FALSE(tf.has_llmc_header());
  EXPECT_EQ(tf.ntokens(), 23);
  check_batches(tf, toks, 3, 4);
  // First batch spelled out: window 0 = tokens[0..5), window 1 = tokens[4..9).
  std::vector<int64_t> in(8), tg(8);
  tf.batch(0, 2, 4, in.data(), tg.data());
  EXPECT_EQ(in, (std::vector<int64_t>{100, 101, 102, 103, 104, 105, 106, 107}));
  EXPECT_EQ(tg, (std::vector<int64_t>{101, 102, 103, 104, 105, 106, 107, 108}));
  std::remove(p.c_str());
}

TEST(TokenFile, LlmcHeader) {
  auto toks = iota_tokens(17);
  std::string p = write_llmc("llmc.bin", toks, 17);
  fy::TokenFile tf(p, 200);
  EXPECT_TRUE(tf.has_llmc_header());
  EXPECT_EQ(tf.ntokens(), 17);
  EXPECT_EQ(tf.token_bytes(), 2);
  check_batches(tf, toks, 2, 3);
  std::remove(p.c_str());
}

// Llama 3's vocabulary (128,256) needs llm.c's uint32 layout: ids past
// 65,535 reach the batches whole, and the vocabulary check sees them.
TEST(TokenFile, LlmcUint32) {
  std::vector<uint32_t> toks(19);
  for (size_t i = 0; i < toks.size(); ++i) toks[i] = uint32_t(65530 + 7 * i);  // 65530 .. 65656
  std::string p = write_llmc<uint32_t>("llmc32.bin", toks, 19, 7);
  fy::TokenFile tf(p, 128256);
  EXPECT_TRUE(tf.has_llmc_header());
  EXPECT_EQ(tf.token_bytes(), 4);
  EXPECT_EQ(tf.ntokens(), 19);
  check_batches(tf, toks, 3, 4);
  std::string m = error_of([&] { fy::TokenFile t(p, 65600); });
  EXPECT_NE(m.find("token id 65600 at token offset 10 is >= vocabulary size 65600"), std::string::npos) << m;

  std::string version = write_llmc<uint32_t>("llmc32v1.bin", toks, 19, 1);
  m = error_of([&] { fy::TokenFile t(version); });
  EXPECT_NE(m.find("version 1 unsupported (want 7: uint32 tokens)"), std::string::npos) << m;
  std::string count = write_llmc<uint32_t>("llmc32n.bin", toks, 38, 7);  // read as if uint16
  m = error_of([&] { fy::TokenFile t(count); });
  EXPECT_NE(m.find("says 38 tokens but the file holds 76 bytes of uint32 tokens (19 tokens)"), std::string::npos) << m;
  for (const auto& f : {p, version, count}) std::remove(f.c_str());
}

TEST(TokenFile, Errors) {
  std::string missing = temp_path("does_not_exist.bin");
  std::string m = error_of([&] { fy::TokenFile tf(missing); });
  EXPECT_NE(m.find(missing), std::string::npos) << m;

  std::string empty = temp_path("empty.bin");
  write_bytes(empty, "", 0);
  m = error_of([&] { fy::TokenFile tf(empty); });
  EXPECT_NE(m.find("empty"), std::string::npos) << m;
  EXPECT_NE(m.find(empty), std::string::npos) << m;

  std::string shortp = write_raw("short.bin", iota_tokens(4));
  fy::TokenFile tf(shortp);
  std::vector<int64_t> in(4), tg(4);
  m = error_of([&] { tf.batch(0, 1, 4, in.data(), tg.data()); });
  EXPECT_NE(m.find("too short"), std::string::npos) << m;
  EXPECT_NE(m.find(shortp), std::string::npos) << m;
  EXPECT_NO_THROW(tf.batch(0, 1, 3, in.data(), tg.data()));

  // A file cut short while training (another process rewrote it): the
  // batch that reaches past its end fails with a line, not SIGBUS.
  std::string cut = write_raw("cut.bin", iota_tokens(4096));
  fy::TokenFile tc(cut);
  ASSERT_EQ(0, ::truncate(cut.c_str(), 1000));
  std::vector<int64_t> in8(8), tg8(8);
  EXPECT_NO_THROW(tc.batch(0, 1, 8, in8.data(), tg8.data()));  // window 0: still there
  EXPECT_EQ(tg8[7], 108);  // token 8
  m = error_of([&] { tc.batch(300, 1, 8, in8.data(), tg8.data()); });  // tokens 2400..2408
  EXPECT_NE(m.find("cut short"), std::string::npos) << m;
  EXPECT_NE(m.find(cut), std::string::npos) << m;

  auto toks = iota_tokens(10);
  toks[7] = 5000;
  std::string badtok = write_raw("badtok.bin", toks);
  m = error_of([&] { fy::TokenFile t2(badtok, 1000); });
  EXPECT_NE(m.find("5000"), std::string::npos) << m;
  EXPECT_NE(m.find("offset 7"), std::string::npos) << m;
  EXPECT_NO_THROW(fy::TokenFile(badtok, 5001));

  std::vector<int32_t> half(100, 0);
  half[0] = 20240520;
  std::string trunc = temp_path("trunc.bin");
  write_bytes(trunc, half.data(), 400);
  m = error_of([&] { fy::TokenFile t3(trunc); });
  EXPECT_NE(m.find("header truncated"), std::string::npos) << m;
  EXPECT_NE(m.find(trunc), std::string::npos) << m;

  std::string mismatch = write_llmc("mismatch.bin", iota_tokens(10), 12);
  m = error_of([&] { fy::TokenFile t4(mismatch); });
  EXPECT_NE(m.find("says 12 tokens"), std::string::npos) << m;

  std::string version = write_llmc("version.bin", iota_tokens(10), 10, 7);
  m = error_of([&] { fy::TokenFile t5(version); });
  EXPECT_NE(m.find("version 7"), std::string::npos) << m;

  for (const auto& p : {empty, shortp, badtok, trunc, mismatch, version}) std::remove(p.c_str());
}

}  // namespace
}  // namespace fyt
