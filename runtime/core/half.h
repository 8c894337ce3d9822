// 16-bit floats: bf16 and IEEE fp16 as storage (DType::BF16, DType::F16).
// Arithmetic is never done in them: values widen to float exactly, and a
// float narrows to nearest, ties to even (fp16: past 65504 to inf; NaN
// stays NaN), as the GPU's conversions do.
#pragma once

#include <cstdint>

namespace fy {

// The nearest bf16 / fp16 value, as a float.
float round_to_bf16(float x);
float round_to_fp16(float x);

uint16_t bf16_bits(float x);
uint16_t fp16_bits(float x);
float bf16_value(uint16_t h);
float fp16_value(uint16_t h);

}  // namespace fy
