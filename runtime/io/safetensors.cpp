#include "io/safetensors.h"

#include "abi/safetensors_layout.h"
#include "io/crc32c.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

namespace fy {

namespace {

[[noreturn]] void st_fail(const std::string& path, const std::string& what) {
  fail("safetensors file '" + path + "': " + what);
}

const char* st_dtype(DType dt) {
  switch (dt) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
    case DType::BF16: return "BF16";
    case DType::F16: return "F16";
  }
  return "?";
}

bool parse_dtype(const std::string& s, DType* out) {
  if (s == "F32") *out = DType::F32;
  else if (s == "F64") *out = DType::F64;
  else if (s == "I64") *out = DType::I64;
  else if (s == "U8" || s == "BOOL") *out = DType::U8;
  else return false;
  return true;
}


// __metadata__ key of a tensor's checksum, before its name.
constexpr const char* kCrcKey = abi::kStCrcKey;

void write_all(int fd, const void* data, size_t n, const std::string& path) {
  const char* p = static_cast<const char*>(data);
  while (n) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0) {
      if (errno == EINTR) continue;
      st_fail(path, std::string("write failed: ") + std::strerror(errno));
    }
    p += w;
    n -= size_t(w);
  }
}

// Just enough JSON for safetensors headers: objects, arrays, strings,
// integers, and skipping of other scalars (in __metadata__).
struct Json {
  enum Kind { Null, Num, Str, Arr, Obj } kind = Null;
  int64_t num = 0;
  std::string str;
  std::vector<Json> arr;
  std::vector<std::pair<std::string, Json>> obj;
  const Json* get(const std::string& k) const {
    for (auto& kv : obj)
      if (kv.first == k) return &kv.second;
    return nullptr;
  }
};

class Parser {
 public:
  Parser(const std::string& s, const std::string& path) : s_(s), path_(path) {}
  Json parse_document() {
    Json j = value(0);
    ws();
    if (i_ != s_.size()) err("trailing characters");
    return j;
  }

 private:
  const std::string& s_;
  const std::string& path_;
  size_t i_ = 0;

