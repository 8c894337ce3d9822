#include "compiler/importer/OnnxModel.h"

#include <onnx/checker.h>
#include <onnx/defs/parser.h>
#include <onnx/onnx_pb.h>
#include <google/protobuf/unknown_field_set.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <filesystem>
#include <set>
#include <fstream>
#include <sstream>
#include <unordered_map>

namespace fuyou::onnx_in {

const char *dtypeName(DType t) {
  switch (t) {
  case DType::F32: return "float32";
  case DType::I64: return "int64";
  case DType::Bool: return "bool";
  default: return "unsupported";
  }
}

std::string onnxTypeName(int t) { return onnx::TensorProto_DataType_Name(t); }

DType dtypeOf(int t) {
  switch (t) {
  case onnx::TensorProto::FLOAT: case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16:
  case onnx::TensorProto::DOUBLE:
    return DType::F32;
  case onnx::TensorProto::INT64: case onnx::TensorProto::INT32: case onnx::TensorProto::INT16:
  case onnx::TensorProto::INT8: case onnx::TensorProto::UINT64: case onnx::TensorProto::UINT32:
  case onnx::TensorProto::UINT16: case onnx::TensorProto::UINT8:
    return DType::I64;
  case onnx::TensorProto::BOOL: return DType::Bool;
  default: return DType::Unsupported;
  }
}

int64_t wrapToType(int64_t v, int t) {
  switch (t) {
  case onnx::TensorProto::INT32: return int32_t(uint32_t(uint64_t(v)));
  case onnx::TensorProto::INT16: return int16_t(uint16_t(uint64_t(v)));
  case onnx::TensorProto::INT8: return int8_t(uint8_t(uint64_t(v)));
  case onnx::TensorProto::UINT32: return uint32_t(uint64_t(v));
  case onnx::TensorProto::UINT16: return uint16_t(uint64_t(v));
  case onnx::TensorProto::UINT8: return uint8_t(uint64_t(v));
  default: return v;
  }
}

static size_t elemSize(DType t) {
  return t == DType::F32 ? 4 : t == DType::I64 ? 8 : 1;
}

// The bytes one element of ONNX type `t` takes in raw_data or a file (0 for
// a type that is never read).
static size_t storedSize(int t) {
  switch (t) {
  case onnx::TensorProto::FLOAT: case onnx::TensorProto::INT32: case onnx::TensorProto::UINT32: return 4;
  case onnx::TensorProto::DOUBLE: case onnx::TensorProto::INT64: case onnx::TensorProto::UINT64: return 8;
  case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::INT16:
  case onnx::TensorProto::UINT16: return 2;
  case onnx::TensorProto::INT8: case onnx::TensorProto::UINT8: case onnx::TensorProto::BOOL: return 1;
  default: return 0;
  }
}

static float halfToFloat(uint16_t h) {
  const uint32_t sign = uint32_t(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  float mag;
  if (exp == 0) mag = std::ldexp(float(man), -24);                        // zero, subnormal
  else if (exp == 31) mag = man ? std::numeric_limits<float>::quiet_NaN() : HUGE_VALF;
  else mag = std::ldexp(float(man | 0x400), int(exp) - 25);
  uint32_t bits;
  std::memcpy(&bits, &mag, 4);
  bits |= sign;
  std::memcpy(&mag, &bits, 4);
  return mag;
}

// Widens `n` elements of ONNX type `t` stored little-endian at `src` into
// `dst` (n elements of dtypeOf(t)). Returns "" or why a value cannot be kept.
static std::string widen(int t, const char *src, size_t n, char *dst) {
  for (size_t i = 0; i < n; ++i) {
    const char *p = src + i * storedSize(t);
    auto load = [&](auto x) { std::memcpy(&x, p, sizeof x); return x; };
    switch (t) {
    case onnx::TensorProto::FLOAT: std::memcpy(dst + 4 * i, p, 4); continue;
    case onnx::TensorProto::BOOL: dst[i] = *p != 0; continue;
    case onnx::TensorProto::FLOAT16: case onnx::TensorProto::BFLOAT16: case onnx::TensorProto::DOUBLE: {
      float f = t == onnx::TensorProto::DOUBLE ? float(load(double()))
                : t == onnx::TensorProto::FLOAT16 ? halfToFloat(load(uint16_t()))
                                                  : [&] { uint32_t b = uint32_t(load(uint16_t())) << 16; float r;
                                                          std::memcpy(&r, &b, 4); return r; }();
      std::memcpy(dst + 4 * i, &f, 4);
      continue;
    }
    default: break;
    }
    int64_t v;
    switch (t) {
    case onnx::TensorProto::INT64: v = load(int64_t()); break;
    case onnx::TensorProto::INT32: v = load(int32_t()); break;
    case onnx::TensorProto::INT16: v = load(int16_t()); break;
    case onnx::TensorProto::INT8: v = load(int8_t()); break;
    case onnx::TensorProto::UINT32: v = load(uint32_t()); break;
    case onnx::TensorProto::UINT16: v = load(uint16_t()); break;
    case onnx::TensorProto::UINT8: v = load(uint8_t()); break;
    default: {  // UINT64
      uint64_t u = load(uint64_t());
      if (u > uint64_t(std::numeric_limits<int64_t>::max()))
        return "value " + std::to_string(u) + " does not fit in int64";
      v = int64_t(u);
    }
    }
    std::memcpy(dst + 8 * i, &v, 8);
  }
  return "";
}

int64_t Tensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::vector<int64_t> Tensor::asInts() const {
  std::vector<int64_t> v(numel());
  for (int64_t i = 0; i < numel(); ++i) {
    if (dtype == DType::I64) std::memcpy(&v[i], bytes.data() + 8 * i, 8);
    else if (dtype == DType::Bool) v[i] = bytes[i] != 0;
    else { float f; std::memcpy(&f, bytes.data() + 4 * i, 4); v[i] = (int64_t)f; }
  }
  return v;
}

std::vector<double> Tensor::asDoubles() const {
  std::vector<double> v(numel());
  for (int64_t i = 0; i < numel(); ++i) {
    if (dtype == DType::F32) { float f; std::memcpy(&f, bytes.data() + 4 * i, 4); v[i] = f; }
    else if (dtype == DType::I64) { int64_t x; std::memcpy(&x, bytes.data() + 8 * i, 8); v[i] = (double)x; }
    else v[i] = bytes[i] != 0;
  }
  return v;
}

const Attr *Node::attr(const std::string &key) const {
  auto it = attrs.find(key);
  return it == attrs.end() ? nullptr : &it->second;
}
int64_t Node::intAttr(const std::string &key, int64_t dflt) const {
  const Attr *a = attr(key);
  return a && a->kind == Attr::Int ? a->i : dflt;
}
float Node::floatAttr(const std::string &key, float dflt) const {
  const Attr *a = attr(key);
  return a && a->kind == Attr::Float ? a->f : dflt;
}
std::string Node::strAttr(const std::string &key, const std::string &dflt) const {
  const Attr *a = attr(key);
  return a && a->kind == Attr::String ? a->s : dflt;
}
std::string Node::describe() const {
  return "node '" + (name.empty() ? (outputs.empty() ? std::string("?") : outputs[0]) : name) +
         "' (" + opType + ")";
}

// Where an external tensor's `bytes` bytes lie (ONNX external data:
// `location`, relative to the model's directory `dir`, `offset`, `length`),
// checked for where it may point, not for whether the file is there yet.
// torch.onnx.export writes models over 2 GiB so, and onnx.save_model can.
static std::string externalSource(const onnx::TensorProto &p, const std::string &dir, size_t bytes, Source &src) {
  const std::string what = "tensor '" + p.name() + "': external data";
  std::string location;
  long long offset = 0, length = -1;
  for (const auto &e : p.external_data()) {
    char *end = nullptr;
    if (e.key() == "location") {
      location = e.value();
    } else if (e.key() == "offset" || e.key() == "length") {
      errno = 0;
      long long v = std::strtoll(e.value().c_str(), &end, 10);
      if (e.value().empty() || *end || v < 0 || errno == ERANGE)
        return what + " has a bad " + e.key() + " '" + e.value() + "'";
      (e.key() == "offset" ? offset : length) = v;
    }
  }
  namespace fs = std::filesystem;
  const fs::path rel(location);
  if (location.empty()) return what + " names no location";
  // Within the model's directory, as the ONNX checker requires, and no
  // link out of it: a model must not read files its author chose.
  bool escapes = rel.is_absolute();
  for (const auto &part : rel) escapes |= part == "..";
  if (escapes) return what + " location '" + location + "' is outside the model's directory";
  fs::path at(dir);
  std::error_code ec;
  for (const auto &part : rel) {
    at /= part;
    if (fs::is_symlink(fs::symlink_status(at, ec)))
      return what + " location '" + location + "' goes through a symbolic link ('" + at.string() + "')";
  }
  if (length >= 0 && (size_t)length != bytes)
    return what + " holds " + std::to_string(length) + " bytes, expected " + std::to_string(bytes);
  src.path = fs::absolute(at, ec).lexically_normal().string();
  src.offset = (uint64_t)offset;
  src.length = bytes;
  return "";
}

// The `bytes` bytes of an external tensor into `out` (a std::string or
// std::vector<char>).
template <class Buffer>
static std::string readExternal(const onnx::TensorProto &p, const std::string &dir, size_t bytes, Buffer &out) {
  const std::string what = "tensor '" + p.name() + "': external data";
  Source src;
  if (std::string err = externalSource(p, dir, bytes, src); !err.empty())
    return err;
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string &file = src.path;
  // Not a pipe or a device either (opening one could block).
  if (!fs::is_regular_file(fs::symlink_status(file, ec)))
    return what + " file '" + file + "' cannot be read: " +
           (fs::exists(fs::symlink_status(file, ec)) ? "not a regular file" : "No such file or directory");
  std::ifstream f(file, std::ios::binary);
  if (!f) return what + " file '" + file + "' cannot be read: " + std::strerror(errno);
  const unsigned long long size = fs::file_size(file, ec);
  if (src.offset > size || bytes > size - src.offset)
    return what + " [" + std::to_string(src.offset) + ", +" + std::to_string(bytes) + ") runs past the end of '" +
           file + "' (" + std::to_string(size) + " bytes)";
  out.resize(bytes);
  if (!f.seekg((std::streamoff)src.offset) || !f.read(out.data(), (std::streamsize)bytes))
    return what + ": reading '" + file + "' failed";
  return "";
}

static bool isExternal(const onnx::TensorProto &p) {
  return p.data_location() == onnx::TensorProto::EXTERNAL;
}

// Copies a TensorProto's elements, whichever field holds them, into `t`,
// widened to the compiler's types; external data from beside the model in `dir`.
static std::string readTensor(const onnx::TensorProto &p, const std::string &dir, Tensor &t) {
  t.name = p.name();
  t.onnxType = p.data_type();
  t.dtype = dtypeOf(p.data_type());
  t.shape.assign(p.dims().begin(), p.dims().end());
  if (t.dtype == DType::Unsupported)
    return "tensor '" + t.name + "' has unsupported element type " +
           onnx::TensorProto_DataType_Name(p.data_type());
  for (int64_t d : t.shape)
    if (d < 0)
      return "tensor '" + t.name + "' has a negative dim";
  const int type = p.data_type();
  const size_t n = (size_t)t.numel(), es = elemSize(t.dtype), ss = storedSize(type);
  const std::string bad = "tensor '" + t.name + "': ";
  if (isExternal(p) && type == onnx::TensorProto::FLOAT)  // straight into place: read once
    return readExternal(p, dir, n * es, t.bytes);
  std::string raw;
  if (isExternal(p)) {
    if (std::string err = readExternal(p, dir, n * ss, raw); !err.empty())
      return err;
  } else if (p.has_raw_data()) {
    if (p.raw_data().size() != n * ss)
      return "tensor '" + t.name + "' holds " + std::to_string(p.raw_data().size()) +
             " bytes, expected " + std::to_string(n * ss);
  } else {
    // The typed fields: float_data (FLOAT), double_data (DOUBLE), int64_data
    // (INT64), uint64_data (UINT32, UINT64), int32_data (the rest, 16-bit
    // floats as their bits).
    const bool f = type == onnx::TensorProto::FLOAT, d = type == onnx::TensorProto::DOUBLE,
               i64 = type == onnx::TensorProto::INT64,
               u64 = type == onnx::TensorProto::UINT32 || type == onnx::TensorProto::UINT64;
    const size_t have = f ? p.float_data_size() : d ? p.double_data_size() : i64 ? p.int64_data_size()
                        : u64 ? p.uint64_data_size() : p.int32_data_size();
    if (have != n)
      return "tensor '" + t.name + "' holds " + std::to_string(have) + " values, expected " +
             std::to_string(n);
    raw.resize(n * ss);
    for (size_t i = 0; i < n; ++i) {
      char *at = raw.data() + i * ss;
      if (f) { float x = p.float_data(i); std::memcpy(at, &x, 4); }
      else if (d) { double x = p.double_data(i); std::memcpy(at, &x, 8); }
      else if (i64) { int64_t x = p.int64_data(i); std::memcpy(at, &x, 8); }
      else if (u64) { uint64_t x = p.uint64_data(i); std::memcpy(at, &x, ss); }
      else { int32_t x = p.int32_data(i); std::memcpy(at, &x, ss); }  // little-endian low bytes
    }
  }
  t.bytes.resize(n * es);
  const char *src = raw.empty() && p.has_raw_data() && !isExternal(p) ? p.raw_data().data() : raw.data();
  if (std::string err = widen(type, src, n, t.bytes.data()); !err.empty())
    return bad + err;
  return "";
}

static ValueInfo readValueInfo(const onnx::ValueInfoProto &v) {
  ValueInfo vi;
  vi.name = v.name();
  if (v.type().has_tensor_type()) {
    const auto &tt = v.type().tensor_type();
    vi.onnxType = tt.elem_type();
    vi.dtype = dtypeOf(tt.elem_type());
    if (tt.has_shape()) {
      vi.hasShape = true;
      for (const auto &d : tt.shape().dim())
        vi.shape.push_back(d.has_dim_value() ? d.dim_value() : -1);
    }
  } else {
    vi.dtype = DType::Unsupported;
  }
  return vi;
}

// Fixes the free dims of the (token ids, target ids) inputs to [batch, seq].
static std::string fixInputDims(onnx::ModelProto &m, const LoadOptions &opts) {
  std::set<std::string> inits;
  for (const auto &t : m.graph().initializer())
    inits.insert(t.name());
  for (auto &in : *m.mutable_graph()->mutable_input()) {
    // Old exporters list initializers as inputs too: those keep their shapes.
    if (inits.count(in.name()) || !in.type().has_tensor_type() ||
        !in.type().tensor_type().has_shape())
      continue;
    auto *shape = in.mutable_type()->mutable_tensor_type()->mutable_shape();
    for (int i = 0; i < shape->dim_size(); ++i) {
      auto *d = shape->mutable_dim(i);
      int64_t want = i == 0 ? opts.batch : i == 1 ? opts.seq : 0;
      if (d->has_dim_value()) {
        if (want && d->dim_value() != want)
          return "input '" + in.name() + "' has fixed dim " + std::to_string(i) + " = " +
                 std::to_string(d->dim_value()) + ", but --" + (i == 0 ? "batch " : "seq ") +
                 std::to_string(want) + " was given";
        continue;
      }
      if (!want)
        return "input '" + in.name() + "' has a dynamic dim " + std::to_string(i) + " ('" +
               d->dim_param() + "'): give its size with --" + (i == 0 ? "batch" : i == 1 ? "seq" : "?");
      d->clear_dim_param();
      d->set_dim_value(want);
    }
  }
  return "";
}

// What the ONNX checker would refuse and the importer relies on: one
// definition per name, every input defined before it is read, no sparse or
// nested graphs, and only types the compiler reads flowing in.
static std::string checkGraph(const onnx::GraphProto &g) {
  if (g.sparse_initializer_size())
    return "sparse initializers are not supported";
  std::set<std::string> defined;
  auto define = [&](const std::string &name, const char *what) -> std::string {
    if (name.empty())
      return std::string("a ") + what + " has no name";
    if (!defined.insert(name).second)
      return std::string("the name '") + name + "' is defined twice (" + what + ")";
    return "";
  };
  for (const auto &t : g.initializer())
    if (std::string err = define(t.name(), "initializer"); !err.empty())
      return err;
  for (const auto &v : g.input())
    if (!defined.count(v.name()))  // old exporters list initializers as inputs too
      if (std::string err = define(v.name(), "graph input"); !err.empty())
        return err;
  for (int i = 0; i < g.node_size(); ++i) {
    const auto &n = g.node(i);
    const std::string what = "node '" + (n.name().empty() ? std::to_string(i) : n.name()) + "' (" +
                             n.op_type() + ")";
    if (n.op_type().empty())
      return what + " has no op type";
    for (const auto &a : n.attribute())
      if (a.has_g() || a.graphs_size())
        return what + ": attribute '" + a.name() + "' holds a subgraph (control flow is not supported)";
    for (const auto &in : n.input())
      if (!in.empty() && !defined.count(in))
        return what + ": input '" + in + "' is not defined before it is read";
    for (const auto &o : n.output())
      if (!o.empty())
        if (std::string err = define(o, "node output"); !err.empty())
          return what + ": " + err;
  }
  for (const auto &v : g.output())
    if (!defined.count(v.name()))
      return "graph output '" + v.name() + "' is not produced by any node";
  return "";
}

// ONNX IR 10 gave ValueInfoProto `metadata_props` (field 4), which Debian's
// ONNX schema predates: protobuf keeps it among the unknown fields. torch's
// dynamo exporter writes there, for each initializer, what torch.export
// called it ("pkg.torch.export.graph_signature.InputSpec.kind": PARAMETER,
// BUFFER, CONSTANT_TENSOR).
static void torchExportKinds(const onnx::GraphProto &g, Model &out) {
  for (const auto &v : g.value_info()) {
    const auto &unknown = v.GetReflection()->GetUnknownFields(v);
    for (int i = 0; i < unknown.field_count(); ++i) {
      const auto &f = unknown.field(i);
      if (f.number() != 4 || f.type() != google::protobuf::UnknownField::TYPE_LENGTH_DELIMITED)
        continue;
      onnx::StringStringEntryProto entry;
      if (!entry.ParseFromString(f.length_delimited()) ||
          entry.key() != "pkg.torch.export.graph_signature.InputSpec.kind")
        continue;
      if (entry.value() == "BUFFER" || entry.value() == "CONSTANT_TENSOR")
        out.torchBuffers.push_back(v.name());
      else if (entry.value() == "PARAMETER")
        out.torchParams.push_back(v.name());
    }
  }
}

// A binary ONNX file, mapped: its parameters' pages are never touched.
struct MappedFile {
  const char *data = nullptr;
  size_t size = 0;
  MappedFile() = default;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile() {
    if (data)
      ::munmap(const_cast<char *>(data), size);
  }
};

// An initializer's raw_data left in the file: where it lies.
struct InFile {
  uint64_t offset = 0, length = 0;
};

// The serialized ModelProto `d` with each initializer's raw_data cut out
// (ModelProto.graph (7) -> GraphProto.initializer (5) -> TensorProto.raw_data
// (9)), recorded in `cut` by tensor name (8), and the tensor marked as ONNX
// external data in `location` at that offset, so the ONNX checker, given the
// model's directory, finds it. Everything else is copied as it is, by walking
// protobuf's wire format; the enclosing messages' lengths are written again.
// False where the bytes are not well-formed protobuf.
static bool cutRawData(const char *d, size_t n, const std::string &location, std::string &out,
                       std::map<std::string, InFile> &cut) {
  auto varint = [&](size_t &i, size_t e, uint64_t &v) {
    v = 0;
    for (int shift = 0; i < e && shift < 64; shift += 7) {
      const uint8_t byte = uint8_t(d[i++]);
      v |= uint64_t(byte & 0x7f) << shift;
      if (!(byte & 0x80))
        return true;
    }
    return false;
  };
  auto putVarint = [](std::string &o, uint64_t v) {
    for (; v >= 0x80; v >>= 7)
      o += char(uint8_t(v) | 0x80);
    o += char(v);
  };
  auto putField = [&](std::string &o, uint32_t field, const std::string &bytes) {
    putVarint(o, uint64_t(field) << 3 | 2);
    putVarint(o, bytes.size());
    o += bytes;
  };
  // Calls onField(number, tagBegin, valueBegin, end) for each field of the
  // message in [b, e); valueBegin..end is a length-delimited field's payload.
  auto fields = [&](size_t b, size_t e, auto &&onField) {
    for (size_t i = b; i < e;) {
      const size_t at = i;
      uint64_t tag, v;
      if (!varint(i, e, tag))
        return false;
      switch (tag & 7) {
      case 0: if (!varint(i, e, v)) return false; onField(uint32_t(tag >> 3), at, i, i); break;
      case 1: if (e - i < 8) return false; i += 8; onField(uint32_t(tag >> 3), at, i, i); break;
      case 5: if (e - i < 4) return false; i += 4; onField(uint32_t(tag >> 3), at, i, i); break;
      case 2:
        if (!varint(i, e, v) || v > e - i) return false;
        i += size_t(v);
        onField(uint32_t(tag >> 3), at, i - size_t(v), i);
        break;
      default: return false;
      }
    }
    return true;
  };
  auto tensor = [&](size_t b, size_t e, std::string &o) {
    std::string name;
    InFile raw;
    bool hasRaw = false;
    const bool ok = fields(b, e, [&](uint32_t f, size_t at, size_t vb, size_t ve) {
      if (f == 9 && ve > vb) { raw = {vb, ve - vb}; hasRaw = true; return; }
      if (f == 8) name.assign(d + vb, ve - vb);
      o.append(d + at, ve - at);
    });
    if (hasRaw) {
      cut[name] = raw;
      for (const auto &[key, value] : {std::pair<const char *, std::string>{"location", location},
                                       {"offset", std::to_string(raw.offset)},
                                       {"length", std::to_string(raw.length)}}) {
        std::string entry;
        putField(entry, 1, key);
        putField(entry, 2, value);
        putField(o, 13, entry);
      }
      putVarint(o, 14 << 3);  // data_location: EXTERNAL
      putVarint(o, onnx::TensorProto::EXTERNAL);
    }
    return ok;
  };
  auto graph = [&](size_t b, size_t e, std::string &o) {
    bool ok = true;
    ok &= fields(b, e, [&](uint32_t f, size_t at, size_t vb, size_t ve) {
      if (f != 5 || vb == ve) { o.append(d + at, ve - at); return; }
      std::string t;
      ok &= tensor(vb, ve, t);
      putField(o, 5, t);
    });
    return ok;
  };
  bool ok = true;
  ok &= fields(0, n, [&](uint32_t f, size_t at, size_t vb, size_t ve) {
    if (f != 7 || vb == ve) { out.append(d + at, ve - at); return; }
    std::string g;
    ok &= graph(vb, ve, g);
    putField(out, 7, g);
  });
  return ok;
}

static std::string loadImpl(const std::string &path, const LoadOptions &opts, Model &out) {
  const std::string dir = std::filesystem::path(path).parent_path().string();
  const std::string absPath = std::filesystem::absolute(path).lexically_normal().string();
  onnx::ModelProto m;
  MappedFile file;
  std::map<std::string, InFile> inFile;  // initializers whose raw_data stays in the file
  const bool text = path.size() > 9 && path.compare(path.size() - 9, 9, ".onnxtext") == 0;
  if (text) {
    std::ifstream f(path, std::ios::binary);
    if (!f)
      return "cannot open '" + path + "': " + std::strerror(errno);
    std::stringstream ss;
    ss << f.rdbuf();
    if (ss.str().empty())
      return "'" + path + "' is empty";
    auto status = onnx::OnnxParser::Parse(m, ss.str().c_str());
    if (!status.IsOK()) {
      std::string msg = status.ErrorMessage();
      for (char &c : msg)
        if (c == '\n')
          c = ' ';
      return "'" + path + "' is not valid ONNX text: " + msg;
    }
  } else {
    // Mapped, and parsed without the initializers' raw_data: a single-file
    // model's parameters are neither read nor held (the program reads them).
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
      return "cannot open '" + path + "': " + std::strerror(errno);
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      return "cannot read '" + path + "': not a regular file";
    }
    file.size = size_t(st.st_size);
    void *p = file.size ? ::mmap(nullptr, file.size, PROT_READ, MAP_PRIVATE, fd, 0) : nullptr;
    const int mapErr = errno;
    ::close(fd);
    if (!file.size)
      return "'" + path + "' is empty";
    if (p == MAP_FAILED)
      return "cannot read '" + path + "': " + std::strerror(mapErr);
    file.data = static_cast<const char *>(p);
    std::string slim;
    if (!cutRawData(file.data, file.size, std::filesystem::path(path).filename().string(), slim, inFile) ||
        !m.ParseFromString(slim) || !m.has_graph())
      return "'" + path + "' is not an ONNX model (cannot parse a ModelProto)";
  }

  bool externalMissing = false;  // files of external data not there
  for (const auto &t : m.graph().initializer()) {
    if (!isExternal(t) || inFile.count(t.name())) continue;
    if (dtypeOf(t.data_type()) == DType::Unsupported)
      continue;  // never read
    Source src;
    int64_t n = 1;
    for (int64_t d : t.dims()) n *= d;
    if (std::string err = externalSource(t, dir, size_t(n) * storedSize(t.data_type()), src); !err.empty())
      return "'" + path + "': " + err;
    std::error_code ec;
    externalMissing |= !std::filesystem::is_regular_file(src.path, ec);
  }

  for (const auto &op : m.opset_import())
    if (op.domain().empty() || op.domain() == "ai.onnx")
      out.opset = op.version();
  if (m.ir_version() > kMaxIrVersion)
    return "'" + path + "' is ONNX IR version " + std::to_string(m.ir_version()) +
           ", newer than this compiler reads (up to " + std::to_string(kMaxIrVersion) + ")";
  if (out.opset > kMaxOpset)
    return "'" + path + "' imports default-domain opset " + std::to_string(out.opset) +
           ", newer than this compiler reads (up to " + std::to_string(kMaxOpset) + ")";
  // Debian's ONNX library knows IR 8 and opsets up to 17: its checker stays
  // with the files it knows (its shape inference not at all: the importer
  // computes every shape itself, and that inference refuses valid files, a
  // Cast that wraps in shape arithmetic). A newer file would be
  // checked against older schemas (opset 18's Split and Reduce* differ), so
  // the graph's structure is checked here and each op by its handler.
  // (and its checker looks for external data files: without them, a model
  // compiled before its weights are there gets the structural check.)
  const bool known = m.ir_version() <= 8 && out.opset <= 17 && !externalMissing;
  if (!known) {
    if (std::string err = checkGraph(m.graph()); !err.empty())
      return "'" + path + "': " + err;
  } else {
    try {
      // check_model's checks, with the model's directory: where the checker
      // finds external data (the raw_data left in the file among them).
      if (!m.ir_version())
        return "'" + path + "' fails the ONNX checker: the model has no ir_version";
      onnx::checker::CheckerContext ctx;
      ctx.set_ir_version(int(m.ir_version()));
      std::unordered_map<std::string, int> opsets;
      for (const auto &op : m.opset_import())
        opsets[op.domain()] = int(op.version());
      ctx.set_opset_imports(opsets);
      ctx.set_model_dir(dir.empty() ? "." : dir);
      onnx::checker::LexicalScopeContext scope;
      onnx::checker::check_graph(m.graph(), ctx, scope);
      onnx::checker::check_model_local_functions(m, ctx, scope);
    } catch (const std::exception &e) {
      std::string msg = e.what();
      for (char &c : msg) if (c == '\n') c = ' ';
      return "'" + path + "' fails the ONNX checker: " + msg;
    }
  }

  // Read before fixInputDims drops the value_info.
  torchExportKinds(m.graph(), out);
  if (std::string err = fixInputDims(m, opts); !err.empty())
    return err;

  const auto &g = m.graph();
  out.path = path;
  for (const auto &kv : m.metadata_props())
    out.metadata[kv.key()] = kv.value();
  if (auto it = out.metadata.find("fuyou.aliases"); it != out.metadata.end()) {
    std::stringstream pairs(it->second);
    for (std::string pair; std::getline(pairs, pair, ';');)
      if (size_t eq = pair.find('='); eq != std::string::npos && eq > 0 && eq + 1 < pair.size())
        out.aliases.push_back({pair.substr(0, eq), pair.substr(eq + 1)});
  }
  if (auto it = out.metadata.find("fuyou.frozen"); it != out.metadata.end()) {
    std::stringstream names(it->second);
    for (std::string name; std::getline(names, name, ',');) {
      const size_t b = name.find_first_not_of(" \t\n\v\f\r"), e = name.find_last_not_of(" \t\n\v\f\r");
      if (b == std::string::npos)
        continue;
      name = name.substr(b, e - b + 1);
      if (std::find(out.torchBuffers.begin(), out.torchBuffers.end(), name) == out.torchBuffers.end())
        out.torchBuffers.push_back(name);
    }
  }
  std::map<std::string, bool> isInit;
  const std::set<std::string> buffers(out.torchBuffers.begin(), out.torchBuffers.end());
  for (auto &t : *m.mutable_graph()->mutable_initializer()) {
    Tensor tensor;
    tensor.name = t.name();
    tensor.onnxType = t.data_type();
    tensor.dtype = dtypeOf(t.data_type());
    tensor.shape.assign(t.dims().begin(), t.dims().end());
    isInit[t.name()] = true;
    if (tensor.dtype == DType::Unsupported) {  // kept without data: an error only if the loss reads it
      out.initializers.push_back(std::move(tensor));
      continue;
    }
    int64_t n = 1;
    for (int64_t d : tensor.shape) {
      if (d < 0)
        return "'" + path + "': tensor '" + t.name() + "' has a negative dim";
      n = d && n > (int64_t(1) << 62) / d ? (int64_t(1) << 62) : n * d;
    }
    const uint64_t stored = uint64_t(n) * storedSize(t.data_type());
    const bool fold = tensor.dtype == DType::F32 ? n <= kMaxReadScalars || (buffers.count(t.name()) && n <= kMaxReadElements)
                                                 : n <= kMaxReadElements;
    const auto kept = inFile.find(t.name());
    if (kept != inFile.end() && kept->second.length != stored)
      return "'" + path + "': tensor '" + t.name() + "' holds " + std::to_string(kept->second.length) +
             " bytes, expected " + std::to_string(stored);
    if (!fold && kept != inFile.end()) {
      tensor.source = {absPath, kept->second.offset, stored};
    } else if (!fold && isExternal(t)) {
      if (std::string err = externalSource(t, dir, stored, tensor.source); !err.empty())
        return "'" + path + "': " + err;
    } else {
      // Folded, or in typed fields or ONNX text: read here (such tensors are
      // small), and the program gets them in its own weights file.
      if (kept != inFile.end()) {  // its raw_data back from the mapped file
        t.clear_external_data();
        t.clear_data_location();
        t.set_raw_data(file.data + kept->second.offset, kept->second.length);
      }
      if (std::string err = readTensor(t, dir, tensor); !err.empty())
        return "'" + path + "': " + err;
      tensor.loaded = true;
    }
    out.initializers.push_back(std::move(tensor));
  }
  for (const auto &v : g.input())
    if (!isInit.count(v.name()))   // old exporters list initializers as inputs too
      out.inputs.push_back(readValueInfo(v));
  for (const auto &v : g.output())
    out.outputs.push_back(readValueInfo(v));

  for (const auto &n : g.node()) {
    Node node;
    node.name = n.name();
    node.opType = n.op_type();
    node.domain = n.domain();
    node.inputs.assign(n.input().begin(), n.input().end());
    node.outputs.assign(n.output().begin(), n.output().end());
    for (const auto &a : n.attribute()) {
      Attr attr;
      switch (a.type()) {
      case onnx::AttributeProto::INT: attr.kind = Attr::Int; attr.i = a.i(); break;
      case onnx::AttributeProto::FLOAT: attr.kind = Attr::Float; attr.f = a.f(); break;
      case onnx::AttributeProto::STRING: attr.kind = Attr::String; attr.s = a.s(); break;
      case onnx::AttributeProto::INTS:
        attr.kind = Attr::Ints; attr.ints.assign(a.ints().begin(), a.ints().end()); break;
      case onnx::AttributeProto::FLOATS:
        attr.kind = Attr::Floats; attr.floats.assign(a.floats().begin(), a.floats().end()); break;
      case onnx::AttributeProto::TENSOR:
        attr.kind = Attr::TensorValue;
        if (std::string err = readTensor(a.t(), dir, attr.t); !err.empty())
          return node.describe() + ": attribute '" + a.name() + "': " + err;
        break;
      default: attr.kind = Attr::Other; break;
      }
      node.attrs[a.name()] = std::move(attr);
    }
    out.nodes.push_back(std::move(node));
  }
  return "";
}

bool Model::isTorchBuffer(const std::string &name) const {
  return std::find(torchBuffers.begin(), torchBuffers.end(), name) != torchBuffers.end();
}

std::string loadModel(const std::string &path, const LoadOptions &opts, Model &out) {
  try {
    return loadImpl(path, opts, out);
  } catch (const std::exception &e) {
    return std::string("reading '") + path + "': " + e.what();
  }
}

} // namespace fuyou::onnx_in

#include <regex>

namespace fuyou::onnx_in {
std::string NameFilter::add(const std::string &pattern) {
  try {
    regexes_.push_back(new std::regex(pattern, std::regex::ECMAScript));
    patterns_.push_back(pattern);
    used_.push_back(false);
    return "";
  } catch (const std::regex_error &e) {
    return "invalid --freeze regex '" + pattern + "': " + e.what();
  }
}
bool NameFilter::matches(const std::string &name) const {
  bool any = false;
  for (size_t i = 0; i < regexes_.size(); ++i)
    if (std::regex_match(name, *static_cast<std::regex *>(regexes_[i])))
      any = used_[i] = true;
  return any;
}
std::vector<std::string> NameFilter::unused() const {
  std::vector<std::string> out;
  for (size_t i = 0; i < patterns_.size(); ++i)
    if (!used_[i])
      out.push_back(patterns_[i]);
  return out;
}
NameFilter::~NameFilter() {
  for (void *r : regexes_)
    delete static_cast<std::regex *>(r);
}
} // namespace fuyou::onnx_in
