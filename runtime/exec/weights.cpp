#include "exec/weights.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>
#include <sstream>
#include <vector>

#include "core/half.h"
#include "io/safetensors.h"

namespace fy {

namespace {

const char* g_manifest = nullptr;

// A stored element type, as an ONNX file or a safetensors header names it.
enum class Stored { F32, F64, F16, BF16, I64, I32, I16, I8, U64, U32, U16, U8, Bool, Unknown };

Stored from_onnx(int t) {
  switch (t) {
    case 1: return Stored::F32;
    case 2: return Stored::U8;
    case 3: return Stored::I8;
    case 4: return Stored::U16;
    case 5: return Stored::I16;
    case 6: return Stored::I32;
    case 7: return Stored::I64;
    case 9: return Stored::Bool;
    case 10: return Stored::F16;
    case 11: return Stored::F64;
    case 12: return Stored::U32;
    case 13: return Stored::U64;
    case 16: return Stored::BF16;
    default: return Stored::Unknown;
  }
}

Stored from_safetensors(const std::string& s) {
  static const std::map<std::string, Stored> names = {
      {"F32", Stored::F32}, {"F64", Stored::F64}, {"F16", Stored::F16}, {"BF16", Stored::BF16},
      {"I64", Stored::I64}, {"I32", Stored::I32}, {"I16", Stored::I16}, {"I8", Stored::I8},
      {"U64", Stored::U64}, {"U32", Stored::U32}, {"U16", Stored::U16}, {"U8", Stored::U8}, {"BOOL", Stored::Bool}};
  auto it = names.find(s);
  return it == names.end() ? Stored::Unknown : it->second;
}

size_t stored_size(Stored s) {
  switch (s) {
    case Stored::F64: case Stored::I64: case Stored::U64: return 8;
    case Stored::F32: case Stored::I32: case Stored::U32: return 4;
    case Stored::F16: case Stored::BF16: case Stored::I16: case Stored::U16: return 2;
    case Stored::I8: case Stored::U8: case Stored::Bool: return 1;
    default: return 0;
  }
}

bool is_float(Stored s) { return s == Stored::F32 || s == Stored::F64 || s == Stored::F16 || s == Stored::BF16; }

// Whether a tensor stored as `s` can become a parameter of dtype `d`: floats
// (16-bit ones as Hugging Face ships them) widen to the fp32 masters,
// integers to int64, bools stay.
bool convertible(Stored s, DType d) {
  if (d == DType::F32) return is_float(s);
  if (d == DType::I64) return !is_float(s) && s != Stored::Bool && s != Stored::Unknown;
  if (d == DType::U8) return s == Stored::Bool || s == Stored::U8;
  return false;
}

// n elements of type `s` at `src` into `dst` (n elements of `d`).
void convert(Stored s, const char* src, size_t n, DType d, char* dst) {
  for (size_t i = 0; i < n; ++i) {
    const char* p = src + i * stored_size(s);
    auto load = [&](auto x) { std::memcpy(&x, p, sizeof x); return x; };
    if (d == DType::F32) {
      float f = s == Stored::F32 ? load(float()) : s == Stored::F64 ? float(load(double()))
                : s == Stored::F16 ? fp16_value(load(uint16_t())) : bf16_value(load(uint16_t()));
      std::memcpy(dst + 4 * i, &f, 4);
    } else if (d == DType::I64) {
      int64_t v = s == Stored::I64 ? load(int64_t()) : s == Stored::I32 ? load(int32_t()) : s == Stored::I16 ? load(int16_t())
                  : s == Stored::I8 ? load(int8_t()) : s == Stored::U64 ? int64_t(load(uint64_t()))
                  : s == Stored::U32 ? load(uint32_t()) : s == Stored::U16 ? load(uint16_t()) : load(uint8_t());
      std::memcpy(dst + 8 * i, &v, 8);
    } else {
      dst[i] = *p != 0;
    }
  }
}

// Reads `length` bytes at `offset` of `path` (stored as `s`) into the
// parameter's storage, converting a slice at a time: no second copy of a
// large tensor.
void read_into(const std::string& path, uint64_t offset, uint64_t length, Stored s, const View& to,
               const std::string& what) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(what + ": cannot open '" + path + "': " + std::strerror(errno));
  struct Closer { int fd; ~Closer() { ::close(fd); } } closer{fd};
  const off_t size = ::lseek(fd, 0, SEEK_END);
  if (size < 0 || offset > uint64_t(size) || length > uint64_t(size) - offset)
    fail(what + ": [" + std::to_string(offset) + ", +" + std::to_string(length) + ") runs past the end of '" + path +
         "' (" + std::to_string(size) + " bytes)");
  const size_t es = stored_size(s);
  const bool direct = (s == Stored::F32 && to.dtype == DType::F32) || (s == Stored::I64 && to.dtype == DType::I64) ||
                      ((s == Stored::U8 || s == Stored::Bool) && to.dtype == DType::U8);
  constexpr size_t kSlice = size_t(64) << 20;
  std::vector<char> staging(direct ? 0 : std::min<size_t>(kSlice, length));
  uint64_t done = 0;
  while (done < length) {
    const size_t want = size_t(std::min<uint64_t>(length - done, direct ? length - done : staging.size() / es * es));
    char* buf = direct ? static_cast<char*>(to.data) + done : staging.data();
    size_t got = 0;
    while (got < want) {
      const ssize_t r = ::pread(fd, buf + got, std::min<size_t>(want - got, size_t(1) << 30), off_t(offset + done + got));
      if (r < 0 && errno == EINTR) continue;
      if (r < 0) fail(what + ": reading '" + path + "': " + std::strerror(errno));
      if (r == 0) fail(what + ": '" + path + "' ended early");
      got += size_t(r);
    }
    if (!direct)
      convert(s, buf, want / es, to.dtype, static_cast<char*>(to.data) + (done / es) * dtype_size(to.dtype));
    done += want;
  }
}

struct Manifest {
  std::string model;         // the ONNX file the compile read
  std::string from_program;  // the same, relative to the program's directory
  struct Entry { int onnx_type = 0; uint64_t offset = 0, length = 0; std::string rel; bool own = false; };
  std::map<std::string, Entry> params;
  std::multimap<std::string, std::string> aliases;  // both directions
  std::vector<std::string> known;                   // other initializer names (folded)
  struct File { uint64_t size = 0; int64_t mtime_ns = 0; };
  std::map<std::string, File> files;                // as the compile saw them, by relative path
};

Manifest parse_manifest(const char* text) {
  Manifest m;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> f;
    std::stringstream ls(line);
    for (std::string x; std::getline(ls, x, '\t');) f.push_back(x);
    if (line.size() && line.back() == '\t') f.push_back("");
    if (f.size() == 3 && f[0] == "M") { m.model = f[1]; m.from_program = f[2]; }
    else if (f.size() == 6 && f[0] == "P")
      m.params[f[1]] = {std::stoi(f[2]), std::stoull(f[3]), std::stoull(f[4]), f[5], false};
    else if (f.size() == 2 && f[0] == "E") m.params[f[1]].own = true;
    else if (f.size() == 3 && f[0] == "A") { m.aliases.insert({f[1], f[2]}); m.aliases.insert({f[2], f[1]}); }
    else if (f.size() == 2 && f[0] == "K") m.known.push_back(f[1]);
    else if (f.size() == 4 && f[0] == "F") m.files[f[1]] = {std::stoull(f[2]), std::stoll(f[3])};
  }
  return m;
}