  [[noreturn]] void err(const std::string& what) {
    st_fail(path_, "corrupt JSON header at byte " + std::to_string(i_) + ": " + what);
  }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  char peek() {
    ws();
    if (i_ >= s_.size()) err("unexpected end");
    return s_[i_];
  }
  void expect(char c) {
    if (peek() != c) err(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string() {
    expect('"');
    std::string o;
    while (true) {
      if (i_ >= s_.size()) err("unterminated string");
      char c = s_[i_++];
      if (c == '"') break;
      if (c != '\\') { o += c; continue; }
      if (i_ >= s_.size()) err("bad escape");
      char e = s_[i_++];
      switch (e) {
        case '"': case '\\': case '/': o += e; break;
        case 'n': o += '\n'; break;
        case 't': o += '\t'; break;
        case 'r': o += '\r'; break;
        case 'b': o += '\b'; break;
        case 'f': o += '\f'; break;
        case 'u': {
          if (i_ + 4 > s_.size()) err("bad \\u escape");
          for (size_t k = 0; k < 4; ++k)
            if (!std::isxdigit(static_cast<unsigned char>(s_[i_ + k]))) err("bad \\u escape");
          unsigned cp = unsigned(std::stoul(s_.substr(i_, 4), nullptr, 16));
          i_ += 4;
          // UTF-8 encode (surrogate pairs are not expected in tensor names).
          if (cp < 0x80) o += char(cp);
          else if (cp < 0x800) { o += char(0xC0 | (cp >> 6)); o += char(0x80 | (cp & 0x3F)); }
          else { o += char(0xE0 | (cp >> 12)); o += char(0x80 | ((cp >> 6) & 0x3F)); o += char(0x80 | (cp & 0x3F)); }
          break;
        }
        default: err("bad escape");
      }
    }
    return o;
  }
  Json value(int depth) {
    if (depth > 16) err("nesting too deep");
    Json j;
    char c = peek();
    if (c == '{') {
      j.kind = Json::Obj;
      ++i_;
      if (peek() == '}') { ++i_; return j; }
      while (true) {
        std::string k = string();
        expect(':');
        // A repeated key could stand in for a missing tensor.
        if (j.get(k)) err("duplicate key '" + k + "'");
        j.obj.emplace_back(std::move(k), value(depth + 1));
        if (peek() == ',') { ++i_; continue; }
        expect('}');
        return j;
      }
    }
    if (c == '[') {
      j.kind = Json::Arr;
      ++i_;
      if (peek() == ']') { ++i_; return j; }
      while (true) {
        j.arr.push_back(value(depth + 1));
        if (peek() == ',') { ++i_; continue; }
        expect(']');
        return j;
      }
    }
    if (c == '"') {
      j.kind = Json::Str;
      j.str = string();
      return j;
    }
    if (c == '-' || (c >= '0' && c <= '9')) {
      size_t st = i_;
      ++i_;
      bool integral = true;
      while (i_ < s_.size() && (std::isdigit(static_cast<unsigned char>(s_[i_])) || std::strchr(".eE+-", s_[i_]))) {
        if (!std::isdigit(static_cast<unsigned char>(s_[i_]))) integral = false;
        ++i_;
      }
      j.kind = Json::Num;
      if (integral) {
        errno = 0;
        j.num = std::strtoll(s_.c_str() + st, nullptr, 10);
        if (errno == ERANGE) err("integer out of range");
      }
      return j;
    }
    for (const char* lit : {"true", "false", "null"}) {
      size_t n = std::strlen(lit);
      if (s_.compare(i_, n, lit) == 0) { i_ += n; return j; }
    }
    err("unexpected character");
  }
};

}  // namespace

int64_t LoadedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void write_safetensors(const std::string& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const auto& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i)
    if (sorted[i]->name == sorted[i - 1]->name) st_fail(path, "duplicate tensor name '" + sorted[i]->name + "'");

  // Every tensor's CRC-32C goes in __metadata__ (string values, as the
  // format allows) so a reader can tell a damaged tensor from a good one.
  // The values are fixed-width: the header is written with zeros first and
  // rewritten in place once the data has gone out.
  std::vector<std::pair<std::string, std::string>> meta;
  for (const auto* e : sorted) meta.emplace_back(kCrcKey + e->name, "00000000");
  for (const auto& [key, value] : metadata) {
    if (key.rfind(kCrcKey, 0) == 0) st_fail(path, "metadata key '" + key + "' is reserved for checksums");
    meta.emplace_back(key, value);
  }
  std::vector<abi::StTensor> layout;
  for (const auto* e : sorted) {
    if (e->name.empty() || e->name == "__metadata__") st_fail(path, "invalid tensor name '" + e->name + "'");
    for (int64_t d : e->shape)
      if (d < 0) st_fail(path, "negative dim in tensor '" + e->name + "'");
    layout.push_back(abi::StTensor{e->name, st_dtype(e->dtype), e->shape, uint64_t(dtype_size(e->dtype))});
  }
  abi::StHeader hdr = abi::safetensors_header(meta, layout);

