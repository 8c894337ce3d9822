#include "core/tensor.h"

#include <cstdlib>
#include <cstring>
#include <utility>

namespace fy {

size_t dtype_size(DType dt) {
  switch (dt) {
    case DType::F32: return 4;
    case DType::F64: return 8;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::BF16: return 2;
    case DType::F16: return 2;
  }
  fail("fy::dtype_size: invalid dtype");
}

const char* dtype_name(DType dt) {
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

void fail(const std::string& msg) { throw Error(msg); }

Shape::Shape(std::initializer_list<int64_t> dims) {
  if (dims.size() > size_t(kMaxRank)) fail("fy::Shape: rank > 8");
  for (int64_t v : dims) d[rank++] = v;
}

Shape::Shape(const std::vector<int64_t>& dims) : Shape(dims.data(), int(dims.size())) {}

Shape::Shape(const int64_t* dims, int r) {
  if (r < 0 || r > kMaxRank) fail("fy::Shape: rank out of range: " + std::to_string(r));
  rank = r;
  for (int i = 0; i < r; ++i) d[i] = dims[i];
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < rank; ++i) n *= d[i];
  return n;
}

bool Shape::operator==(const Shape& o) const {
  if (rank != o.rank) return false;
  for (int i = 0; i < rank; ++i)
    if (d[i] != o.d[i]) return false;
  return true;
}

std::string Shape::str() const {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) {
    if (i) s += ",";
    s += std::to_string(d[i]);
  }
  return s + "]";
}

View View::reshaped(Shape s) const {
  if (s.numel() != numel())
    fail("fy::View::reshaped: cannot reshape " + shape.str() + " to " + s.str());
  View v = *this;
  v.shape = s;
  return v;
}

HostTensor::HostTensor(Shape shape, DType dtype) {
  size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  size_t alloc = (bytes + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, alloc ? alloc : 64);
  if (!p) fail("fy::HostTensor: out of memory allocating " + std::to_string(bytes) + " bytes");
  std::memset(p, 0, alloc ? alloc : 64);
  view_ = View{p, shape, dtype};
}

HostTensor::~HostTensor() { std::free(view_.data); }

HostTensor::HostTensor(HostTensor&& o) noexcept : view_(o.view_) { o.view_.data = nullptr; }

HostTensor& HostTensor::operator=(HostTensor&& o) noexcept {
  if (this != &o) {
    std::free(view_.data);
    view_ = o.view_;
    o.view_.data = nullptr;
  }
  return *this;
}

}  // namespace fy