// The names a checkpoint may give a tensor the graph calls `name`: itself,
// and without one or two leading components of a wrapper ("m.model.x" ->
// "model.x", "x"), then the same for each alias (a tied head stored once).
std::vector<std::string> candidates(const std::string& name, const Manifest& m) {
  std::vector<std::string> names{name}, out;
  auto range = m.aliases.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) names.push_back(it->second);
  auto add = [&](const std::string& c) {
    if (!c.empty() && std::find(out.begin(), out.end(), c) == out.end()) out.push_back(c);
  };
  for (const std::string& n : names) {
    add(n);
    size_t dot = n.find('.');
    for (int k = 0; k < 2 && dot != std::string::npos; ++k, dot = n.find('.', dot + 1)) add(n.substr(dot + 1));
  }
  return out;
}

// A checkpoint's tensors by name: a safetensors file, a directory holding
// model.safetensors.index.json or model.safetensors, or the index itself.
std::map<std::string, std::pair<std::string, StoredTensor>> checkpoint_tensors(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  std::string index, single;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "model.safetensors.index.json", ec)) index = (fs::path(path) / "model.safetensors.index.json").string();
    else if (fs::exists(fs::path(path) / "model.safetensors", ec)) single = (fs::path(path) / "model.safetensors").string();
    else fail("--weights " + path + ": a directory with neither model.safetensors.index.json nor model.safetensors");
  } else if (path.size() > 5 && path.compare(path.size() - 5, 5, ".json") == 0) {
    index = path;
  } else {
    single = path;
  }
  std::map<std::string, std::pair<std::string, StoredTensor>> out;
  std::vector<std::string> files;
  if (!index.empty()) {
    std::set<std::string> shards;
    for (const auto& [name, file] : read_safetensors_index(index)) shards.insert(file);
    for (const std::string& f : shards) files.push_back((fs::path(index).parent_path() / f).string());
  } else {
    files.push_back(single);
  }
  for (const std::string& f : files)
    for (StoredTensor& t : list_safetensors(f)) {
      if (out.count(t.name)) fail("--weights " + path + ": tensor '" + t.name + "' is in two files");
      const std::string name = t.name;
      out[name] = {f, std::move(t)};
    }
  return out;
}