  // Temporary in the same directory so rename() is atomic.
  std::string tmp = path + ".tmp." + std::to_string(::getpid());
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) st_fail(path, "cannot create '" + tmp + "': " + std::strerror(errno));
  try {
    write_all(fd, hdr.bytes.data(), hdr.bytes.size(), path);
    for (size_t i = 0; i < sorted.size(); ++i) {
      const auto* e = sorted[i];
      const size_t bytes = size_t(layout[i].nbytes());
      if (bytes && !e->data && !e->fill) st_fail(path, "tensor '" + e->name + "' has no data");
      std::vector<unsigned char> buf;
      const void* from = e->data;
      if (!e->data && bytes) {
        buf.resize(bytes);
        e->fill(buf.data());
        from = buf.data();
      }
      hdr.bytes.replace(hdr.value_at[i], 8, abi::st_crc_text(crc32c(0, from, bytes)));
      write_all(fd, from, bytes, path);
    }
    for (size_t done = 0; done < hdr.bytes.size();) {
      const ssize_t w = ::pwrite(fd, hdr.bytes.data() + done, hdr.bytes.size() - done, off_t(done));
      if (w < 0 && errno == EINTR) continue;
      if (w <= 0) st_fail(path, std::string("rewriting the header failed: ") + (w < 0 ? std::strerror(errno) : "no progress"));
      done += size_t(w);
    }
    if (::fsync(fd) != 0) st_fail(path, std::string("fsync failed: ") + std::strerror(errno));
    if (::close(fd) != 0) {
      fd = -1;
      st_fail(path, std::string("close failed: ") + std::strerror(errno));
    }
    fd = -1;
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      st_fail(path, std::string("rename from temporary failed: ") + std::strerror(errno));
  } catch (...) {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
    throw;
  }
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.rfind('/'));
  if (dir.empty()) dir = "/";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

namespace {
// Bytes per element of a safetensors dtype name (0: unknown).
size_t stored_dtype_size(const std::string& dt) {
  if (dt == "F64" || dt == "I64" || dt == "U64") return 8;
  if (dt == "F32" || dt == "I32" || dt == "U32") return 4;
  if (dt == "BF16" || dt == "F16" || dt == "I16" || dt == "U16") return 2;
  if (dt == "U8" || dt == "I8" || dt == "BOOL") return 1;
  return 0;
}

// Parses and checks the header, then hands each tensor's bytes to `sink`
// (name, dtype, shape, byte count) -> destination or nullptr to skip.
using Sink = std::function<void*(const std::string&, DType, const std::vector<int64_t>&, size_t)>;
void read_tensors(const std::string& path, const Sink& sink) {
  const std::vector<StoredTensor> stored = list_safetensors(path);
  std::vector<DType> dtypes;
  for (const StoredTensor& t : stored) {
    DType dt;
    if (!parse_dtype(t.dtype, &dt)) st_fail(path, "tensor '" + t.name + "' has unsupported dtype " + t.dtype);
    dtypes.push_back(dt);
  }
  std::ifstream f(path, std::ios::binary);
  if (!f) st_fail(path, std::string("cannot open: ") + std::strerror(errno));
  for (size_t i = 0; i < stored.size(); ++i) {
    const StoredTensor& t = stored[i];
    if (void* to = sink(t.name, dtypes[i], t.shape, size_t(t.nbytes))) {
      f.seekg(std::streamoff(t.offset));
      errno = 0;
      f.read(static_cast<char*>(to), std::streamsize(t.nbytes));
      if (!f)
        st_fail(path, "read error in tensor '" + t.name + "'" + (errno ? std::string(": ") + std::strerror(errno) : ""));
      check_crc(path, t, to);
    }
  }
}
}  // namespace

void check_crc(const std::string& path, const StoredTensor& t, const void* bytes) {
  if (!t.has_crc) return;
  const uint32_t got = crc32c(0, bytes, size_t(t.nbytes));
  if (got != t.crc) {
    char buf[96];
    std::snprintf(buf, sizeof buf, " is damaged: its bytes have CRC-32C %08x, the header says %08x", got, t.crc);
    st_fail(path, "tensor '" + t.name + "'" + buf);
  }
}

std::vector<StoredTensor> list_safetensors(const std::string& path) { return list_safetensors(path, nullptr); }

