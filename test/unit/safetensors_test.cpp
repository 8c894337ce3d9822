// Safetensors round trip, format details checked on the raw bytes, and
// errors for missing, truncated and corrupt files.
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "io/crc32c.h"
#include "io/safetensors.h"
#include "test_util.h"

namespace fyt {
namespace {

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "fy_st_" + std::to_string(::getpid()) + "_" + name;
}

std::string slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

void dump(const std::string& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), std::streamsize(bytes.size()));
}

TEST(Safetensors, RoundTripAndLayout) {
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f, 7.0f, -8.5f};
  std::vector<int64_t> steps = {42};
  std::vector<float> scalar = {9.0f};
  std::string p = temp_path("rt.safetensors");
  fy::write_safetensors(p, {{"z.weight", fy::DType::F32, {2, 3}, w.data()},
                            {"a.step", fy::DType::I64, {1}, steps.data()},
                            {"m.scalar", fy::DType::F32, {}, scalar.data()}});
  auto t = fy::read_safetensors(p);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t["z.weight"].dtype, fy::DType::F32);
  EXPECT_EQ(t["z.weight"].shape, (std::vector<int64_t>{2, 3}));
  ASSERT_EQ(t["z.weight"].bytes.size(), 24u);
  EXPECT_EQ(0, std::memcmp(t["z.weight"].bytes.data(), w.data(), 24));
  EXPECT_EQ(t["a.step"].dtype, fy::DType::I64);
  EXPECT_EQ(*reinterpret_cast<const int64_t*>(t["a.step"].bytes.data()), 42);
  EXPECT_TRUE(t["m.scalar"].shape.empty());
  EXPECT_EQ(t["m.scalar"].view().as<float>()[0], 9.0f);

  // Raw layout: LE header length, JSON with sorted names, 8-byte aligned data,
  // data in name order.
  std::string raw = slurp(p);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(static_cast<unsigned char>(raw[size_t(i)])) << (8 * i);
  EXPECT_EQ(hlen % 8, 0u);
  std::string hdr = raw.substr(8, size_t(hlen));
  EXPECT_LT(hdr.find("\"a.step\""), hdr.find("\"m.scalar\""));
  EXPECT_LT(hdr.find("\"m.scalar\""), hdr.find("\"z.weight\""));
  EXPECT_NE(hdr.find("\"dtype\":\"I64\""), std::string::npos);
  EXPECT_EQ(raw.size(), 8 + hlen + 8 + 4 + 24);
  int64_t first;
  std::memcpy(&first, raw.data() + 8 + hlen, 8);
  EXPECT_EQ(first, 42);
  // No temporary left behind.
  EXPECT_FALSE(std::ifstream(p + ".tmp." + std::to_string(::getpid())).good());
  std::remove(p.c_str());
}

// A tensor of more than 2^31 bytes and elements (a 175B model's token
// embedding is 2.5 GB), and one after it at a file offset past 4 GiB: written,
// listed, checksummed and read back (4 GiB of memory at a time).
TEST(Safetensors, TensorsPast2And4GiB) {
  const int64_t n = (int64_t(4) << 30) + 5;
  const std::string p = temp_path("big.safetensors");
  {
    std::vector<uint8_t> big(size_t(n), 0);
    for (int64_t k : {int64_t(0), int64_t(1) << 31, (int64_t(1) << 32) - 1, n - 1}) big[size_t(k)] = uint8_t(k % 251 + 1);
    const float tail[3] = {1.5f, -2.0f, 3.25f};
    fy::write_safetensors(p, {{"a_big", fy::DType::U8, {n}, big.data(), {}}, {"b_tail", fy::DType::F32, {3}, tail, {}}});
  }
  const std::vector<fy::StoredTensor> listed = fy::list_safetensors(p);
  ASSERT_EQ(listed.size(), 2u);
  EXPECT_EQ(listed[0].nbytes, uint64_t(n));
  EXPECT_GT(listed[1].offset, uint64_t(1) << 32);
  std::vector<uint8_t> back;
  float tail[3] = {0, 0, 0};
  fy::read_safetensors_into(p, [&](const std::string& name, fy::DType, const std::vector<int64_t>& shape) -> void* {
    if (name == "b_tail") return tail;
    back.resize(size_t(shape[0]));
    return back.data();  // (its checksum is checked as it is read)
  });
  ASSERT_EQ(int64_t(back.size()), n);
  for (int64_t k : {int64_t(0), int64_t(1) << 31, (int64_t(1) << 32) - 1, n - 1})
    EXPECT_EQ(back[size_t(k)], uint8_t(k % 251 + 1)) << "at " << k;
  EXPECT_EQ(back[size_t(1) << 30], 0);
  EXPECT_EQ(tail[2], 3.25f);
  std::remove(p.c_str());
}