void load_from_checkpoint(Runtime& rt, const std::string& path, const Manifest& m) {
  const auto tensors = checkpoint_tensors(path);
  std::set<std::string> used, acceptable;
  int64_t renamed = 0;
  std::string example;  // the first "graph <- checkpoint" name mapping
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const Runtime::Param& p = rt.param(i);
    const std::vector<std::string> names = candidates(p.name, m);
    acceptable.insert(names.begin(), names.end());
    auto it = tensors.end();
    for (const std::string& c : names)
      if ((it = tensors.find(c)) != tensors.end()) break;
    if (it == tensors.end())
      fail("--weights " + path + ": no tensor for parameter '" + p.name + "' (looked for '" + names.front() + "'" +
           (names.size() > 1 ? " and " + std::to_string(names.size() - 1) + " other names" : std::string()) + ")");
    const StoredTensor& t = it->second.second;
    const Stored s = from_safetensors(t.dtype);
    if (Shape(t.shape) != p.value.shape || !convertible(s, p.value.dtype))
      fail("--weights " + path + ": tensor '" + t.name + "' is " + t.dtype + " " + Shape(t.shape).str() +
           ", parameter '" + p.name + "' is " + dtype_name(p.value.dtype) + " " + p.value.shape.str());
    if (t.name != p.name && renamed++ == 0)
      example = "'" + p.name + "' <- '" + t.name + "'";
    read_into(it->second.first, t.offset, t.nbytes, s, p.value, "--weights " + path + ": tensor '" + t.name + "'");
    if (t.has_crc && s == Stored::F32 && p.value.dtype == DType::F32) check_crc(it->second.first, t, p.value.data);
    used.insert(t.name);
    rt.set_checkpoint_name(i, t.name);
  }
  for (const std::string& k : m.known)
    for (const std::string& c : candidates(k, m)) acceptable.insert(c);
  for (const auto& [name, t] : tensors)
    if (!used.count(name) && !acceptable.count(name))
      fail("--weights " + path + ": tensor '" + name + "' matches no parameter of this program");
  // The mapping, where there is one, said (a checkpoint under its own names).
  if (renamed)
    std::fprintf(stderr, "train: weights from '%s': %lld tensors, %lld under other names, e.g. %s\n", path.c_str(),
                 (long long)rt.num_params(), (long long)renamed, example.c_str());
}

}  // namespace

