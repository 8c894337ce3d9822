// A machine profile for the compiler's cost model, as fuyou-calibrate
// measures it: one JSON object, one key per line, in this order
//
//   {
//     "format": "fuyou-profile-1",
//     "target": "cpu",                      (or "cuda")
//     "device": "<CPU model or GPU name>",
//     "matmul_precision": "fp32",           (or "bf16": 16-bit operand copies
//                                            included in the matmul figures)
//     "matmul_flops_per_s": 1.2e+11,        (n x n x n products, n = matmul_n)
//     "matmul_n": 1024,
//     "matmul_n64_flops_per_s": ...,        (the same at n = 64 and 256: small
//     "matmul_n256_flops_per_s": ...,        products run below the large rate)
//     "matmul_n1024_flops_per_s": ...,      (and at 1024 and 2048, only where
//     "matmul_n2048_flops_per_s": ...,       matmul_n is larger)
//     "device_mem_bytes_per_s": ...,
//     "transcendental_elems_per_s": ...,    (tanh-GELU: activations bound by arithmetic)
//     "softmax_elems_per_s": ...,           (softmax over rows of 256)
//     "norm_elems_per_s": ...,              (layer norm over rows of 256: row statistics)
//     "norm_grad_elems_per_s": ...,         (its gradient, the column sums included)
//     "attention_flops_per_s": ...,         (fused causal attention, forward and backward,
//                                            in its products' flops; where the target has it)
//     "launch_s": ...,
//     "h2d_bytes_per_s": ...,
//     "d2h_bytes_per_s": ...,
//     "ssd_read_bytes_per_s": ...,           (only when an SSD was measured)
//     "ssd_write_bytes_per_s": ...,
//     "adamw_params_per_s": ...,
//     "adamw_alone_params_per_s": ...        (only on a device)
//   }
//
// with every number printed as %.6g and positive. The compiler reads it with
// its own JSON parser, so this side only writes.
#pragma once

#include <optional>
#include <string>

namespace fy {

struct Profile {
  std::string target;  // "cpu" or "cuda": the runtime library the figures come from
  std::string device;  // CPU model name or GPU name
  std::string matmul_precision;       // the target's default: "fp32" (cpu) or "bf16" (cuda)
  double matmul_flops_per_s = 0;      // matmul at that precision
  double matmul_n = 0;                // ... measured on n x n x n products
  double matmul_n64_flops_per_s = 0;
  double matmul_n256_flops_per_s = 0;
  std::optional<double> matmul_n1024_flops_per_s;  // where matmul_n is larger
  std::optional<double> matmul_n2048_flops_per_s;
  double device_mem_bytes_per_s = 0;  // elementwise kernel, bytes read + written
  double transcendental_elems_per_s = 0;  // elements of tanh-GELU
  double softmax_elems_per_s = 0;         // elements of a softmax over rows of 256
  double norm_elems_per_s = 0;            // elements of a layer norm over rows of 256
  double norm_grad_elems_per_s = 0;       // ... of its gradient (dx, dscale, dbias)
  // Fused causal attention, forward and backward, in its products' flops
  // (where the target has the kernel).
  std::optional<double> attention_flops_per_s;
  double launch_s = 0;                // fixed cost of one kernel
  double h2d_bytes_per_s = 0;         // host (page-locked) to device
  double d2h_bytes_per_s = 0;
  std::optional<double> ssd_read_bytes_per_s;  // TensorStore, O_DIRECT
  std::optional<double> ssd_write_bytes_per_s;
  double adamw_params_per_s = 0;  // CPU AdamW, fp32 moments, the optimizer's threads
  // On a device adamw_params_per_s is measured beside host<->device copies,
  // as in a step; this is the same with nothing beside it, for reference.
  std::optional<double> adamw_alone_params_per_s;
};

// The profile's text. Fails (fy::Error) on a figure that is not a positive
// finite number: a profile that says a transfer is free would mislead the
// planner silently.
std::string profile_json(const Profile& p);

// Writes profile_json(p) to `path` through a temporary file in the same
// directory and a rename, so `path` never holds a partial profile. Fails
// (fy::Error) naming the path.
void write_profile(const std::string& path, const Profile& p);

}  // namespace fy
