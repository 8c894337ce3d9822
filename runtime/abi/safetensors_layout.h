// The weights file both halves write: the compiler the weights no ONNX file
// addresses (OUT.weights.safetensors), the runtime its checkpoints; the
// runtime reads both. The safetensors layout, declared once: an 8-byte
// little-endian header length, a JSON header (__metadata__ string entries,
// then each tensor's dtype, shape and data offsets), space-padded so the
// data starts 8-byte aligned, then the tensors' bytes in header order.
// Plain C++; part of the declared compiler-runtime interface (runtime/abi/).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace fy::abi {

// Our files carry each tensor's CRC-32C (Castagnoli) in __metadata__, under
// this prefix and the tensor's name, as 8 lowercase hex digits; a reader
// checks a tensor that has one.
inline constexpr const char* kStCrcKey = "crc32c/";

// The CRC-32C of `n` bytes at `data`, continuing from `crc` (0 to start), by
// table (the runtime uses SSE4.2's instruction where it can: the same value).
inline uint32_t crc32c_portable(uint32_t crc, const void* data, size_t n) {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (c & 1 ? 0x82f63b78u : 0);  // the reflected polynomial
      t[i] = c;
    }
    return t;
  }();
  const unsigned char* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
  for (; n; --n) c = (c >> 8) ^ table[(c ^ *p++) & 0xff];
  return ~c;
}

// A checksum as the metadata value holds it.
inline std::string st_crc_text(uint32_t crc) {
  char hex[9];
  std::snprintf(hex, sizeof hex, "%08x", crc);
  return hex;
}

struct StTensor {
  std::string name;
  const char* dtype = "F32";   // "F32", "I64", "U8", ...
  std::vector<int64_t> shape;  // non-negative
  uint64_t elem_bytes = 4;
  uint64_t nbytes() const {
    uint64_t n = elem_bytes;
    for (int64_t d : shape) n *= uint64_t(d);
    return n;
  }
};

// A JSON string's contents for `s`.
inline std::string st_json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') {
      o += '\\';
      o += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      o += buf;
    } else {
      o += c;
    }
  }
  return o;
}

struct StHeader {
  std::string bytes;               // the length prefix and the padded header: the file up to the data
  std::vector<size_t> value_at;    // where each metadata value's text starts in `bytes`
};

// The file's first bytes for `metadata` (key, value; in this order) and
// `tensors` (in this order, their data back to back). A value may be
// rewritten in place later if its length is kept (a checksum known only
// once the data has gone out).
inline StHeader safetensors_header(const std::vector<std::pair<std::string, std::string>>& metadata,
                                   const std::vector<StTensor>& tensors) {
  StHeader h;
  std::string json = "{\"__metadata__\":{";
  std::vector<size_t> at;
  for (size_t i = 0; i < metadata.size(); ++i) {
    json += std::string(i ? "," : "") + "\"" + st_json_escape(metadata[i].first) + "\":\"";
    at.push_back(json.size());
    json += st_json_escape(metadata[i].second) + "\"";
  }
  json += "}";
  uint64_t off = 0;
  for (const StTensor& t : tensors) {
    std::string shape = "[";
    for (size_t k = 0; k < t.shape.size(); ++k) shape += (k ? "," : "") + std::to_string(t.shape[k]);
    json += ",\"" + st_json_escape(t.name) + "\":{\"dtype\":\"" + t.dtype + "\",\"shape\":" + shape +
            "],\"data_offsets\":[" + std::to_string(off) + "," + std::to_string(off + t.nbytes()) + "]}";
    off += t.nbytes();
  }
  json += "}";
  while ((8 + json.size()) % 8) json += ' ';
  for (int k = 0; k < 8; ++k) h.bytes += char(uint64_t(json.size()) >> (8 * k));
  h.bytes += json;
  for (size_t a : at) h.value_at.push_back(8 + a);
  return h;
}

}  // namespace fy::abi