TEST(Safetensors, ReadsForeignHeaderWithMetadata) {
  // As written by the Python library: __metadata__ first, spaces as padding.
  std::string hdr =
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  while ((hdr.size() + 8) % 8) hdr += ' ';
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[size_t(i)] = char((hdr.size() >> (8 * i)) & 0xff);
  float vals[2] = {0.25f, -1.0f};
  bytes += hdr + std::string(reinterpret_cast<const char*>(vals), 8);
  std::string p = temp_path("foreign.safetensors");
  dump(p, bytes);
  auto t = fy::read_safetensors(p);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t["b"].view().as<float>()[1], -1.0f);
  std::remove(p.c_str());
}

TEST(Crc32c, PublishedCheckValues) {
  // The check value of the CRC catalogues and RFC 3720's (iSCSI) appendix B.4.
  const std::string digits = "123456789";
  std::vector<unsigned char> zeros(32, 0), ones(32, 0xff), up(32);
  for (int i = 0; i < 32; ++i) up[size_t(i)] = static_cast<unsigned char>(i);
  for (auto* crc : {&fy::crc32c, &fy::crc32c_portable}) {
    EXPECT_EQ(crc(0, digits.data(), digits.size()), 0xe3069283u);
    EXPECT_EQ(crc(0, zeros.data(), 32), 0x8a9136aau);
    EXPECT_EQ(crc(0, ones.data(), 32), 0x62a8ab43u);
    EXPECT_EQ(crc(0, up.data(), 32), 0x46dd794eu);
    EXPECT_EQ(crc(0, nullptr, 0), 0u);
  }
}

TEST(Crc32c, InstructionMatchesTableAtEveryLengthAndOffset) {
  std::mt19937 rng(7);
  std::vector<unsigned char> buf(4096 + 16);
  for (auto& b : buf) b = static_cast<unsigned char>(rng());
  for (size_t off = 0; off < 9; ++off)
    for (size_t n : {size_t(1), size_t(7), size_t(8), size_t(9), size_t(63), size_t(4096)}) {
      const uint32_t want = fy::crc32c_portable(0, buf.data() + off, n);
      EXPECT_EQ(fy::crc32c(0, buf.data() + off, n), want) << off << " " << n;
      // Continuing from a previous value is the same as one pass.
      EXPECT_EQ(fy::crc32c(fy::crc32c(0, buf.data() + off, n / 3), buf.data() + off + n / 3, n - n / 3), want);
    }
}

