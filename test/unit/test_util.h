// Shared helpers for the runtime unit tests: seeded random tensors, naive
// broadcasting index maps, and a central-difference gradient checker.
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace fyt {

using fy::DType;
using fy::HostTensor;
using fy::Shape;
using fy::View;

struct Rng {
  std::mt19937_64 gen;
  explicit Rng(uint64_t seed) : gen(seed) {}
  double uniform(double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(gen); }
  int64_t integer(int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(gen); }
};

// Element i of any view, as double / set from double.
double get(const View& v, int64_t i);
void set(const View& v, int64_t i, double x);

HostTensor rand_tensor(Shape s, DType dt, Rng& rng, double lo = -1, double hi = 1);
HostTensor make_tensor(Shape s, DType dt, const std::vector<double>& values);

// Multi-index of a linear row-major position, and the linear position in `in`
// that numpy broadcasting maps it to when `in` is broadcast to `out`.
std::vector<int64_t> unravel(const Shape& s, int64_t i);
int64_t broadcast_source(const Shape& in, const Shape& out, int64_t out_linear);

// Element-wise |got - want| <= atol + rtol * |want|, reporting the first misses.
void expect_close(const View& got, const View& want, double rtol, double atol, const std::string& what = "");

// Checks analytic gradients against central differences of
// L = sum_k <r_k, outputs_k> with random projections r_k (fed as douts).
struct GradCase {
  std::vector<HostTensor*> inputs;   // perturbed one element at a time
  std::vector<HostTensor*> grads;    // analytic dL/d(input), parallel to inputs; nullptr = skip
  std::vector<HostTensor*> outputs;  // projected outputs of forward
  std::vector<HostTensor*> douts;    // parallel to outputs, receive r_k
  std::function<void()> forward;
  std::function<void()> backward;    // reads douts, writes grads
};
void check_grad(GradCase& c, uint64_t seed = 7, double eps = 1e-6, double tol = 1e-6);

// The message of the fy::Error that f throws, or "" when it throws none.
std::string error_of(const std::function<void()>& f);

// Why io_uring cannot be used here (seccomp, the kernel.io_uring_disabled
// sysctl, an old kernel), or "" when it can; any other failure is not a
// reason and reads as "".
std::string io_uring_unavailable();

// Whether two tensors hold the same bytes.
bool same_bits(const HostTensor& a, const HostTensor& b);

// This process's resident-memory peak (VmHWM), in kB, since `reset` last
// cleared it; -1 where /proc/self/status has none.
int64_t peak_kb(bool reset);

// While one lives, the n-th allocation this thread asks of operator new
// (0: the next) throws std::bad_alloc: how a test reaches the out-of-memory
// paths in the middle of the runtime's work. The test binary replaces the
// global operator new for this (test_util.cpp).
struct FailNthAllocation {
  explicit FailNthAllocation(long n);
  ~FailNthAllocation();
};

}  // namespace fyt

// Skips (rather than fails) the test where io_uring is switched off.
#define FYT_SKIP_WITHOUT_IO_URING()                          \
  do {                                                       \
    std::string fyt_why_ = ::fyt::io_uring_unavailable();    \
    if (!fyt_why_.empty()) GTEST_SKIP() << fyt_why_;         \
  } while (0)