std::vector<StoredTensor> list_safetensors(const std::string& path, std::map<std::string, std::string>* metadata) {
  std::ifstream f(path, std::ios::binary);
  if (!f) st_fail(path, std::string("cannot open: ") + std::strerror(errno));
  f.seekg(0, std::ios::end);
  const int64_t size = int64_t(f.tellg());
  f.seekg(0);
  if (size < 8) st_fail(path, "truncated: " + std::to_string(size) + " bytes, smaller than the 8-byte header length");
  unsigned char le[8];
  f.read(reinterpret_cast<char*>(le), 8);
  if (!f) st_fail(path, std::string("read error in the header length: ") + std::strerror(errno));
  uint64_t hlen = 0;
  for (int k = 0; k < 8; ++k) hlen |= uint64_t(le[k]) << (8 * k);
  if (hlen > uint64_t(size - 8))
    st_fail(path, "truncated: header length " + std::to_string(hlen) + " exceeds the " + std::to_string(size - 8) +
                      " bytes that follow");
  // Real headers are kilobytes; a damaged length in a big file would
  // otherwise be read into memory whole.
  constexpr uint64_t kMaxHeader = uint64_t(100) << 20;
  if (hlen > kMaxHeader)
    st_fail(path, "corrupt header: length " + std::to_string(hlen) + " bytes, more than the 100 MiB any header needs");
  std::string hdr(size_t(hlen), '\0');
  errno = 0;
  f.read(&hdr[0], std::streamsize(hlen));
  if (!f) st_fail(path, std::string("read error in the header") + (errno ? std::string(": ") + std::strerror(errno) : ""));
  const int64_t data_bytes = size - 8 - int64_t(hlen);

  Json root = Parser(hdr, path).parse_document();
  if (root.kind != Json::Obj) st_fail(path, "corrupt header: top level is not an object");
  // Checksums we wrote (files from elsewhere have none, and load unchecked).
  std::map<std::string, uint32_t> crcs;
  if (const Json* meta = root.get("__metadata__"); meta && meta->kind == Json::Obj)
    for (const auto& kv : meta->obj) {
      if (kv.first.rfind(kCrcKey, 0) != 0) {
        if (metadata && kv.second.kind == Json::Str) (*metadata)[kv.first] = kv.second.str;
        continue;
      }
      const std::string name = kv.first.substr(std::strlen(kCrcKey));
      const std::string& hex = kv.second.str;
      if (kv.second.kind != Json::Str || hex.size() != 8 ||
          !std::all_of(hex.begin(), hex.end(), [](unsigned char c) { return std::isxdigit(c); }))
        st_fail(path, "corrupt header: bad checksum entry for tensor '" + name + "'");
      crcs[name] = uint32_t(std::stoul(hex, nullptr, 16));
    }
  size_t matched = 0;
  std::vector<std::pair<int64_t, int64_t>> ranges;
  std::vector<StoredTensor> out;
  for (const auto& kv : root.obj) {
    if (kv.first == "__metadata__") continue;
    const std::string& name = kv.first;
    const Json& t = kv.second;
    const Json* dt = t.get("dtype");
    const Json* sh = t.get("shape");
    const Json* of = t.get("data_offsets");
    if (t.kind != Json::Obj || !dt || !sh || !of || dt->kind != Json::Str || sh->kind != Json::Arr ||
        of->kind != Json::Arr || of->arr.size() != 2)
      st_fail(path, "corrupt header entry for tensor '" + name + "'");
    StoredTensor st;
    st.name = name;
    st.dtype = dt->str;
    const size_t es = stored_dtype_size(st.dtype);
    if (!es) st_fail(path, "tensor '" + name + "' has unsupported dtype " + st.dtype);
    int64_t n = 1;
    for (const Json& d : sh->arr) {
      if (d.kind != Json::Num || d.num < 0) st_fail(path, "tensor '" + name + "' has a bad shape");
      st.shape.push_back(d.num);
      n *= d.num;
    }
    if (st.shape.size() > size_t(Shape::kMaxRank)) st_fail(path, "tensor '" + name + "' has rank > 8");
    const int64_t b = of->arr[0].num, e = of->arr[1].num;
    if (of->arr[0].kind != Json::Num || of->arr[1].kind != Json::Num || b < 0 || e < b)
      st_fail(path, "tensor '" + name + "' has bad data_offsets");
    if (e - b != n * int64_t(es))
      st_fail(path, "tensor '" + name + "' data_offsets span " + std::to_string(e - b) + " bytes, shape needs " +
                        std::to_string(n * int64_t(es)));
    if (e > data_bytes)
      st_fail(path, "truncated: tensor '" + name + "' ends at data byte " + std::to_string(e) + " but only " +
                        std::to_string(data_bytes) + " bytes of data are present");
    ranges.emplace_back(b, e);
    // Ours carry one for every tensor: one missing is a damaged key.
    if (!crcs.empty() && !crcs.count(name)) st_fail(path, "corrupt header: tensor '" + name + "' has no checksum");
    if (auto crc = crcs.find(name); crc != crcs.end()) {
      st.has_crc = true;
      st.crc = crc->second;
      ++matched;
    }
    st.offset = uint64_t(8 + int64_t(hlen) + b);
    st.nbytes = uint64_t(e - b);
    out.push_back(std::move(st));
  }
  if (matched != crcs.size())
    for (const auto& c : crcs)
      if (!root.get(c.first)) st_fail(path, "corrupt header: a checksum names tensor '" + c.first + "', which it lacks");
  // Overlapping tensors mean a corrupt (or hostile) header.
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i)
    if (ranges[i].first < ranges[i - 1].second) st_fail(path, "corrupt header: tensor data ranges overlap");
  return out;
}

