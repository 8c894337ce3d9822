// Minimal safetensors reader/writer for checkpoints: 8-byte little-endian
// header length, JSON header {name: {dtype, shape, data_offsets}}, data.
// Our files carry each tensor's CRC-32C in __metadata__ ("crc32c/NAME": 8 hex
// digits); readers check it, so a damaged file fails naming the tensor
// instead of loading wrong numbers.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fy {

struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const void* data = nullptr;  // numel(shape) * dtype_size(dtype) bytes
  // Instead of `data`: fills a buffer of the tensor's bytes when the writer
  // reaches it, so tensors that live elsewhere (the SSD store) are copied
  // one at a time.
  std::function<void(void* buffer)> fill;
};

struct LoadedTensor {
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
  int64_t numel() const;
  View view() { return View{bytes.data(), Shape(shape), dtype}; }
};

// Writes all entries (names sorted, unique) atomically: a temporary file in
// the same directory is written, fsync'ed and renamed over `path`, so a crash
// never leaves a partly written checkpoint under the final name.
// `metadata`: more string entries for __metadata__ (not "crc32c/...").
void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

// Reads every tensor. Fails naming the file on a missing, truncated or
// corrupt file. Supported dtypes: F32, F64, I64, U8 (BOOL reads as U8).
std::map<std::string, LoadedTensor> read_safetensors(const std::string& path);

// Streams each tensor straight to where `dest` says (nullptr: skip it), one
// at a time, after the same checks as read_safetensors; `dest` may fail().
using SafetensorsDest = std::function<void*(const std::string& name, DType dtype, const std::vector<int64_t>& shape)>;
void read_safetensors_into(const std::string& path, const SafetensorsDest& dest);

// One tensor of a safetensors file as its header describes it: any dtype a
// checkpoint may hold ("F32", "BF16", "F16", "I64", ...), where its bytes are
// in the file, and our checksum when the file has one.
struct StoredTensor {
  std::string name, dtype;
  std::vector<int64_t> shape;
  uint64_t offset = 0, nbytes = 0;  // from the start of the file
  bool has_crc = false;
  uint32_t crc = 0;
};

// The header's tensors, after every check read_safetensors makes; with
// `metadata`, its __metadata__ string entries other than the checksums too.
std::vector<StoredTensor> list_safetensors(const std::string& path);
std::vector<StoredTensor> list_safetensors(const std::string& path, std::map<std::string, std::string>* metadata);

// Fails naming the tensor when its bytes (read from the file) do not match
// its checksum; files without checksums pass.
void check_crc(const std::string& path, const StoredTensor& t, const void* bytes);

// A Hugging Face sharded checkpoint's index (model.safetensors.index.json):
// tensor name -> shard file name (beside the index).
std::map<std::string, std::string> read_safetensors_index(const std::string& path);

// The text of such an index: {"metadata": {"total_size": BYTES}, "weight_map": {...}}.
std::string safetensors_index_json(const std::map<std::string, std::string>& weight_map, uint64_t total_size);

}  // namespace fy
