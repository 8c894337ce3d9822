// Core tensor descriptors shared by every runtime layer. A View is a
// non-owning, dense, row-major window onto memory; kernels never allocate
// their outputs, the generated program (or a HostTensor) owns the storage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>
#include <vector>

namespace fy {

// U8 holds bool. BF16 and F16 are storage only (core/half.h): kernels widen
// them to F32.
enum class DType : uint8_t { F32, F64, I64, U8, BF16, F16 };

// Bytes per element of a dtype.
size_t dtype_size(DType dt);
// Short name used in error messages and file formats ("F32", "I64", ...).
const char* dtype_name(DType dt);

// Thrown by fail(); the executable turns it into a one-line "train: error".
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& msg) : std::runtime_error(msg) {}
};

[[noreturn]] void fail(const std::string& msg);

// Static shape, rank <= 8 (enough for every op we lower; avoids heap use).
struct Shape {
  static constexpr int kMaxRank = 8;
  int rank = 0;
  int64_t d[kMaxRank] = {};

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);
  explicit Shape(const std::vector<int64_t>& dims);
  Shape(const int64_t* dims, int rank);

  int64_t numel() const;
  int64_t operator[](int i) const { return d[i]; }
  bool operator==(const Shape& o) const;
  bool operator!=(const Shape& o) const { return !(*this == o); }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(d, d + rank); }
  std::string str() const;  // "[2,3,4]"
};

template <class T> struct DTypeOf;
template <> struct DTypeOf<float> { static constexpr DType value = DType::F32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::F64; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::I64; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::U8; };

struct View {
  void* data = nullptr;
  Shape shape;
  DType dtype = DType::F32;

  // Typed pointer; a dtype mismatch is a compiler bug, so it fails loudly
  // instead of silently reinterpreting bits.
  template <class T> T* as() const {
    if (DTypeOf<T>::value != dtype)
      fail(std::string("fy::View::as: view has dtype ") + dtype_name(dtype) +
           ", requested " + dtype_name(DTypeOf<T>::value));
    return static_cast<T*>(data);
  }
  int64_t numel() const { return shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype); }
  View reshaped(Shape s) const;
};

// Bytes of all of `views` (a kernel's operands, for its trace slice).
inline int64_t nbytes_of(std::initializer_list<View> views) {
  int64_t n = 0;
  for (const View& v : views) n += int64_t(v.nbytes());
  return n;
}

// Owning, zero-initialised, 64-byte aligned host tensor (tests, tools, and
// programs that want a simple buffer). Move-only.
class HostTensor {
 public:
  HostTensor() = default;
  HostTensor(Shape shape, DType dtype);
  ~HostTensor();
  HostTensor(HostTensor&& o) noexcept;
  HostTensor& operator=(HostTensor&& o) noexcept;
  HostTensor(const HostTensor&) = delete;
  HostTensor& operator=(const HostTensor&) = delete;

  View view() const { return view_; }
  operator View() const { return view_; }
  template <class T> T* as() const { return view_.as<T>(); }
  int64_t numel() const { return view_.numel(); }
  const Shape& shape() const { return view_.shape; }

 private:
  View view_;
};

}  // namespace fy