std::map<std::string, std::string> read_safetensors_index(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) fail("checkpoint index '" + path + "': cannot open: " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  if (ss.str().size() > (size_t(100) << 20)) fail("checkpoint index '" + path + "': more than 100 MiB");
  Json root = Parser(ss.str(), path).parse_document();
  const Json* map = root.kind == Json::Obj ? root.get("weight_map") : nullptr;
  if (!map || map->kind != Json::Obj) fail("checkpoint index '" + path + "': no \"weight_map\" object");
  std::map<std::string, std::string> out;
  for (const auto& kv : map->obj) {
    if (kv.second.kind != Json::Str || kv.second.str.empty() || kv.second.str.find('/') != std::string::npos ||
        kv.second.str == "..")
      fail("checkpoint index '" + path + "': tensor '" + kv.first + "' names a bad file");
    out[kv.first] = kv.second.str;
  }
  return out;
}

std::string safetensors_index_json(const std::map<std::string, std::string>& weight_map, uint64_t total_size) {
  std::string s = "{\n  \"metadata\": {\"total_size\": " + std::to_string(total_size) + "},\n  \"weight_map\": {";
  const char* sep = "\n";
  for (const auto& [name, file] : weight_map) {
    s += sep + std::string("    \"") + abi::st_json_escape(name) + "\": \"" + abi::st_json_escape(file) + "\"";
    sep = ",\n";
  }
  return s + "\n  }\n}\n";
}

std::map<std::string, LoadedTensor> read_safetensors(const std::string& path) {
  std::map<std::string, LoadedTensor> out;
  read_tensors(path, [&](const std::string& name, DType dt, const std::vector<int64_t>& shape, size_t bytes) {
    LoadedTensor& lt = out[name];
    if (!lt.bytes.empty() || !lt.shape.empty()) st_fail(path, "duplicate tensor name '" + name + "'");
    lt.dtype = dt;
    lt.shape = shape;
    lt.bytes.resize(bytes);
    return static_cast<void*>(lt.bytes.data());
  });
  return out;
}

void read_safetensors_into(const std::string& path, const SafetensorsDest& dest) {
  read_tensors(path, [&](const std::string& name, DType dt, const std::vector<int64_t>& shape, size_t) {
    return dest(name, dt, shape);
  });
}



}  // namespace fy
