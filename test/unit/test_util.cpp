#include "test_util.h"

#include <liburing.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>

#include "core/half.h"

namespace fyt {

double get(const View& v, int64_t i) {
  switch (v.dtype) {
    case DType::F32: return static_cast<const float*>(v.data)[i];
    case DType::F64: return static_cast<const double*>(v.data)[i];
    case DType::I64: return double(static_cast<const int64_t*>(v.data)[i]);
    case DType::U8: return static_cast<const uint8_t*>(v.data)[i];
    case DType::BF16: return fy::bf16_value(static_cast<const uint16_t*>(v.data)[i]);
    case DType::F16: return fy::fp16_value(static_cast<const uint16_t*>(v.data)[i]);
  }
  return 0;
}

void set(const View& v, int64_t i, double x) {
  switch (v.dtype) {
    case DType::F32: static_cast<float*>(v.data)[i] = float(x); break;
    case DType::F64: static_cast<double*>(v.data)[i] = x; break;
    case DType::I64: static_cast<int64_t*>(v.data)[i] = int64_t(x); break;
    case DType::U8: static_cast<uint8_t*>(v.data)[i] = uint8_t(x); break;
    case DType::BF16: static_cast<uint16_t*>(v.data)[i] = fy::bf16_bits(float(x)); break;
    case DType::F16: static_cast<uint16_t*>(v.data)[i] = fy::fp16_bits(float(x)); break;
  }
}

HostTensor rand_tensor(Shape s, DType dt, Rng& rng, double lo, double hi) {
  HostTensor t(s, dt);
  for (int64_t i = 0; i < t.numel(); ++i) set(t.view(), i, rng.uniform(lo, hi));
  return t;
}

HostTensor make_tensor(Shape s, DType dt, const std::vector<double>& values) {
  HostTensor t(s, dt);
  EXPECT_EQ(int64_t(values.size()), t.numel());
  for (int64_t i = 0; i < t.numel() && i < int64_t(values.size()); ++i) set(t.view(), i, values[size_t(i)]);
  return t;
}

std::vector<int64_t> unravel(const Shape& s, int64_t i) {
  std::vector<int64_t> idx(size_t(s.rank));
  for (int d = s.rank - 1; d >= 0; --d) {
    idx[size_t(d)] = i % s.d[d];
    i /= s.d[d];
  }
  return idx;
}

int64_t broadcast_source(const Shape& in, const Shape& out, int64_t out_linear) {
  std::vector<int64_t> oi = unravel(out, out_linear);
  int64_t lin = 0;
  for (int d = 0; d < in.rank; ++d) {
    int od = d + (out.rank - in.rank);
    int64_t k = in.d[d] == 1 ? 0 : oi[size_t(od)];
    lin = lin * in.d[d] + k;
  }
  return lin;
}

void expect_close(const View& got, const View& want, double rtol, double atol, const std::string& what) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  int misses = 0;
  for (int64_t i = 0; i < got.numel(); ++i) {
    double g = get(got, i), w = get(want, i);
    bool ok = (std::isnan(g) && std::isnan(w)) || std::fabs(g - w) <= atol + rtol * std::fabs(w);
    if (!ok && misses++ < 5) ADD_FAILURE() << what << " element " << i << ": got " << g << ", want " << w;
  }
  EXPECT_EQ(misses, 0) << what;
}

namespace {
double project(const GradCase& c) {
  double L = 0;
  for (size_t k = 0; k < c.outputs.size(); ++k)
    for (int64_t i = 0; i < c.outputs[k]->numel(); ++i) L += get(c.outputs[k]->view(), i) * get(c.douts[k]->view(), i);
  return L;
}
}  // namespace

void check_grad(GradCase& c, uint64_t seed, double eps, double tol) {
  ASSERT_EQ(c.inputs.size(), c.grads.size());
  ASSERT_EQ(c.outputs.size(), c.douts.size());
  Rng rng(seed);
  for (HostTensor* d : c.douts)
    for (int64_t i = 0; i < d->numel(); ++i) set(d->view(), i, rng.uniform(-1, 1));
  c.forward();
  c.backward();
  for (size_t k = 0; k < c.inputs.size(); ++k) {
    if (!c.grads[k]) continue;
    View x = c.inputs[k]->view();
    ASSERT_EQ(x.dtype, DType::F64) << "finite differences need F64 inputs";
    int misses = 0;
    std::string report;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double x0 = get(x, i);
      set(x, i, x0 + eps);
      c.forward();
      const double lp = project(c);
      set(x, i, x0 - eps);
      c.forward();
      const double lm = project(c);
      set(x, i, x0);
      const double num = (lp - lm) / (2 * eps);
      const double ana = get(c.grads[k]->view(), i);
      if (!(std::fabs(num - ana) <= tol * std::max(1.0, std::fabs(num))) && misses++ < 5)  // NaN fails too
        report += "\n  element " + std::to_string(i) + ": analytic " + std::to_string(ana) + ", numeric " +
                  std::to_string(num);
    }
    // One failure per input, so tests of the checker can count them.
    if (misses) ADD_FAILURE() << "input " << k << ": " << misses << " gradient mismatches" << report;
  }
}

bool same_bits(const HostTensor& a, const HostTensor& b) {
  return a.view().nbytes() == b.view().nbytes() &&
         std::memcmp(a.view().data, b.view().data, a.view().nbytes()) == 0;
}

int64_t peak_kb(bool reset) {
  if (reset) std::ofstream("/proc/self/clear_refs") << "5";
  std::ifstream status("/proc/self/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("VmHWM:", 0) == 0) return std::stoll(line.substr(6));
  return -1;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const fy::Error& e) {
    return e.what();
  }
  return "";
}

std::string io_uring_unavailable() {
  io_uring ring;
  int e = io_uring_queue_init(2, &ring, 0);
  if (e == 0) {
    io_uring_queue_exit(&ring);
    return "";
  }
  if (e == -ENOSYS || e == -EPERM || e == -EACCES)
    return std::string("io_uring is not available here: ") + std::strerror(-e);
  return "";
}

namespace {
thread_local long allocations_until_failure = -1;
}  // namespace

FailNthAllocation::FailNthAllocation(long n) { allocations_until_failure = n; }
FailNthAllocation::~FailNthAllocation() { allocations_until_failure = -1; }

namespace {
bool take_allocation_failure() { return allocations_until_failure >= 0 && allocations_until_failure-- == 0; }
}  // namespace

}  // namespace fyt

void* operator new(std::size_t n) {
  if (fyt::take_allocation_failure()) throw std::bad_alloc();
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