TEST(Safetensors, EveryTensorCarriesItsChecksumAndADamagedOneFails) {
  const std::string digits = "123456789";
  std::vector<float> w(1000, 0.5f);
  std::string p = temp_path("crc.safetensors");
  fy::write_safetensors(p, {{"digits", fy::DType::U8, {9}, digits.data()},
                            {"w", fy::DType::F32, {1000}, nullptr,
                             [&](void* to) { std::memcpy(to, w.data(), w.size() * 4); }}});
  const std::string raw = slurp(p);
  EXPECT_NE(raw.find("\"__metadata__\":{\"crc32c/digits\":\"e3069283\""), std::string::npos) << raw.substr(0, 200);
  EXPECT_EQ(fy::read_safetensors(p).size(), 2u);
  uint64_t hlen = 0;
  for (int i = 0; i < 8; ++i) hlen |= uint64_t(static_cast<unsigned char>(raw[size_t(i)])) << (8 * i);

  // One bit flipped in the middle of w's data.
  std::string bad = raw;
  bad[size_t(8 + hlen + 9 + 2000)] ^= 0x10;
  dump(p, bad);
  std::string m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("tensor 'w' is damaged: its bytes have CRC-32C"), std::string::npos) << m;
  EXPECT_NE(m.find(p), std::string::npos) << m;
  // A tensor the reader skips is not read, so not checked: the rest loads.
  std::string got(9, '\0');
  fy::read_safetensors_into(p, [&](const std::string& name, fy::DType, const std::vector<int64_t>&) -> void* {
    return name == "digits" ? &got[0] : nullptr;
  });
  EXPECT_EQ(got, digits);

  // A damaged checksum, or one that is not hex, or one for a tensor the file lacks.
  const size_t at = raw.find("e3069283");
  bad = raw;
  bad[at] = 'f';
  dump(p, bad);
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("tensor 'digits' is damaged"), std::string::npos) << m;
  bad[at] = 'g';
  dump(p, bad);
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("corrupt header: bad checksum entry for tensor 'digits'"), std::string::npos) << m;
  {
    std::string hdr = raw.substr(8, size_t(hlen));
    hdr.insert(hdr.find("\"crc32c/digits\""), "\"crc32c/v\":\"00000000\",");
    while ((8 + hdr.size()) % 8) hdr += ' ';
    std::string len(8, '\0');
    for (int k = 0; k < 8; ++k) len[size_t(k)] = char((hdr.size() >> (8 * k)) & 0xff);
    dump(p, len + hdr + raw.substr(8 + size_t(hlen)));
  }
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("a checksum names tensor 'v', which it lacks"), std::string::npos) << m;
  // A damaged key leaves a tensor without one: not a way around the check.
  bad = raw;
  bad.replace(raw.find("crc32c/w\""), 9, "crc32x/w\"");
  dump(p, bad);
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("corrupt header: tensor 'w' has no checksum"), std::string::npos) << m;
  std::remove(p.c_str());
}

TEST(Safetensors, Errors) {
  std::string missing = temp_path("missing.safetensors");
  std::string m = error_of([&] { fy::read_safetensors(missing); });
  EXPECT_NE(m.find(missing), std::string::npos) << m;

  std::vector<float> w(100, 1.0f);
  std::string p = temp_path("trunc.safetensors");
  fy::write_safetensors(p, {{"w", fy::DType::F32, {100}, w.data()}});
  std::string raw = slurp(p);
  dump(p, raw.substr(0, raw.size() - 10));
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;
  EXPECT_NE(m.find(p), std::string::npos) << m;

  dump(p, raw.substr(0, 5));
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;

  dump(p, raw.substr(0, 20));  // header cut in the middle
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("truncated"), std::string::npos) << m;

  std::string corrupt = raw;
  corrupt[8] = '[';  // JSON no longer an object / malformed
  dump(p, corrupt);
  m = error_of([&] { fy::read_safetensors(p); });
  EXPECT_NE(m.find("corrupt"), std::string::npos) << m;
  EXPECT_NE(m.find(p), std::string::npos) << m;

  // A repeated tensor name in a header (no writer makes one) is corrupt.
  {
    const std::string hdr =
        R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    std::string bytes(8, '\0');
    for (int k = 0; k < 8; ++k) bytes[size_t(k)] = char((hdr.size() >> (8 * k)) & 0xff);
    dump(p, bytes + hdr + std::string(4, '\0'));
    m = error_of([&] { fy::read_safetensors(p); });
    EXPECT_NE(m.find("duplicate key 'w'"), std::string::npos) << m;
    EXPECT_NE(m.find(p), std::string::npos) << m;
  }

  // A damaged header length in a big file (sparse here) is refused before
  // anything that size is read.
  {
    std::string big = std::string("\x00\x00\x00\x0a\x00\x00\x00\x00", 8);  // 160 MiB
    dump(p, big);
    ASSERT_EQ(0, ::truncate(p.c_str(), off_t(200) << 20));
    m = error_of([&] { fy::read_safetensors(p); });
    EXPECT_NE(m.find("corrupt header: length 167772160 bytes"), std::string::npos) << m;
    dump(p, corrupt);
  }

  // Duplicate names are refused on write, and the target stays untouched.
  m = error_of([&] {
    fy::write_safetensors(p, {{"x", fy::DType::F32, {1}, w.data()}, {"x", fy::DType::F32, {1}, w.data()}});
  });
  EXPECT_NE(m.find("duplicate"), std::string::npos) << m;
  EXPECT_EQ(slurp(p), corrupt);
  std::remove(p.c_str());
}

}  // namespace
}  // namespace fyt