bool set_weight_sources(const char* manifest) {
  g_manifest = manifest;
  return true;
}

void load_weights(Runtime& rt, const std::string& weights, const std::string& onnx, const std::string& own_file) {
  const Manifest m = parse_manifest(g_manifest ? g_manifest : "");
  if (!weights.empty()) {
    load_from_checkpoint(rt, weights, m);
    return;
  }
  // The recorded sources, and the program's own file for the rest.
  namespace fs = std::filesystem;
  // --onnx, else the model beside the program as it was at the compile (a
  // program and model moved together), else where the compile read it.
  std::error_code ec;
  const std::string beside = m.from_program.empty() ? std::string()
                             : (fs::path(own_file).parent_path() / m.from_program).lexically_normal().string();
  const bool moved = onnx.empty() && !beside.empty() && fs::exists(beside, ec) &&
                     !fs::equivalent(beside, m.model, ec);
  const std::string model = !onnx.empty() ? onnx : moved ? beside : m.model;
  // The files as the compile saw them: the same size, and (unless they are
  // another copy) not modified since.
  for (const auto& [rel, seen] : m.files) {
    const std::string file = rel.empty() ? model : (fs::path(model).parent_path() / rel).string();
    struct stat st;
    if (::stat(file.c_str(), &st) != 0)
      fail("weights: cannot open '" + file + "': " + std::strerror(errno) +
           " (the compile read the model there; give it with --onnx, or a checkpoint with --weights)");
    const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
    if (uint64_t(st.st_size) != seen.size || (onnx.empty() && !moved && mtime != seen.mtime_ns))
      fail("weights: '" + file + "' has changed since the compile (" +
           (uint64_t(st.st_size) != seen.size
                ? std::to_string(st.st_size) + " bytes, " + std::to_string(seen.size) + " then"
                : std::string("modified after it")) +
           "): compile again, or give the weights with --weights");
  }
  std::map<std::string, int64_t> own;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const Runtime::Param& p = rt.param(i);
    auto it = m.params.find(p.name);
    if (!g_manifest || it == m.params.end() || it->second.own) {
      own[p.name] = i;
      continue;
    }
    const Manifest::Entry& e = it->second;
    const Stored s = from_onnx(e.onnx_type);
    if (!convertible(s, p.value.dtype) || e.length != uint64_t(p.value.numel()) * stored_size(s))
      fail("parameter '" + p.name + "': its recorded source does not fit (a damaged program)");
    const std::string file = e.rel.empty() ? model : (fs::path(model).parent_path() / e.rel).string();
    read_into(file, e.offset, e.length, s, p.value,
              "weights of '" + model + "': parameter '" + p.name + "'");
  }
  if (own.empty()) return;
  std::vector<bool> loaded(size_t(rt.num_params()), false);
  read_safetensors_into(own_file, [&](const std::string& name, DType dtype, const std::vector<int64_t>& shape) -> void* {
    auto it = own.find(name);
    if (it == own.end()) return nullptr;
    const Runtime::Param& p = rt.param(it->second);
    if (dtype != p.value.dtype || Shape(shape) != p.value.shape)
      fail("weights file '" + own_file + "': parameter '" + p.name + "' is " + dtype_name(dtype) + " " +
           Shape(shape).str() + ", the program expects " + dtype_name(p.value.dtype) + " " + p.value.shape.str());
    loaded[size_t(it->second)] = true;
    return p.value.data;
  });
  for (const auto& [name, i] : own)
    if (!loaded[size_t(i)]) fail("weights file '" + own_file + "': parameter '" + name + "' is missing");
}

}  // namespace fy

namespace fy::rt {
bool set_weight_sources(const char* manifest) { return fy::set_weight_sources(manifest); }
}  // namespace fy::rt
