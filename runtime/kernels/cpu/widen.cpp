#include "kernels/cpu/widen.h"

#include <cstdint>
#include <string>

#include "core/half.h"
#include "kernels/cpu/detail.h"

namespace fy::cpu {
namespace {
bool is16(DType d) { return d == DType::BF16 || d == DType::F16; }
}  // namespace

View Widening::operator()(const View& v) {
  if (!is16(v.dtype) || !v.data) return v;
  for (const Copy& c : copies_)
    if (c.narrow.data == v.data) {
      if (c.narrow.numel() != v.numel() || c.narrow.dtype != v.dtype)
        fail("fy::cpu: two 16-bit operands of one kernel overlap without being the same buffer");
      return c.wide.view().reshaped(v.shape);
    }
  copies_.push_back({v, HostTensor(v.shape, DType::F32)});
  const int64_t n = v.numel();
  const uint16_t* src = static_cast<const uint16_t*>(v.data);
  float* dst = copies_.back().wide.view().as<float>();
  if (v.dtype == DType::BF16) {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_value(src[i]);
  } else {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMin)
    for (int64_t i = 0; i < n; ++i) dst[i] = fp16_value(src[i]);
  }
  return copies_.back().wide.view();
}

std::vector<View> Widening::operator()(const std::vector<View>& vs) {
  std::vector<View> out;
  out.reserve(vs.size());
  for (const View& v : vs) out.push_back((*this)(v));
  return out;
}

void Widening::narrow_back() {
  for (const Copy& c : copies_) {
    const int64_t n = c.narrow.numel();
    const float* src = c.wide.view().as<float>();
    uint16_t* dst = static_cast<uint16_t*>(c.narrow.data);
    if (c.narrow.dtype == DType::BF16) {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMin)
      for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits(src[i]);
    } else {
#pragma omp parallel for schedule(static) if (n >= detail::kParallelMin)
      for (int64_t i = 0; i < n; ++i) dst[i] = fp16_bits(src[i]);
    }
  }
  copies_.clear();
}

}  // namespace fy::cpu
