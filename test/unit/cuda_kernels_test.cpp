// The CUDA kernels (fy::cuda) against the CPU kernels (fy::cpu): every entry
// point of kernels/cuda/kernels.h runs on device copies of random host
// inputs and must reproduce what the CPU kernel computes from the same
// inputs. Floats: ||gpu - cpu|| / ||cpu|| <= 1e-5 (FP32 matmuls), 1e-2
// (BF16), 5e-3 (TF32); integers, masks and data movement: exactly.
//
// Every GPU run poisons its outputs first (bytes 0xFF, NaN for floats) and
// runs twice (the second time over 0x5A poison): both runs must agree bit
// for bit, which checks determinism and that no element is left unwritten
// even where the first poison happens to equal a correct value. Kernels
// must not write their inputs either.
//
// Without a CUDA device every test skips itself (passes in ctest), so CI
// machines without a GPU build and run this binary cleanly.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <tuple>
#include <string>
#include <vector>

#include "kernels/cpu/kernels.h"
#include "kernels/cuda/kernels.h"
#include "optim/adamw.h"
#include "optim/adamw_kernels.h"
#include "test_util.h"

namespace fyt {
namespace {

namespace cpu = fy::cpu;
namespace gpu = fy::cuda;
using gpu::BinOp;
using gpu::MatmulPrecision;
using gpu::UnOp;

constexpr DType F32 = DType::F32;
constexpr DType I64 = DType::I64;
constexpr DType U8 = DType::U8;

constexpr double kTol = 1e-5;       // FP32 results
constexpr double kTolBF16 = 1e-2;   // BF16 tensor-core matmuls
constexpr double kTolTF32 = 5e-3;   // TF32 tensor-core matmuls

// ---- CUDA plumbing -------------------------------------------------------------

#define FYT_CUDA(call)                                                                              \
  do {                                                                                              \
    cudaError_t fyt_err_ = (call);                                                                  \
    if (fyt_err_ != cudaSuccess)                                                                    \
      fy::fail(std::string("test: ") + #call + " failed: " + cudaGetErrorName(fyt_err_) + " (" +    \
               cudaGetErrorString(fyt_err_) + ")");                                                 \
  } while (0)

// Empty when a device is usable, else why not (reported by GTEST_SKIP).
const std::string& no_gpu_reason() {
  static const std::string reason = [] {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
      cudaGetLastError();  // not sticky; clear it
      return std::string("no usable CUDA device: cudaGetDeviceCount failed with ") + cudaGetErrorName(e) + " (" +
             cudaGetErrorString(e) + "); skipping the CUDA kernel tests";
    }
    if (n <= 0) return std::string("no CUDA device (cudaGetDeviceCount returned 0); skipping the CUDA kernel tests");
    return std::string();
  }();
  return reason;
}

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevPtr = std::unique_ptr<void, CudaFree>;

DevPtr dev_alloc(size_t bytes) {
  void* p = nullptr;
  FYT_CUDA(cudaMalloc(&p, bytes ? bytes : 1));
  return DevPtr(p);
}

// A device copy of a host view; `misalign` bytes past the allocation's start
// (0: the allocation's own, 256-byte, alignment).
View to_device(const View& h, std::vector<DevPtr>& keep, size_t misalign = 0) {
  View d = h;
  if (!h.data) return d;  // a null operand stays null
  keep.push_back(dev_alloc(h.nbytes() + misalign));
  d.data = static_cast<char*>(keep.back().get()) + misalign;
  if (h.nbytes()) FYT_CUDA(cudaMemcpy(d.data, h.data, h.nbytes(), cudaMemcpyHostToDevice));
  return d;
}

HostTensor to_host(const View& d) {
  HostTensor h(d.shape, d.dtype);
  if (d.nbytes()) FYT_CUDA(cudaMemcpy(h.view().data, d.data, d.nbytes(), cudaMemcpyDeviceToHost));
  return h;
}

View nullv(Shape s, DType dt = F32) { return View{nullptr, s, dt}; }

// ---- comparison ----------------------------------------------------------------

enum class Cmp { Close, Exact, Scratch };

// An output of the kernel under test: its shape and dtype, and how GPU and
// CPU results must agree. null: the output is not wanted (data == nullptr
// on both sides).
struct Out {
  Shape shape;
  DType dtype = F32;
  Cmp cmp = Cmp::Close;
  double tol = kTol;
  bool null = false;
};
bool is_half(DType dt) { return dt == DType::BF16 || dt == DType::F16; }
Out out(Shape s, DType dt = F32, double tol = kTol) {
  return Out{s, dt, (dt == F32 || dt == DType::F64 || is_half(dt)) ? Cmp::Close : Cmp::Exact, tol, false};
}
Out exact(Shape s, DType dt = F32) { return Out{s, dt, Cmp::Exact, 0, false}; }
Out none(Shape s, DType dt = F32) { return Out{s, dt, Cmp::Exact, 0, true}; }
// Memory the kernel works in: given, its contents afterwards not compared.
Out scratch(Shape s, DType dt = F32) { return Out{s, dt, Cmp::Scratch, 0, false}; }

bool is_float(DType dt) { return dt == F32 || dt == DType::F64; }

std::string elem_str(const View& v, int64_t i) {
  std::ostringstream os;
  os.precision(9);
  switch (v.dtype) {
    case DType::F32: os << static_cast<const float*>(v.data)[i]; break;
    case DType::F64: os << static_cast<const double*>(v.data)[i]; break;
    case DType::I64: os << static_cast<const int64_t*>(v.data)[i]; break;
    case DType::U8: os << int(static_cast<const uint8_t*>(v.data)[i]); break;
    case DType::BF16: case DType::F16: os << get(v, i); break;
  }
  return os.str();
}

std::string index_str(const Shape& s, int64_t i) {
  std::string r = std::to_string(i) + " (";
  std::vector<int64_t> mi = unravel(s, i);
  for (size_t k = 0; k < mi.size(); ++k) r += (k ? "," : "") + std::to_string(mi[k]);
  return r + ")";
}

// GPU result `got` against CPU result `want`.
void compare(const std::string& what, const View& got, const View& want, const Out& o) {
  ASSERT_EQ(got.numel(), want.numel()) << what;
  ASSERT_EQ(got.dtype, want.dtype) << what;
  const int64_t n = want.numel();
  if (o.cmp == Cmp::Close && (is_float(want.dtype) || is_half(want.dtype))) {
    double num = 0, den = 0, worst = -1;
    int64_t worst_i = -1, bad = 0;
    for (int64_t i = 0; i < n; ++i) {
      const double g = get(got, i), w = get(want, i);
      if (!std::isfinite(g) || !std::isfinite(w)) {
        // NaN and inf must match exactly (the poison is NaN, so an unwritten
        // element fails here).
        if (!((std::isnan(g) && std::isnan(w)) || g == w) && bad++ < 5)
          ADD_FAILURE() << what << ": element " << index_str(want.shape, i) << ": gpu " << elem_str(got, i)
                        << ", cpu " << elem_str(want, i);
        continue;
      }
      const double d = g - w;
      num += d * d;
      den += w * w;
      if (std::fabs(d) > worst) {
        worst = std::fabs(d);
        worst_i = i;
      }
    }
    EXPECT_EQ(bad, 0) << what << ": " << bad << " non-finite mismatches (NaN: possibly unwritten)";
    const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
    EXPECT_LE(rel, o.tol) << what << ": ||gpu - cpu|| / ||cpu|| = " << rel << " (tolerance " << o.tol
                          << "); largest difference at element "
                          << (worst_i >= 0 ? index_str(want.shape, worst_i) + ": gpu " + elem_str(got, worst_i) +
                                                 ", cpu " + elem_str(want, worst_i)
                                           : std::string("-"));
    return;
  }
  const size_t es = fy::dtype_size(want.dtype);
  int64_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    bool same;
    if (is_float(want.dtype)) {
      const double g = get(got, i), w = get(want, i);
      same = g == w || (std::isnan(g) && std::isnan(w));
    } else {
      same = std::memcmp(static_cast<const char*>(got.data) + size_t(i) * es,
                         static_cast<const char*>(want.data) + size_t(i) * es, es) == 0;
    }
    if (!same && bad++ < 5)
      ADD_FAILURE() << what << ": element " << index_str(want.shape, i) << ": gpu " << elem_str(got, i) << ", cpu "
                    << elem_str(want, i);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " of " << n << " elements differ (exact comparison)";
}

// ---- the harness ------------------------------------------------------------------

using Fn = std::function<void(const std::vector<View>& in, const std::vector<View>& out)>;

struct Results {
  std::vector<HostTensor> cpu, gpu;  // parallel to the outputs; empty for null ones
};

struct RunOpts {
  int runs = 2;          // GPU runs, each over fresh poison; all must agree bitwise
  size_t misalign = 0;   // byte offset of every device operand from its allocation
};

// Runs cpu_fn on the host inputs and gpu_fn on device copies of them (outputs
// poisoned), and compares every output. Returns both results for extra checks.
Results check_op(const std::string& what, const std::vector<View>& ins, const std::vector<Out>& outs,
                 const Fn& cpu_fn, const Fn& gpu_fn, RunOpts opts = {}) {
  SCOPED_TRACE(what);
  Results r;
  // CPU reference.
  std::vector<View> cpu_outs;
  for (const Out& o : outs) {
    if (o.null) {
      r.cpu.emplace_back();
      cpu_outs.push_back(nullv(o.shape, o.dtype));
    } else {
      r.cpu.emplace_back(o.shape, o.dtype);
      cpu_outs.push_back(r.cpu.back().view());
    }
  }
  cpu_fn(ins, cpu_outs);

  // GPU.
  std::vector<DevPtr> keep;
  std::vector<View> dins, douts;
  for (const View& h : ins) dins.push_back(to_device(h, keep, opts.misalign));
  for (const Out& o : outs) {
    View d = nullv(o.shape, o.dtype);
    if (!o.null) {
      keep.push_back(dev_alloc(d.nbytes() + opts.misalign));
      d.data = static_cast<char*>(keep.back().get()) + opts.misalign;
    }
    douts.push_back(d);
  }
  static const unsigned char kPoison[] = {0xFF, 0x5A, 0xA5, 0x00};
  std::vector<std::vector<HostTensor>> runs;
  for (int run = 0; run < opts.runs; ++run) {
    for (const View& d : douts)
      if (d.data && d.nbytes()) FYT_CUDA(cudaMemset(d.data, kPoison[run % 4], d.nbytes()));
    FYT_CUDA(cudaDeviceSynchronize());
    gpu_fn(dins, douts);
    gpu::synchronize();
    runs.emplace_back();
    for (const View& d : douts) runs.back().push_back(d.data ? to_host(d) : HostTensor());
  }

  // Inputs must come back untouched.
  for (size_t k = 0; k < ins.size(); ++k) {
    if (!ins[k].data || !ins[k].nbytes()) continue;
    HostTensor back = to_host(dins[k]);
    EXPECT_EQ(std::memcmp(back.view().data, ins[k].data, ins[k].nbytes()), 0)
        << what << ": the kernel modified input " << k;
  }
  // Every run agrees bit for bit (determinism, and no unwritten elements
  // that happened to equal the poison).
  for (size_t run = 1; run < runs.size(); ++run)
    for (size_t k = 0; k < outs.size(); ++k) {
      if (outs[k].null || outs[k].cmp == Cmp::Scratch) continue;
      const View a = runs[0][k].view(), b = runs[run][k].view();
      int64_t first = -1;
      const size_t es = fy::dtype_size(a.dtype);
      for (int64_t i = 0; i < a.numel() && first < 0; ++i)
        if (std::memcmp(static_cast<const char*>(a.data) + size_t(i) * es,
                        static_cast<const char*>(b.data) + size_t(i) * es, es) != 0)
          first = i;
      EXPECT_EQ(first, -1) << what << ": output " << k << " differs between GPU run 0 and run " << run
                           << " (non-deterministic, or elements left unwritten) at element "
                           << (first >= 0 ? index_str(a.shape, first) + ": " + elem_str(a, first) + " vs " +
                                                elem_str(b, first)
                                          : std::string());
    }
  for (size_t k = 0; k < outs.size(); ++k)
    if (!outs[k].null && outs[k].cmp != Cmp::Scratch)
      compare(what + " output " + std::to_string(k), runs[0][k].view(), r.cpu[k].view(), outs[k]);
  r.gpu = std::move(runs[0]);
  return r;
}

// ---- inputs ------------------------------------------------------------------------

HostTensor rand_f32(Shape s, Rng& rng, double lo = -1, double hi = 1) { return rand_tensor(s, F32, rng, lo, hi); }

HostTensor rand_int(Shape s, DType dt, Rng& rng, int64_t lo, int64_t hi) {
  HostTensor t(s, dt);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const int64_t v = rng.integer(lo, hi);
    if (dt == I64) t.as<int64_t>()[i] = v;
    else if (dt == U8) t.as<uint8_t>()[i] = uint8_t(v);
    else set(t.view(), i, double(v));
  }
  return t;
}

Shape bshape(const Shape& a, const Shape& b) {
  Shape s;
  s.rank = std::max(a.rank, b.rank);
  for (int i = 0; i < s.rank; ++i) {
    const int ia = i - (s.rank - a.rank), ib = i - (s.rank - b.rank);
    const int64_t da = ia >= 0 ? a.d[ia] : 1, db = ib >= 0 ? b.d[ib] : 1;
    s.d[i] = da == 1 ? db : da;
  }
  return s;
}

// Shape with dims [from, to) of s.
Shape sub(const Shape& s, int from, int to) { return Shape(s.d + from, to - from); }
Shape cat(const Shape& a, const Shape& b) {
  std::vector<int64_t> v = a.vec(), w = b.vec();
  v.insert(v.end(), w.begin(), w.end());
  return Shape(v);
}

cpu::BinOp to_cpu(BinOp op) {
  switch (op) {
    case BinOp::Add: return cpu::BinOp::Add;
    case BinOp::Sub: return cpu::BinOp::Sub;
    case BinOp::Mul: return cpu::BinOp::Mul;
    case BinOp::Div: return cpu::BinOp::Div;
    case BinOp::Pow: return cpu::BinOp::Pow;
  }
  return cpu::BinOp::Add;
}
cpu::UnOp to_cpu(UnOp op) {
  switch (op) {
    case UnOp::Neg: return cpu::UnOp::Neg;
    case UnOp::Sqrt: return cpu::UnOp::Sqrt;
    case UnOp::Reciprocal: return cpu::UnOp::Reciprocal;
    case UnOp::Exp: return cpu::UnOp::Exp;
    case UnOp::Tanh: return cpu::UnOp::Tanh;
    case UnOp::Erf: return cpu::UnOp::Erf;
    case UnOp::Sigmoid: return cpu::UnOp::Sigmoid;
    case UnOp::Gelu: return cpu::UnOp::Gelu;
    case UnOp::GeluTanh: return cpu::UnOp::GeluTanh;
    case UnOp::Silu: return cpu::UnOp::Silu;
    case UnOp::Identity: return cpu::UnOp::Identity;
  }
  return cpu::UnOp::Identity;
}
const char* name(BinOp op) {
  static const char* n[] = {"Add", "Sub", "Mul", "Div", "Pow"};
  return n[int(op)];
}
const char* name(UnOp op) {
  static const char* n[] = {"Neg", "Sqrt", "Reciprocal", "Exp", "Tanh", "Erf",
                            "Sigmoid", "Gelu", "GeluTanh", "Silu", "Identity"};
  return n[int(op)];
}
const char* name(DType dt) { return fy::dtype_name(dt); }

const BinOp kBinOps[] = {BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div, BinOp::Pow};
const UnOp kUnOps[] = {UnOp::Neg,     UnOp::Sqrt, UnOp::Reciprocal, UnOp::Exp,  UnOp::Tanh,    UnOp::Erf,
                       UnOp::Sigmoid, UnOp::Gelu, UnOp::GeluTanh,   UnOp::Silu, UnOp::Identity};

// ---- the fixture -------------------------------------------------------------------

class CudaKernels : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!no_gpu_reason().empty()) GTEST_SKIP() << no_gpu_reason();
    // A seed per test (FNV-1a of its name): fresh inputs per test, the same
    // ones on every run.
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    uint64_t h = 1469598103934665603ull;
    for (const char* p : {info->test_suite_name(), ".", info->name()})
      for (; *p; ++p) h = (h ^ uint8_t(*p)) * 1099511628211ull;
    rng.gen.seed(h);
    gpu::set_stream(nullptr);
    gpu::set_matmul_precision(MatmulPrecision::FP32);
    gpu::synchronize();  // nothing may be pending from an earlier test
  }
  void TearDown() override {
    if (!no_gpu_reason().empty()) return;
    EXPECT_NO_THROW(gpu::synchronize()) << "an error was left pending";
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << cudaGetErrorString(cudaPeekAtLastError());
    gpu::set_stream(nullptr);
    gpu::set_matmul_precision(MatmulPrecision::FP32);
  }
  Rng rng{0};
};

// ---- context ----------------------------------------------------------------------

TEST_F(CudaKernels, ContextStreamAndPrecision) {
  for (MatmulPrecision p : {MatmulPrecision::BF16, MatmulPrecision::FP16, MatmulPrecision::TF32, MatmulPrecision::FP32}) {
    gpu::set_matmul_precision(p);
    EXPECT_EQ(gpu::matmul_precision(), p);
  }
  cudaStream_t s = nullptr;
  FYT_CUDA(cudaStreamCreate(&s));
  gpu::set_stream(s);
  EXPECT_EQ(gpu::stream(), static_cast<void*>(s));
  // Kernels queued on a user stream compute the same.
  HostTensor a = rand_f32({4, 1, 8}, rng), b = rand_f32({3, 1}, rng);
  check_op("binary Add on a user stream", {a, b}, {out({4, 3, 8})},
           [](auto& in, auto& o) { cpu::binary(cpu::BinOp::Add, in[0], in[1], o[0]); },
           [](auto& in, auto& o) { gpu::binary(BinOp::Add, in[0], in[1], o[0]); });
  HostTensor x = rand_f32({37, 1001}, rng, -5, 5);
  check_op("softmax on a user stream", {x}, {out({37, 1001})},
           [](auto& in, auto& o) { cpu::softmax(in[0], o[0], -1); },
           [](auto& in, auto& o) { gpu::softmax(in[0], o[0], -1); });
  gpu::synchronize();
  gpu::set_stream(nullptr);
  EXPECT_EQ(gpu::stream(), nullptr);
  FYT_CUDA(cudaStreamDestroy(s));
}

// ---- elementwise ------------------------------------------------------------------

struct ShapePair {
  Shape a, b;
};
const std::vector<ShapePair> kBroadcast = {
    {{4, 1, 8}, {3, 1}},    {{7, 11, 13}, {7, 11, 13}},  // numel 1001: float4 paths with a tail
    {{1001}, {1001}},       {{1001}, {1}},               {{1}, {1001}},
    {Shape(), {5, 3}},      {{5, 3}, Shape()},           {{3, 1, 5}, {1, 4, 1}},
    {{300, 257}, {257}},    {{64, 4096}, {64, 1}},       {{1}, {1}},
    {{(1 << 20) + 3}, {(1 << 20) + 3}},                  {{8, 128, 768}, {768}},
};

TEST_F(CudaKernels, BinaryF32AllOpsBroadcast) {
  for (BinOp op : kBinOps)
    for (const ShapePair& c : kBroadcast) {
      const bool positive = op == BinOp::Div || op == BinOp::Pow;
      HostTensor a = positive ? rand_f32(c.a, rng, 0.5, 2) : rand_f32(c.a, rng, -2, 2);
      HostTensor b = positive ? rand_f32(c.b, rng, 0.5, 2) : rand_f32(c.b, rng, -2, 2);
      if (op == BinOp::Pow)  // the CPU squares exactly when the exponent is 2
        for (int64_t i = 0; i < b.numel(); i += 3) b.as<float>()[i] = 2.0f;
      check_op(std::string("binary F32 ") + name(op) + " " + c.a.str() + " " + c.b.str(), {a, b},
               {out(bshape(c.a, c.b))},
               [op](auto& in, auto& o) { cpu::binary(to_cpu(op), in[0], in[1], o[0]); },
               [op](auto& in, auto& o) { gpu::binary(op, in[0], in[1], o[0]); });
    }
}

TEST_F(CudaKernels, BinaryI64) {
  for (BinOp op : {BinOp::Add, BinOp::Sub, BinOp::Mul, BinOp::Div})
    for (const ShapePair& c : {ShapePair{{4, 1, 8}, {3, 1}}, ShapePair{{1001}, {1001}}, ShapePair{{1001}, {1}},
                               ShapePair{{3, 1, 5}, {1, 4, 1}}}) {
      HostTensor a = rand_int(c.a, I64, rng, -100000, 100000);
      HostTensor b = rand_int(c.b, I64, rng, 1, 50);
      // Negative divisors: division truncates toward zero, as in C++.
      for (int64_t i = 0; i < b.numel(); i += 2) b.as<int64_t>()[i] = -b.as<int64_t>()[i];
      check_op(std::string("binary I64 ") + name(op) + " " + c.a.str() + " " + c.b.str(), {a, b},
               {out(bshape(c.a, c.b), I64)},
               [op](auto& in, auto& o) { cpu::binary(to_cpu(op), in[0], in[1], o[0]); },
               [op](auto& in, auto& o) { gpu::binary(op, in[0], in[1], o[0]); });
    }
  // Large values: 64-bit arithmetic throughout.
  HostTensor a = rand_int({1001}, I64, rng, int64_t(1) << 40, int64_t(1) << 41);
  HostTensor b = rand_int({1001}, I64, rng, 1 << 20, 1 << 21);
  check_op("binary I64 Mul large", {a, b}, {out({1001}, I64)},
           [](auto& in, auto& o) { cpu::binary(cpu::BinOp::Mul, in[0], in[1], o[0]); },
           [](auto& in, auto& o) { gpu::binary(BinOp::Mul, in[0], in[1], o[0]); });
}

TEST_F(CudaKernels, Equal) {
  for (DType dt : {F32, I64, U8})
    for (const ShapePair& c : {ShapePair{{4, 1, 8}, {3, 1}}, ShapePair{{1001}, {1001}}, ShapePair{{1001}, {1}},
                               ShapePair{Shape(), {3, 5}}, ShapePair{{3, 1, 5}, {1, 4, 1}}}) {
      // Few distinct values, so about a quarter compare equal.
      HostTensor a = rand_int(c.a, dt, rng, 0, 3), b = rand_int(c.b, dt, rng, 0, 3);
      if (dt == F32 && a.numel() > 4) {
        a.as<float>()[0] = std::numeric_limits<float>::quiet_NaN();  // NaN != NaN
        a.as<float>()[1] = -0.0f;                                     // -0 == +0
      }
      if (dt == F32 && b.numel() > 4) {
        b.as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
        b.as<float>()[1] = 0.0f;
      }
      check_op(std::string("equal ") + name(dt) + " " + c.a.str() + " " + c.b.str(), {a, b},
               {out(bshape(c.a, c.b), U8)}, [](auto& in, auto& o) { cpu::equal(in[0], in[1], o[0]); },
               [](auto& in, auto& o) { gpu::equal(in[0], in[1], o[0]); });
    }
}

// Inputs where every op is defined and well conditioned.
HostTensor unary_input(UnOp op, Shape s, Rng& rng) {
  switch (op) {
    case UnOp::Sqrt: return rand_f32(s, rng, 0.05, 4);
    case UnOp::Reciprocal: {
      HostTensor t = rand_f32(s, rng, 0.2, 3);
      for (int64_t i = 0; i < t.numel(); i += 2) t.as<float>()[i] = -t.as<float>()[i];
      return t;
    }
    case UnOp::Exp: return rand_f32(s, rng, -5, 5);
    default: return rand_f32(s, rng, -5, 5);
  }
}

TEST_F(CudaKernels, UnaryAllOps) {
  for (UnOp op : kUnOps)
    for (Shape s : {Shape{1001}, Shape{1}, Shape{4, 3, 7}, Shape{(1 << 20) + 5}}) {
      HostTensor x = unary_input(op, s, rng);
      check_op(std::string("unary ") + name(op) + " " + s.str(), {x}, {out(s)},
               [op](auto& in, auto& o) { cpu::unary(to_cpu(op), in[0], o[0]); },
               [op](auto& in, auto& o) { gpu::unary(op, in[0], o[0]); });
    }
}

TEST_F(CudaKernels, UnaryGradAllOpsWithAndWithoutY) {
  for (UnOp op : kUnOps)
    for (Shape s : {Shape{1001}, Shape{8, 128, 96}}) {
      HostTensor x = unary_input(op, s, rng), dy = rand_f32(s, rng), y(s, F32);
      cpu::unary(to_cpu(op), x, y);
      const std::string base = std::string("unary_grad ") + name(op) + " " + s.str();
      check_op(base + " with y", {x, y, dy}, {out(s)},
               [op](auto& in, auto& o) { cpu::unary_grad(to_cpu(op), in[0], in[1], in[2], o[0]); },
               [op](auto& in, auto& o) { gpu::unary_grad(op, in[0], in[1], in[2], o[0]); });
      check_op(base + " y.data == nullptr", {x, nullv(s), dy}, {out(s)},
               [op](auto& in, auto& o) { cpu::unary_grad(to_cpu(op), in[0], in[1], in[2], o[0]); },
               [op](auto& in, auto& o) { gpu::unary_grad(op, in[0], in[1], in[2], o[0]); });
    }
}

TEST_F(CudaKernels, SwiGLU) {
  for (Shape s : {Shape{1001}, Shape{4, 64, 688}}) {
    HostTensor g = rand_f32(s, rng, -8, 8), u = rand_f32(s, rng), dy = rand_f32(s, rng);
    check_op("swiglu " + s.str(), {g, u}, {out(s)}, [](auto& in, auto& o) { cpu::swiglu(in[0], in[1], o[0]); },
             [](auto& in, auto& o) { gpu::swiglu(in[0], in[1], o[0]); });
    check_op("swiglu_grad " + s.str(), {g, u, dy}, {out(s), out(s)},
             [](auto& in, auto& o) { cpu::swiglu_grad(in[0], in[1], in[2], o[0], o[1]); },
             [](auto& in, auto& o) { gpu::swiglu_grad(in[0], in[1], in[2], o[0], o[1]); });
  }
}

// ---- 16-bit operands (fy-half-activations' buffers) ---------------------------------

// fn run as fy-half-activations runs a kernel that does not take 16 bits:
// on fp32 copies of the 16-bit operands, its 16-bit results narrowed after.
// cast / alloc: the target's (host or device) cast kernel and allocator.
template <class Cast, class Alloc>
void around_casts(const std::vector<View>& ins, const std::vector<View>& outs, const Fn& fn, Cast cast, Alloc alloc) {
  auto wide = [&](const View& v) {
    if (!v.data || !is_half(v.dtype)) return v;
    View w{alloc(size_t(v.numel()) * 4), v.shape, F32};
    return w;
  };
  std::vector<View> wi, wo;
  for (const View& v : ins) {
    wi.push_back(wide(v));
    if (wi.back().data != v.data) cast(v, wi.back());
  }
  for (const View& v : outs) wo.push_back(wide(v));
  fn(wi, wo);
  for (size_t k = 0; k < outs.size(); ++k)
    if (wo[k].data != outs[k].data) cast(wo[k], outs[k]);
}

Fn cpu_around_casts(Fn fn) {
  return [fn](auto& in, auto& o) {
    std::vector<std::vector<float>> keep;
    around_casts(in, o, fn, [](View x, View y) { cpu::cast(x, y); },
                 [&](size_t bytes) {
                   keep.emplace_back(bytes / 4);
                   return static_cast<void*>(keep.back().data());
                 });
  };
}

Fn gpu_around_casts(Fn fn) {
  return [fn](auto& in, auto& o) {
    std::vector<DevPtr> keep;
    around_casts(in, o, fn, [](View x, View y) { gpu::cast(x, y); },
                 [&](size_t bytes) {
                   keep.push_back(dev_alloc(bytes));
                   return keep.back().get();
                 });
    gpu::synchronize();  // before the copies are freed
  };
}

// A kernel on 16-bit operands: against the CPU's fp32 kernel between casts
// (outs' tolerance), and bit for bit what the GPU's fp32 kernel between
// casts gives (the kernel computes what it computes on fp32 operands).
void check_native16(const std::string& what, const std::vector<View>& ins, const std::vector<Out>& outs,
                    const Fn& cpu_fn, const Fn& gpu_fn) {
  Results native = check_op(what, ins, outs, cpu_around_casts(cpu_fn), gpu_fn);
  Results casts = check_op(what + " between casts", ins, outs, cpu_around_casts(cpu_fn), gpu_around_casts(gpu_fn));
  for (size_t k = 0; k < outs.size(); ++k) {
    if (native.gpu[k].view().data == nullptr) continue;
    EXPECT_EQ(std::memcmp(native.gpu[k].view().data, casts.gpu[k].view().data, native.gpu[k].view().nbytes()), 0)
        << what << ": output " << k << " differs from the fp32 kernel's between casts";
  }
}

TEST_F(CudaKernels, ElementwiseSixteenBits) {
  const double tol16 = 1e-3;
  for (DType h : {DType::BF16, DType::F16}) {
    const std::string hn = name(h);
    const Shape s{4, 64, 768}, row{768};
    // A residual add and a bias, 16-bit and fp32 mixed; a product into fp32.
    HostTensor a = rand_tensor(s, h, rng, -4, 4), b = rand_tensor(s, h, rng, -4, 4), bias = rand_f32(row, rng);
    HostTensor af = rand_f32(s, rng, -4, 4);
    for (auto [op, gop] : {std::pair{cpu::BinOp::Add, BinOp::Add}, std::pair{cpu::BinOp::Mul, BinOp::Mul},
                           std::pair{cpu::BinOp::Div, BinOp::Div}}) {
      auto c = [op](auto& in, auto& o) { cpu::binary(op, in[0], in[1], o[0]); };
      auto g = [gop](auto& in, auto& o) { gpu::binary(gop, in[0], in[1], o[0]); };
      check_native16("binary " + hn + " + " + hn, {a, b}, {out(s, h, tol16)}, c, g);
      check_native16("binary " + hn + " + F32 row", {a, bias}, {out(s, h, tol16)}, c, g);
      check_native16("binary F32 + " + hn + " into F32", {af, b}, {out(s)}, c, g);
    }
    // Unary ops and their gradients (y given, and recomputed from x).
    for (UnOp op : {UnOp::GeluTanh, UnOp::Gelu, UnOp::Silu, UnOp::Exp, UnOp::Neg}) {
      HostTensor x = rand_tensor(s, h, rng, -3, 3), dy = rand_tensor(s, h, rng, -1, 1), y(s, h);
      cpu_around_casts([op](auto& in, auto& o) { cpu::unary(to_cpu(op), in[0], o[0]); })({x.view()}, {y.view()});
      const std::string un = std::string(name(op)) + " " + hn;
      check_native16("unary " + un, {x}, {out(s, h, tol16)},
                     [op](auto& in, auto& o) { cpu::unary(to_cpu(op), in[0], o[0]); },
                     [op](auto& in, auto& o) { gpu::unary(op, in[0], o[0]); });
      auto cg = [op](auto& in, auto& o) { cpu::unary_grad(to_cpu(op), in[0], in[1], in[2], o[0]); };
      auto gg = [op](auto& in, auto& o) { gpu::unary_grad(op, in[0], in[1], in[2], o[0]); };
      check_native16("unary_grad " + un, {x, y, dy}, {out(s, h, tol16)}, cg, gg);
      check_native16("unary_grad " + un + " without y", {x, nullv(s, h), af}, {out(s, h, tol16)}, cg, gg);
    }
    // bias + GELU and its gradient: x, y, dy, dx 16-bit, b fp32.
    for (UnOp op : {UnOp::Gelu, UnOp::GeluTanh}) {
      HostTensor x = rand_tensor(s, h, rng, -5, 5), dy = rand_tensor(s, h, rng, -1, 1), y(s, h);
      auto cf = [op](auto& in, auto& o) { cpu::bias_unary(to_cpu(op), in[0], in[1], o[0]); };
      cpu_around_casts(cf)({x.view(), bias.view()}, {y.view()});
      check_native16("bias_unary " + std::string(name(op)) + " " + hn, {x, bias}, {out(s, h, tol16)}, cf,
                     [op](auto& in, auto& o) { gpu::bias_unary(op, in[0], in[1], o[0]); });
      check_native16("bias_unary_grad " + std::string(name(op)) + " " + hn, {x, bias, y, dy}, {out(s, h, tol16)},
                     [op](auto& in, auto& o) { cpu::bias_unary_grad(to_cpu(op), in[0], in[1], in[2], in[3], o[0]); },
                     [op](auto& in, auto& o) { gpu::bias_unary_grad(op, in[0], in[1], in[2], in[3], o[0]); });
    }
    // q of a fused qkv product (fp32) sliced into 16 bits, and its gradient
    // back into fp32: converted as they move.
    {
      const Shape qkv{4, 64, 3 * 768};
      HostTensor x = rand_f32(qkv, rng), dq = rand_tensor(s, h, rng, -1, 1);
      const std::vector<int64_t> starts = {0, 0, 768}, steps = {1, 1, 1};
      check_native16("slice F32 -> " + hn, {x}, {exact(s, h)},
                     [&](auto& in, auto& o) { cpu::slice(in[0], o[0], starts, steps); },
                     [&](auto& in, auto& o) { gpu::slice(in[0], o[0], starts, steps); });
      check_native16("slice_grad " + hn + " -> F32", {dq}, {exact(qkv)},
                     [&](auto& in, auto& o) { cpu::slice_grad(in[0], o[0], starts, steps); },
                     [&](auto& in, auto& o) { gpu::slice_grad(in[0], o[0], starts, steps); });
      // RoPE's halves: a 16-bit and an fp32 piece into one fp32 value.
      HostTensor lo = rand_tensor({4, 64, 12, 32}, h, rng, -1, 1), hi = rand_f32({4, 64, 12, 32}, rng);
      check_native16("concat " + hn + ", F32 -> F32", {lo, hi}, {exact({4, 64, 12, 64})},
                     [](auto& in, auto& o) { cpu::concat({in[0], in[1]}, o[0], 3); },
                     [](auto& in, auto& o) { gpu::concat({in[0], in[1]}, o[0], 3); });
    }
    // SwiGLU (the gate 16-bit, the up projection fp32).
    HostTensor gate = rand_tensor(s, h, rng, -6, 6), dy = rand_tensor(s, h, rng, -1, 1);
    check_native16("swiglu " + hn, {gate, af}, {out(s, h, tol16)},
                   [](auto& in, auto& o) { cpu::swiglu(in[0], in[1], o[0]); },
                   [](auto& in, auto& o) { gpu::swiglu(in[0], in[1], o[0]); });
    check_native16("swiglu_grad " + hn, {gate, af, dy}, {out(s, h, tol16), out(s)},
                   [](auto& in, auto& o) { cpu::swiglu_grad(in[0], in[1], in[2], o[0], o[1]); },
                   [](auto& in, auto& o) { gpu::swiglu_grad(in[0], in[1], in[2], o[0], o[1]); });
  }
}

// ---- reductions / broadcasting ----------------------------------------------------

struct ReduceCase {
  Shape x, y;
};

void check_reduce(const std::vector<ReduceCase>& cases, Rng& rng) {
  for (const ReduceCase& c : cases)
    for (bool mean : {false, true}) {
      HostTensor x = rand_f32(c.x, rng);
      check_op(std::string("reduce_to ") + (mean ? "mean " : "sum ") + c.x.str() + " -> " + c.y.str(), {x},
               {out(c.y)}, [mean](auto& in, auto& o) { cpu::reduce_to(in[0], o[0], mean); },
               [mean](auto& in, auto& o) { gpu::reduce_to(in[0], o[0], mean); });
    }
}

TEST_F(CudaKernels, ReduceToSumAndMean) {
  check_reduce({{{3000, 768}, {1, 768}},          // bias gradient of a linear layer
                {{4, 256, 768}, {1, 1, 768}},     // the same over [B,T,C]
                {{512, 1000}, {512, 1}},          // row sums
                {{1000, 50304}, {1000, 1}},       // long rows
                {{2, 3, 4, 5}, {2, 1, 4, 1}},     // alternating kept / reduced dims
                {{2, 3, 4, 5}, {1, 3, 1, 5}},
                {{7, 1001}, {7, 1001}},           // nothing reduced
                {{1, 1}, {1, 1}},
                {{3000, 768}, {1, 1}},            // everything
                {{4, 33, 17}, {4, 1, 17}}},
               rng);
}

// y of lower rank than x: the CPU left-pads y's shape with 1s.
TEST_F(CudaKernels, ReduceToLowerRankY) {
  check_reduce({{{4, 256, 768}, {768}}, {{3000, 768}, {1, 768}}, {{1000, 37}, Shape()}, {{6, 5, 4}, {5, 1}}},
               rng);
}

// reduce_sum_cast: a bias's gradient and its activation gradient's 16-bit
// copy, from one read where reduce_to sums columns; bit for bit reduce_to's
// sum and cast's copy on the same GPU, and the CPU's within reduce_to's
// tolerance (the copy exactly). Columns by float4 and one at a time (odd C,
// a misaligned x), and shapes reduce_to sums otherwise (rows, nothing, all).
TEST_F(CudaKernels, ReduceSumCastIsReduceThenCast) {
  const std::pair<Shape, Shape> cases[] = {{{8192, 768}, {768}},      {{8, 1024, 3072}, {3072}},
                                           {{4, 33, 36}, {1, 1, 36}}, {{1000, 37}, {1, 37}},
                                           {{512, 1000}, {512, 1}},   {{7, 1001}, {7, 1001}},
                                           {{3000, 768}, {1, 1}},     {{4, 33, 17}, {4, 1, 17}}};
  for (DType h : {DType::BF16, DType::F16})
    for (size_t misalign : {size_t(0), size_t(4)})
      for (const auto& [xs, ys] : cases) {
        const std::string what = std::string("reduce_sum_cast ") + xs.str() + " -> " + ys.str() + " " + name(h) +
                                 (misalign ? " misaligned" : "");
        SCOPED_TRACE(what);
        HostTensor x = rand_f32(xs, rng);
        Results r = check_op(what, {x}, {out(ys), exact(xs, h)},
                             [](auto& in, auto& o) { cpu::reduce_sum_cast(in[0], o[0], o[1]); },
                             [](auto& in, auto& o) { gpu::reduce_sum_cast(in[0], o[0], o[1]); }, RunOpts{2, misalign});
        std::vector<DevPtr> keep;
        const View dx = to_device(x.view(), keep, misalign);
        View y = nullv(ys), x16 = nullv(xs, h);
        keep.push_back(dev_alloc(y.nbytes()));
        y.data = keep.back().get();
        keep.push_back(dev_alloc(x16.nbytes()));
        x16.data = keep.back().get();
        gpu::reduce_to(dx, y, false);
        gpu::cast(dx, x16);
        gpu::synchronize();
        const HostTensor ya = to_host(y), xa = to_host(x16);
        EXPECT_EQ(std::memcmp(ya.view().data, r.gpu[0].view().data, ya.view().nbytes()), 0) << "the sum";
        EXPECT_EQ(std::memcmp(xa.view().data, r.gpu[1].view().data, xa.view().nbytes()), 0) << "the copy";
      }
}

// A GELU's input gradient never stored in fp32: its bias's sum and 16-bit
// copy bit for bit those of bias_unary_grad into fp32 then reduce_sum_cast
// on the same GPU (over 32 rows, where the latter sums columns), at GPT-2's
// and XL's MLP widths, a width not a multiple of 4, and operands 4 bytes
// off alignment; near the CPU's composition of the same.
TEST_F(CudaKernels, BiasGradSumIsGradThenSumCast) {
  const Shape cases[] = {{8, 1024, 3072}, {512, 6400}, {100, 1001}, {33, 36}};
  for (DType h : {DType::BF16, DType::F16})
    for (DType src : {h, F32})  // x, y and dy 16-bit, or fp32 (the pair's vectorised fp32 kernel)
      for (UnOp op : {UnOp::GeluTanh, UnOp::Gelu})
        for (size_t misalign : {size_t(0), size_t(4)})
          for (const Shape& xs : cases) {
            const int64_t C = xs[xs.rank - 1];
            const std::string what = std::string("bias_unary_grad_sum ") + name(op) + " " + xs.str() + " " + name(src) +
                                     " into " + name(h) + (misalign ? " misaligned" : "");
            SCOPED_TRACE(what);
            HostTensor x = rand_tensor(xs, src, rng, -3, 3), b = rand_f32({C}, rng);
            HostTensor y = rand_tensor(xs, src, rng, -1, 1), dy = rand_tensor(xs, src, rng, -1, 1);
            Results r = check_op(
                what, {x, b, y, dy}, {out({C}, F32, 1e-5), out(xs, h, 4e-3)},
                [=](auto& in, auto& o) {
                  // The CPU's kernels take fp32: the 16-bit operands widened (exactly).
                  HostTensor xf(xs, F32), yf(xs, F32), dyf(xs, F32);
                  cpu::cast(in[0], xf.view());
                  cpu::cast(in[2], yf.view());
                  cpu::cast(in[3], dyf.view());
                  cpu::bias_unary_grad_sum(to_cpu(op), xf.view(), in[1], yf.view(), dyf.view(), o[0], o[1]);
                },
                [=](auto& in, auto& o) { gpu::bias_unary_grad_sum(op, in[0], in[1], in[2], in[3], o[0], o[1]); },
                RunOpts{2, misalign});
            std::vector<DevPtr> keep;
            const View xd = to_device(x.view(), keep, misalign), bd = to_device(b.view(), keep, misalign),
                       yd = to_device(y.view(), keep, misalign), dyd = to_device(dy.view(), keep, misalign);
            View dx = nullv(xs), sum = nullv({C}), copy = nullv(xs, h);  // dx aligned, as the plan's buffers
            for (View* v : {&dx, &sum, &copy}) {
              keep.push_back(dev_alloc(v->nbytes()));
              v->data = keep.back().get();
            }
            gpu::bias_unary_grad(op, xd, bd, yd, dyd, dx);
            gpu::reduce_sum_cast(dx, sum, copy);
            gpu::synchronize();
            const HostTensor sa = to_host(sum), ca = to_host(copy);
            EXPECT_EQ(std::memcmp(sa.view().data, r.gpu[0].view().data, sa.view().nbytes()), 0) << "the sum";
            EXPECT_EQ(std::memcmp(ca.view().data, r.gpu[1].view().data, ca.view().nbytes()), 0) << "the copy";
          }
}

// swiglu_packed and its gradient: bit for bit swiglu and swiglu_grad on the
// two halves of each row, on the same GPU, fp32 and 16-bit, at the
// Llama-shaped model's width; and against the CPU's at fp32.
TEST_F(CudaKernels, SwiGLUPackedIsSwiGLUOfTheHalves) {
  for (DType h : {F32, DType::BF16, DType::F16})
    for (auto [rows, F] : {std::pair<int64_t, int64_t>{37, 5}, {8192, 2048}}) {
      const std::string what = std::string("swiglu_packed ") + name(h) + " " + std::to_string(rows) + " x 2*" +
                               std::to_string(F);
      SCOPED_TRACE(what);
      const Shape xs{rows, 2 * F}, hs{rows, F};
      HostTensor x = rand_tensor(xs, h, rng, -6, 6), dy = rand_tensor(hs, h, rng, -1, 1);
      if (h == F32)
        check_op(what, {x, dy}, {out(hs), out(xs)},
                 [](auto& in, auto& o) {
                   cpu::swiglu_packed(in[0], o[0]);
                   cpu::swiglu_packed_grad(in[0], in[1], o[1]);
                 },
                 [](auto& in, auto& o) {
                   gpu::swiglu_packed(in[0], o[0]);
                   gpu::swiglu_packed_grad(in[0], in[1], o[1]);
                 });
      std::vector<DevPtr> keep;
      const View dx_in = to_device(x.view(), keep), ddy = to_device(dy.view(), keep);
      auto dev = [&](Shape s) {
        View v = nullv(s, h);
        keep.push_back(dev_alloc(v.nbytes()));
        v.data = keep.back().get();
        return v;
      };
      View y = dev(hs), dx = dev(xs), g = dev(hs), u = dev(hs), y2 = dev(hs), dg = dev(hs), du = dev(hs);
      const size_t es = fy::dtype_size(h), row = size_t(F) * es;
      // The halves apart, row by row.
      FYT_CUDA(cudaMemcpy2D(g.data, row, dx_in.data, 2 * row, row, size_t(rows), cudaMemcpyDeviceToDevice));
      FYT_CUDA(cudaMemcpy2D(u.data, row, static_cast<char*>(dx_in.data) + row, 2 * row, row, size_t(rows),
                            cudaMemcpyDeviceToDevice));
      gpu::swiglu_packed(dx_in, y);
      gpu::swiglu_packed_grad(dx_in, ddy, dx);
      gpu::swiglu(g, u, y2);
      gpu::swiglu_grad(g, u, ddy, dg, du);
      gpu::synchronize();
      const HostTensor ya = to_host(y), yb = to_host(y2), dxa = to_host(dx), dga = to_host(dg), dua = to_host(du);
      EXPECT_EQ(std::memcmp(ya.view().data, yb.view().data, ya.view().nbytes()), 0) << "y";
      const char* p = static_cast<const char*>(dxa.view().data);
      int64_t bad = 0;
      for (int64_t r = 0; r < rows; ++r)
        bad += std::memcmp(p + r * 2 * row, static_cast<const char*>(dga.view().data) + r * row, row) != 0 ||
               std::memcmp(p + r * 2 * row + row, static_cast<const char*>(dua.view().data) + r * row, row) != 0;
      EXPECT_EQ(bad, 0) << "rows whose dgate or dup half differs";
    }
}

TEST_F(CudaKernels, BroadcastTo) {
  struct C {
    Shape x, y;
    DType dt;
  };
  for (const C& c : {C{{3, 1, 5}, {2, 3, 4, 5}, F32}, C{{1}, {1001}, F32}, C{{768}, {4, 256, 768}, F32},
                     C{Shape(), {3, 7}, F32}, C{{7, 1}, {7, 1001}, F32}, C{{2, 3}, {2, 3}, F32},
                     C{{4, 1}, {4, 6}, I64}, C{{1, 3, 1}, {5, 3, 2}, I64}, C{{1, 8}, {5, 8}, U8},
                     C{{1001}, {3, 1001}, U8}}) {
    HostTensor x = c.dt == F32 ? rand_f32(c.x, rng) : rand_int(c.x, c.dt, rng, 0, c.dt == U8 ? 255 : 1 << 30);
    check_op(std::string("broadcast_to ") + name(c.dt) + " " + c.x.str() + " -> " + c.y.str(), {x},
             {exact(c.y, c.dt)}, [](auto& in, auto& o) { cpu::broadcast_to(in[0], o[0]); },
             [](auto& in, auto& o) { gpu::broadcast_to(in[0], o[0]); });
  }
}

// ---- matmul -------------------------------------------------------------------------

// c's shape for a (trans_a) x b (trans_b), numpy style.
Shape matmul_shape(const Shape& a, const Shape& b, bool ta, bool tb) {
  const int ra = a.rank, rb = b.rank;
  const int64_t M = ta ? a[ra - 1] : a[ra - 2];
  const int64_t N = tb ? b[rb - 2] : b[rb - 1];
  return cat(bshape(sub(a, 0, ra - 2), sub(b, 0, rb - 2)), Shape{M, N});
}

// `ref`: what the CPU reference does to the operands first.
void check_matmul(Shape as, Shape bs, bool ta, bool tb, Rng& rng, MatmulPrecision p = MatmulPrecision::FP32,
                  double tol = kTol, cpu::MatmulOperands ref = cpu::MatmulOperands::FP32) {
  HostTensor a = rand_f32(as, rng), b = rand_f32(bs, rng);
  const char* pn = p == MatmulPrecision::FP32   ? "FP32"
                   : p == MatmulPrecision::TF32 ? "TF32"
                   : p == MatmulPrecision::FP16 ? "FP16"
                                                : "BF16";
  check_op(std::string("matmul ") + pn + " " + as.str() + (ta ? "^T" : "") + " x " + bs.str() + (tb ? "^T" : "") +
               (ref != cpu::MatmulOperands::FP32 ? " (CPU reference rounds its operands too)" : ""),
           {a, b}, {out(matmul_shape(as, bs, ta, tb), F32, tol)},
           [ta, tb, ref](auto& in, auto& o) {
             cpu::set_matmul_operands(ref);
             cpu::matmul(in[0], in[1], o[0], ta, tb);
             cpu::set_matmul_operands(cpu::MatmulOperands::FP32);
           },
           [ta, tb, p](auto& in, auto& o) {
             gpu::set_matmul_precision(p);
             gpu::matmul(in[0], in[1], o[0], ta, tb);
           });
  gpu::set_matmul_precision(MatmulPrecision::FP32);
}

// [.., r, c] with the last two dims swapped when t.
Shape mat(std::vector<int64_t> batch, int64_t r, int64_t c, bool t) {
  batch.push_back(t ? c : r);
  batch.push_back(t ? r : c);
  return Shape(batch);
}

TEST_F(CudaKernels, MatmulFP32) {
  check_matmul({64, 96}, {96, 80}, false, false, rng);
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      check_matmul(mat({2, 3}, 33, 17, ta), mat({2, 3}, 17, 29, tb), ta, tb, rng);  // batched
      check_matmul(mat({4}, 33, 17, ta), mat({}, 17, 29, tb), ta, tb, rng);         // b shared
      check_matmul(mat({}, 33, 17, ta), mat({4}, 17, 29, tb), ta, tb, rng);         // a shared
      check_matmul(mat({2, 1}, 8, 5, ta), mat({1, 3}, 5, 7, tb), ta, tb, rng);      // both broadcast
      check_matmul(mat({}, 64, 96, ta), mat({}, 96, 80, tb), ta, tb, rng);
    }
  check_matmul({2, 1, 8, 5}, {1, 3, 5, 7}, false, false, rng);
  check_matmul({3, 2, 1, 8, 5}, {4, 5, 7}, false, false, rng);  // ranks differ
  // Degenerate extents.
  check_matmul({5, 1}, {1, 7}, false, false, rng);     // K = 1
  check_matmul({1, 300}, {300, 1}, false, false, rng); // M = N = 1
  check_matmul({1, 1}, {1, 1}, false, false, rng);
  check_matmul({3, 1, 300}, {3, 300, 1}, false, false, rng);
}

TEST_F(CudaKernels, MatmulGptShapesFP32) {
  // x @ W (qkv projection), dx = dy @ W^T, dW = x^T @ dy.
  check_matmul({8, 128, 768}, {768, 2304}, false, false, rng);
  check_matmul({8, 128, 2304}, {768, 2304}, false, true, rng);
  check_matmul({1024, 768}, {1024, 2304}, true, false, rng);
  // Attention scores and values: [B,H,T,d] x [B,H,T,d]^T, [B,H,T,T] x [B,H,T,d].
  check_matmul({2, 12, 128, 64}, {2, 12, 128, 64}, false, true, rng);
  check_matmul({2, 12, 128, 128}, {2, 12, 128, 64}, false, false, rng);
}

TEST_F(CudaKernels, MatmulBF16) {
  check_matmul({64, 96}, {96, 80}, false, false, rng, MatmulPrecision::BF16, kTolBF16);
  check_matmul({2, 3, 17, 33}, {2, 3, 29, 17}, true, true, rng, MatmulPrecision::BF16, kTolBF16);
  check_matmul({4, 33, 17}, {17, 29}, false, false, rng, MatmulPrecision::BF16, kTolBF16);
  check_matmul({8, 128, 768}, {768, 2304}, false, false, rng, MatmulPrecision::BF16, kTolBF16);
  check_matmul({1024, 768}, {1024, 2304}, true, false, rng, MatmulPrecision::BF16, kTolBF16);
  // Broadcast batches (bf16 copies of whole operands, batch offsets into them).
  check_matmul({2, 12, 128, 128}, {2, 12, 128, 64}, false, false, rng, MatmulPrecision::BF16, kTolBF16);
  check_matmul({3, 1, 40, 24}, {1, 5, 24, 16}, false, false, rng, MatmulPrecision::BF16, kTolBF16);
  // A batched product past the bf16 scratch (128 MiB of copies): fp32 operands, FAST_16BF.
  check_matmul({2, 8200, 4100}, {2, 4100, 48}, false, false, rng, MatmulPrecision::BF16, kTolBF16);
}

// One GEMM whose 16-bit copies do not fit the scratch runs in row blocks that
// do, still on 16-bit operands: so against the CPU's bf16 (fp16) rounding of
// the same operands it agrees to fp32 sums' order (kTol), which fp32 operands
// with FAST_16BF would not.
TEST_F(CudaKernels, MatmulPastTheScratchInBlocks) {
  for (auto [p, r] : {std::pair{MatmulPrecision::BF16, cpu::MatmulOperands::BF16},
                      std::pair{MatmulPrecision::FP16, cpu::MatmulOperands::FP16}}) {
    // Row blocks of c: a's rows, a^T's columns (a's batches stacked).
    check_matmul({16384, 4100}, {4100, 48}, false, false, rng, p, kTol, r);
    check_matmul({4100, 16388}, {48, 4100}, true, true, rng, p, kTol, r);
    check_matmul({4, 4100, 4100}, {4100, 40}, false, false, rng, p, kTol, r);
    // b's copy leaves room for fewer than 1024 rows: fp32 operands at FAST_16BF
    // (FAST_16F), against the CPU's fp32 product.
    check_matmul({400, 20000}, {20000, 3000}, false, false, rng, p, kTolBF16);
    check_matmul({20000, 400}, {3000, 20000}, true, true, rng, p, kTolBF16);
  }
}

// Operands and results stored in 16 bits (fy-half-activations' buffers) go
// to cuBLASLt as they are; fp32 operands beside them are rounded. The CPU
// reference widens the 16-bit ones and rounds the fp32 ones the same way,
// so the two differ by the order of fp32 sums, then one rounding of a
// 16-bit result.
void check_matmul16(Shape as, DType at, Shape bs, DType bt, DType ct, bool ta, bool tb, Rng& rng,
                    bool accumulate = false) {
  const DType h = is_half(at) ? at : is_half(bt) ? bt : ct;
  const cpu::MatmulOperands ref = h == DType::BF16 ? cpu::MatmulOperands::BF16 : cpu::MatmulOperands::FP16;
  HostTensor a = rand_tensor(as, at, rng, -1, 1), b = rand_tensor(bs, bt, rng, -1, 1);
  const Shape cs = matmul_shape(as, bs, ta, tb);
  std::vector<View> ins = {a.view(), b.view()};
  HostTensor c0 = rand_tensor(cs, ct, rng, -1, 1);
  if (accumulate) ins.push_back(c0.view());
  check_op(std::string("matmul ") + name(at) + " " + as.str() + (ta ? "^T" : "") + " x " + name(bt) + " " +
               bs.str() + (tb ? "^T" : "") + (accumulate ? " added into " : " into ") + name(ct),
           ins, {out(cs, ct, is_half(ct) ? 4e-3 : kTol)},
           [=](auto& in, auto& o) {
             cpu::set_matmul_operands(ref);
             if (accumulate) {  // c0 + a x b, in fp32
               HostTensor p(o[0].shape, F32);
               cpu::matmul(in[0], in[1], p.view(), ta, tb);
               cpu::binary(cpu::BinOp::Add, p.view(), in[2], o[0]);
             } else {
               cpu::matmul(in[0], in[1], o[0], ta, tb);
             }
             cpu::set_matmul_operands(cpu::MatmulOperands::FP32);
           },
           [=](auto& in, auto& o) {
             if (accumulate) gpu::copy(in[2], o[0]);
             gpu::matmul_into(in[0], in[1], o[0], ta, tb, accumulate);
           });
}

TEST_F(CudaKernels, MatmulSixteenBitBuffers) {
  const DType F16 = DType::F16, BF16 = DType::BF16;
  for (DType h : {BF16, F16}) {
    // A Linear: y = x W^T (x, y 16-bit, W fp32), dx = dy W, dW = dy^T x (+=).
    check_matmul16({8, 128, 768}, h, {2304, 768}, F32, h, false, true, rng);
    check_matmul16({8, 128, 2304}, h, {2304, 768}, F32, h, false, false, rng);
    check_matmul16({1024, 2304}, h, {1024, 768}, h, F32, true, false, rng);
    check_matmul16({1024, 2304}, h, {1024, 768}, h, F32, true, false, rng, /*accumulate=*/true);
    // Attention's products, all 16-bit, batched and broadcast.
    check_matmul16({2, 12, 128, 64}, h, {2, 12, 128, 64}, h, h, false, true, rng);
    check_matmul16({3, 1, 40, 24}, h, {1, 5, 24, 16}, h, h, false, false, rng);
    // An fp32 product narrowed.
    check_matmul16({64, 96}, F32, {96, 80}, F32, h, false, false, rng);
  }
  // A weight past the scratch (128 MiB of copies): c's columns in blocks.
  check_matmul16({256, 1600}, BF16, {50257, 1600}, F32, BF16, false, true, rng);
  check_matmul16({256, 1600}, BF16, {1600, 50257}, F32, F32, false, false, rng);
  // An fp32 a past it: c's rows in blocks, b as it is.
  check_matmul16({40000, 1700}, F32, {1700, 64}, BF16, BF16, false, false, rng);
}

// fy-half-activations' product copies: a product reads a 16-bit copy of an
// fp32 operand, made by a cast, instead of rounding the operand itself. Both
// round to nearest even, so the product's bits must not change. Shapes of
// GPT-2's and GPT-2 XL's MLP backward (Conv1D: dx = dy W^T, dW = x^T dy) and
// a Linear's (dx = dy W, dW = dy^T x), within the scratch (the pass makes
// copies only for products whose fp32 operands it takes whole).
TEST_F(CudaKernels, MatmulOfARoundedCopyIsTheSame) {
  struct C {
    Shape a, b;
    bool ta, tb, copy_a;  // copy_a: a is the copied operand, else b
  };
  const C cases[] = {{{1024, 3072}, {768, 3072}, false, true, true},  {{1024, 768}, {1024, 3072}, true, false, false},
                     {{1024, 2304}, {2304, 768}, false, false, true}, {{1024, 2304}, {1024, 768}, true, false, true},
                     {{8192, 6400}, {1600, 6400}, false, true, true}, {{8192, 1600}, {8192, 6400}, true, false, false}};
  for (DType h : {DType::BF16, DType::F16}) {
    gpu::set_matmul_precision(h == DType::BF16 ? MatmulPrecision::BF16 : MatmulPrecision::FP16);
    for (const C& c : cases) {
      SCOPED_TRACE(std::string(name(h)) + " " + c.a.str() + (c.ta ? "^T" : "") + " x " + c.b.str() + (c.tb ? "^T" : ""));
      std::vector<DevPtr> keep;
      HostTensor a = rand_f32(c.a, rng), b = rand_f32(c.b, rng);
      const View da = to_device(a.view(), keep), db = to_device(b.view(), keep);
      // At 64 bytes past a 256-byte boundary, as the memory plan may place
      // it (the scratch's copies are 256-byte aligned).
      View copy = nullv(c.copy_a ? c.a : c.b, h);
      keep.push_back(dev_alloc(copy.nbytes() + 64));
      copy.data = static_cast<char*>(keep.back().get()) + 64;
      gpu::cast(c.copy_a ? da : db, copy);
      const Shape cs = matmul_shape(c.a, c.b, c.ta, c.tb);
      View own = nullv(cs), copied = nullv(cs);
      keep.push_back(dev_alloc(own.nbytes()));
      own.data = keep.back().get();
      keep.push_back(dev_alloc(copied.nbytes()));
      copied.data = keep.back().get();
      gpu::matmul(da, db, own, c.ta, c.tb);
      gpu::matmul(c.copy_a ? copy : da, c.copy_a ? db : copy, copied, c.ta, c.tb);
      gpu::synchronize();
      const HostTensor x = to_host(own), y = to_host(copied);
      EXPECT_EQ(std::memcmp(x.view().data, y.view().data, x.view().nbytes()), 0);
    }
  }
  gpu::set_matmul_precision(MatmulPrecision::FP32);
}

// A Linear's product and bias: in cuBLASLt's epilogue for one GEMM, else an
// add after the product (batched products, blocks past the scratch).
void check_matmul_bias(Shape as, DType at, Shape bs, DType ct, bool ta, bool tb, Rng& rng) {
  const Shape cs = matmul_shape(as, bs, ta, tb);
  HostTensor a = rand_tensor(as, at, rng, -1, 1), b = rand_f32(bs, rng), bias = rand_f32({cs[cs.rank - 1]}, rng);
  check_op(std::string("matmul_bias ") + name(at) + " " + as.str() + (ta ? "^T" : "") + " x " + bs.str() +
               (tb ? "^T" : "") + " into " + name(ct),
           {a, b, bias}, {out(cs, ct, is_half(ct) ? 4e-3 : kTol)},
           [=](auto& in, auto& o) {
             cpu::set_matmul_operands(cpu::MatmulOperands::BF16);
             cpu::matmul_bias(in[0], in[1], in[2], o[0], ta, tb);
             cpu::set_matmul_operands(cpu::MatmulOperands::FP32);
           },
           [=](auto& in, auto& o) {
             gpu::set_matmul_precision(MatmulPrecision::BF16);
             gpu::matmul_bias(in[0], in[1], in[2], o[0], ta, tb);
           });
  gpu::set_matmul_precision(MatmulPrecision::FP32);
}

TEST_F(CudaKernels, MatmulBias) {
  const DType BF16 = DType::BF16;
  // Stacked rows, one GEMM: in the epilogue (fp32 c and bias, both runs).
  const size_t before = gpu::matmul_bias_epilogues();
  check_matmul_bias({8, 128, 768}, F32, {2304, 768}, F32, false, true, rng);
  EXPECT_EQ(gpu::matmul_bias_epilogues() - before, 2u) << "the fp32 product's bias was not added in the epilogue";
  const size_t fp32_done = gpu::matmul_bias_epilogues();
  check_matmul_bias({8192, 1600}, BF16, {1600, 4800}, F32, false, false, rng);
  check_matmul_bias({8192, 1600}, BF16, {1600, 1600}, BF16, false, false, rng);
  check_matmul_bias({2, 3, 17, 33}, F32, {2, 3, 29, 33}, F32, false, true, rng);  // batched: added after
  check_matmul_bias({256, 1600}, BF16, {50257, 1600}, BF16, false, true, rng);     // column blocks
  // Whether cuBLASLt took an fp32 bias with 16-bit results: recorded, either way correct.
  std::printf("MatmulBias: %zu of the 16-bit products' biases added in the epilogue\n",
              gpu::matmul_bias_epilogues() - fp32_done);
}

TEST_F(CudaKernels, MatmulFP16) {
  check_matmul({64, 96}, {96, 80}, false, false, rng, MatmulPrecision::FP16, kTolBF16);
  check_matmul({2, 3, 17, 33}, {2, 3, 29, 17}, true, true, rng, MatmulPrecision::FP16, kTolBF16);
  check_matmul({8, 128, 768}, {768, 2304}, false, false, rng, MatmulPrecision::FP16, kTolBF16);
  check_matmul({3, 1, 40, 24}, {1, 5, 24, 16}, false, false, rng, MatmulPrecision::FP16, kTolBF16);
  // Against the CPU target's --precision fp16 / bf16, which rounds the same
  // operands the same way: only the order of the fp32 sums differs.
  for (auto [p, r] : {std::pair{MatmulPrecision::FP16, cpu::MatmulOperands::FP16},
                      std::pair{MatmulPrecision::BF16, cpu::MatmulOperands::BF16}}) {
    check_matmul({64, 96}, {96, 80}, false, false, rng, p, kTol, r);
    check_matmul({2, 12, 128, 128}, {2, 12, 128, 64}, false, false, rng, p, kTol, r);
    check_matmul({1024, 768}, {1024, 2304}, true, false, rng, p, kTol, r);
  }
  // A batched product past the scratch: fp32 operands, FAST_16F.
  check_matmul({2, 8200, 4100}, {2, 4100, 48}, false, false, rng, MatmulPrecision::FP16, kTolBF16);
}

TEST_F(CudaKernels, MatmulTF32) {
  check_matmul({64, 96}, {96, 80}, false, false, rng, MatmulPrecision::TF32, kTolTF32);
  check_matmul({2, 3, 17, 33}, {2, 3, 29, 17}, true, true, rng, MatmulPrecision::TF32, kTolTF32);
  check_matmul({2, 1, 8, 5}, {1, 3, 5, 7}, false, false, rng, MatmulPrecision::TF32, kTolTF32);
  check_matmul({8, 128, 768}, {768, 2304}, false, false, rng, MatmulPrecision::TF32, kTolTF32);
}

// ---- data movement --------------------------------------------------------------------

HostTensor rand_any(Shape s, DType dt, Rng& rng) {
  if (dt == F32) return rand_f32(s, rng, -100, 100);
  if (dt == U8) return rand_int(s, dt, rng, 0, 255);
  return rand_int(s, dt, rng, -(int64_t(1) << 50), int64_t(1) << 50);
}

TEST_F(CudaKernels, Transpose) {
  struct C {
    Shape x;
    std::vector<int64_t> perm;
  };
  for (DType dt : {F32, I64, U8})
    for (const C& c : {C{{2, 3, 4, 5}, {0, 2, 1, 3}}, C{{33, 65}, {1, 0}}, C{{768, 2304}, {1, 0}},
                       C{{8, 128, 12, 64}, {0, 2, 1, 3}}, C{{3, 5, 7}, {2, 0, 1}}, C{{3, 5, 7}, {1, 2, 0}},
                       C{{2, 3, 4, 5}, {3, 2, 1, 0}}, C{{1, 7, 1, 9}, {2, 3, 0, 1}}, C{{4, 6}, {0, 1}}}) {
      Shape ys;
      ys.rank = c.x.rank;
      for (int i = 0; i < ys.rank; ++i) ys.d[i] = c.x[int(c.perm[size_t(i)])];
      HostTensor x = rand_any(c.x, dt, rng);
      std::string ps;
      for (int64_t p : c.perm) ps += std::to_string(p) + " ";
      const std::vector<int64_t> perm = c.perm;
      check_op(std::string("transpose ") + name(dt) + " " + c.x.str() + " perm " + ps, {x}, {exact(ys, dt)},
               [perm](auto& in, auto& o) { cpu::transpose(in[0], o[0], perm); },
               [perm](auto& in, auto& o) { gpu::transpose(in[0], o[0], perm); });
    }
}

struct SliceCase {
  Shape x, y;
  std::vector<int64_t> starts, steps;
};
const std::vector<SliceCase> kSlices = {
    {{10, 12, 9}, {4, 5, 3}, {1, -5, 0}, {2, 1, 3}},  // steps > 1, a negative start
    {{8, 1024}, {8, 512}, {0, 512}, {1, 1}},           // second half of each row
    {{6, 7}, {2, 7}, {-3, 0}, {2, 1}},
    {{4, 128, 2304}, {4, 128, 768}, {0, 0, 768}, {1, 1, 1}},  // k out of qkv
    {{1001}, {334}, {0}, {3}},
    {{1001}, {1}, {-1}, {1}},
    {{5, 6, 7, 8}, {2, 3, 3, 2}, {1, -6, 2, -2}, {3, 2, 2, 1}},
};

std::string slice_name(const char* op, DType dt, const SliceCase& c) {
  std::string s = std::string(op) + " " + name(dt) + " " + c.x.str() + " -> " + c.y.str() + " starts";
  for (int64_t v : c.starts) s += " " + std::to_string(v);
  s += " steps";
  for (int64_t v : c.steps) s += " " + std::to_string(v);
  return s;
}

TEST_F(CudaKernels, Slice) {
  for (DType dt : {F32, I64, U8})
    for (const SliceCase& c : kSlices) {
      HostTensor x = rand_any(c.x, dt, rng);
      check_op(slice_name("slice", dt, c), {x}, {exact(c.y, dt)},
               [&c](auto& in, auto& o) { cpu::slice(in[0], o[0], c.starts, c.steps); },
               [&c](auto& in, auto& o) { gpu::slice(in[0], o[0], c.starts, c.steps); });
    }
}

TEST_F(CudaKernels, SliceGrad) {
  for (DType dt : {F32, I64})
    for (const SliceCase& c : kSlices) {
      HostTensor dy = rand_any(c.y, dt, rng);
      check_op(slice_name("slice_grad", dt, c), {dy}, {exact(c.x, dt)},
               [&c](auto& in, auto& o) { cpu::slice_grad(in[0], o[0], c.starts, c.steps); },
               [&c](auto& in, auto& o) { gpu::slice_grad(in[0], o[0], c.starts, c.steps); });
    }
}

TEST_F(CudaKernels, Concat) {
  struct C {
    std::vector<Shape> ins;
    Shape out;
    int64_t axis;
  };
  for (DType dt : {F32, I64, U8})
    for (const C& c : {C{{{2, 5, 3}, {4, 5, 3}, {1, 5, 3}}, {7, 5, 3}, 0},
                       C{{{4, 3, 2}, {4, 3, 5}, {4, 3, 1}}, {4, 3, 8}, -1},
                       C{{{4, 3, 2}, {4, 3, 5}, {4, 3, 1}}, {4, 3, 8}, 2},
                       C{{{4, 1, 6}, {4, 7, 6}}, {4, 8, 6}, 1},
                       C{{{8, 128, 768}, {8, 128, 768}, {8, 128, 768}}, {8, 128, 2304}, -1},
                       C{{{1001}}, {1001}, 0},
                       C{{{3, 0, 2}, {3, 4, 2}}, {3, 4, 2}, 1}}) {  // an empty input
      std::vector<HostTensor> ins;
      std::vector<View> views;
      std::string nm = std::string("concat ") + name(dt) + " axis " + std::to_string(c.axis) + ":";
      for (const Shape& s : c.ins) {
        ins.push_back(rand_any(s, dt, rng));
        views.push_back(ins.back().view());
        nm += " " + s.str();
      }
      const int64_t axis = c.axis;
      check_op(nm, views, {exact(c.out, dt)}, [axis](auto& in, auto& o) { cpu::concat(in, o[0], axis); },
               [axis](auto& in, auto& o) { gpu::concat(in, o[0], axis); });
    }
}

TEST_F(CudaKernels, WhereBroadcast) {
  struct C {
    Shape c, a, b;
  };
  for (DType dt : {F32, I64, U8})
    for (const C& c : {C{{4, 1, 8}, {3, 1}, {8}}, C{{1001}, {1001}, {1}}, C{{1, 1, 128, 128}, {8, 12, 128, 128}, Shape()},
                       C{{7, 1}, {1, 9}, {7, 9}}, C{{1001}, {1001}, {1001}}}) {
      HostTensor cond = rand_int(c.c, U8, rng, 0, 1);
      // Any nonzero byte is true.
      for (int64_t i = 0; i < cond.numel(); i += 5)
        if (cond.as<uint8_t>()[i]) cond.as<uint8_t>()[i] = 7;
      HostTensor a = rand_any(c.a, dt, rng), b = rand_any(c.b, dt, rng);
      check_op(std::string("where ") + name(dt) + " " + c.c.str() + " " + c.a.str() + " " + c.b.str(), {cond, a, b},
               {exact(bshape(bshape(c.c, c.a), c.b), dt)},
               [](auto& in, auto& o) { cpu::where(in[0], in[1], in[2], o[0]); },
               [](auto& in, auto& o) { gpu::where(in[0], in[1], in[2], o[0]); });
    }
}

TEST_F(CudaKernels, CastAmongF32I64U8) {
  const Shape s{1001};
  HostTensor f = rand_f32(s, rng, -300, 300);
  float* pf = f.as<float>();
  // Zeros (-> U8 0), small fractions (-> I64 0 but U8 1), truncation of
  // negatives toward zero.
  pf[0] = 0.0f, pf[1] = -0.0f, pf[2] = 0.25f, pf[3] = -0.75f, pf[4] = -1.5f, pf[5] = 2.9999f, pf[6] = 1e-30f;
  HostTensor i = rand_int(s, I64, rng, -1000000, 1000000);
  int64_t* pi = i.as<int64_t>();
  pi[0] = 0, pi[1] = (int64_t(1) << 40) + 1, pi[2] = -((int64_t(1) << 35) + 3), pi[3] = 16777217, pi[4] = 256;
  HostTensor u = rand_int(s, U8, rng, 0, 2);
  u.as<uint8_t>()[0] = 255;
  for (const HostTensor* x : {&f, &i, &u})
    for (DType to : {F32, I64, U8})
      check_op(std::string("cast ") + name(x->view().dtype) + " -> " + name(to), {*x}, {exact(s, to)},
               [](auto& in, auto& o) { cpu::cast(in[0], o[0]); },
               [](auto& in, auto& o) { gpu::cast(in[0], o[0]); });
  // Shapes may differ; only the element count matters.
  check_op("cast F32 [7,11,13] -> I64 [1001]", {f.view().reshaped({7, 11, 13})}, {exact(s, I64)},
           [](auto& in, auto& o) { cpu::cast(in[0], o[0]); }, [](auto& in, auto& o) { gpu::cast(in[0], o[0]); });
}

// 16-bit storage: narrowed to nearest even (overflow to inf at fp16, its
// subnormals) and widened exactly, bit for bit as the CPU.
TEST_F(CudaKernels, CastSixteenBits) {
  const Shape s{4099};
  HostTensor f = rand_f32(s, rng, -70000, 70000);
  float* pf = f.as<float>();
  const float specials[] = {0.0f, -0.0f, 1.0f + 0x1p-8f, 1.0f + 0x3p-8f, 65504.f, 65520.f, -7e4f, 0x1p-24f,
                            0x1p-25f, 0x3p-25f, 1e-30f, 3e38f, std::numeric_limits<float>::infinity()};
  for (size_t k = 0; k < sizeof specials / sizeof *specials; ++k) pf[k] = specials[k];
  for (int64_t k = 20; k < 1000; ++k) pf[k] *= 1e-9f;  // fp16's subnormals
  for (DType h : {DType::BF16, DType::F16}) {
    Results r = check_op(std::string("cast F32 -> ") + name(h), {f}, {exact(s, h)},
                         [](auto& in, auto& o) { cpu::cast(in[0], o[0]); },
                         [](auto& in, auto& o) { gpu::cast(in[0], o[0]); });
    // Four elements a thread where aligned (above, 4099 leaving a tail of
    // three); one at a time where not.
    check_op(std::string("cast F32 -> ") + name(h) + " misaligned", {f}, {exact(s, h)},
             [](auto& in, auto& o) { cpu::cast(in[0], o[0]); }, [](auto& in, auto& o) { gpu::cast(in[0], o[0]); },
             RunOpts{2, 4});
    check_op(std::string("cast ") + name(h) + " -> F32", {r.cpu[0].view()}, {exact(s, F32)},
             [](auto& in, auto& o) { cpu::cast(in[0], o[0]); }, [](auto& in, auto& o) { gpu::cast(in[0], o[0]); });
    check_op(std::string("transpose ") + name(h), {r.cpu[0].view().reshaped({1, 4099})}, {exact({4099, 1}, h)},
             [](auto& in, auto& o) { cpu::transpose(in[0], o[0], {1, 0}); },
             [](auto& in, auto& o) { gpu::transpose(in[0], o[0], std::vector<int64_t>{1, 0}); });
  }
}

TEST_F(CudaKernels, Gather) {
  struct C {
    Shape table, idx;
    DType dt;
  };
  for (const C& c : {C{{50, 64}, {4, 7}, F32}, C{{1000, 768}, {8, 128}, F32}, C{{50304, 768}, {4, 64}, F32},
                     C{{7, 1001}, {3}, F32}, C{{20, 3, 2}, {5}, I64}, C{{9}, {4, 4}, F32}, C{{12, 5}, {2, 3, 4}, U8}}) {
    HostTensor table = rand_any(c.table, c.dt, rng);
    HostTensor idx = rand_int(c.idx, I64, rng, 0, c.table[0] - 1);
    idx.as<int64_t>()[0] = 0, idx.as<int64_t>()[idx.numel() - 1] = c.table[0] - 1;  // both ends
    check_op(std::string("gather ") + name(c.dt) + " table " + c.table.str() + " idx " + c.idx.str(), {table, idx},
             {exact(cat(c.idx, sub(c.table, 1, c.table.rank)), c.dt)},
             [](auto& in, auto& o) { cpu::gather(in[0], in[1], o[0]); },
             [](auto& in, auto& o) { gpu::gather(in[0], in[1], o[0]); });
  }
}

TEST_F(CudaKernels, GatherBadIndexFailsAtSynchronize) {
  HostTensor table = rand_f32({10, 16}, rng);
  for (int64_t bad : {int64_t(10), int64_t(-1), int64_t(1) << 40}) {
    HostTensor idx = rand_int({4, 8}, I64, rng, 0, 9);
    idx.as<int64_t>()[13] = bad;
    std::vector<DevPtr> keep;
    View dt = to_device(table, keep), di = to_device(idx, keep);
    keep.push_back(dev_alloc(size_t(4 * 8 * 16) * sizeof(float)));
    View dout{keep.back().get(), {4, 8, 16}, F32};
    EXPECT_NO_THROW(gpu::gather(dt, di, dout)) << "index " << bad << ": the launch is asynchronous";
    try {
      gpu::synchronize();
      ADD_FAILURE() << "gather with index " << bad << " into 10 rows: synchronize() did not throw";
    } catch (const fy::Error& e) {
      EXPECT_NE(std::string(e.what()).find("gather"), std::string::npos) << e.what();
    }
    // Reported once; the next work runs normally.
    EXPECT_NO_THROW(gpu::synchronize()) << "index " << bad << ": the error was reported twice";
    HostTensor good = rand_int({4, 8}, I64, rng, 0, 9);
    check_op("gather after an error", {table, good}, {exact({4, 8, 16})},
             [](auto& in, auto& o) { cpu::gather(in[0], in[1], o[0]); },
             [](auto& in, auto& o) { gpu::gather(in[0], in[1], o[0]); });
  }
}

// Rows between a device table and page-locked host memory, which the
// kernels read and write over the bus, on a stream of their own. The
// optimizer's rows go in (scatter_rows): exactly those rows change, to
// exactly the values given; a gradient's rows come out (gather_rows), each
// the table's row.
TEST_F(CudaKernels, RowsBetweenADeviceTableAndPinnedHostMemory) {
  const int64_t R = 1000, D = 100, n = 37;
  HostTensor table = rand_f32({R, D}, rng);
  std::vector<DevPtr> keep;
  View dt = to_device(table, keep);
  float* values = nullptr;
  int64_t* rows = nullptr;
  FYT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&values), size_t(n * D) * sizeof(float), cudaHostAllocPortable));
  FYT_CUDA(cudaHostAlloc(reinterpret_cast<void**>(&rows), size_t(n) * sizeof(int64_t), cudaHostAllocPortable));
  std::vector<float> want(table.as<float>(), table.as<float>() + R * D);
  for (int64_t k = 0; k < n; ++k) {
    rows[k] = (k * 26 + 3) % R;  // distinct (never 0: 26k + 3 is odd), first and last rows among them
    if (k == 0) rows[k] = 0;
    if (k == n - 1) rows[k] = R - 1;
    for (int64_t c = 0; c < D; ++c) {
      values[k * D + c] = float(k) + float(c) * 1e-3f;
      want[size_t(rows[k] * D + c)] = values[k * D + c];
    }
  }
  cudaStream_t s;
  FYT_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  gpu::scatter_rows(View{values, {n, D}, F32}, View{rows, {n}, I64}, dt, s);
  FYT_CUDA(cudaStreamSynchronize(s));
  HostTensor got = to_host(dt);
  EXPECT_EQ(0, std::memcmp(got.as<float>(), want.data(), want.size() * sizeof(float)));
  // Back out, into NaNs: the rows just written at even k, others at odd k.
  for (int64_t k = 1; k < n; k += 2) rows[k] = (k * 23 + 5) % R;
  std::memset(values, 0xff, size_t(n * D) * sizeof(float));
  gpu::gather_rows(dt, View{rows, {n}, I64}, View{values, {n, D}, F32}, s);
  FYT_CUDA(cudaStreamSynchronize(s));
  for (int64_t k = 0; k < n; ++k)
    EXPECT_EQ(0, std::memcmp(values + k * D, &want[size_t(rows[k] * D)], size_t(D) * sizeof(float))) << "row " << k;
  FYT_CUDA(cudaStreamDestroy(s));
  cudaFreeHost(values);
  cudaFreeHost(rows);
}

TEST_F(CudaKernels, GatherGradRepeatedIndicesDeterministic) {
  struct C {
    int64_t V, D;
    Shape idx;
    int64_t hi;  // indices in [0, hi]
  };
  for (const C& c : {C{10, 96, {8, 512}, 9},       // ~400 repeats per row
                     C{1000, 768, {8, 128}, 50},   // embedding: a few hot tokens
                     C{50304, 768, {4, 64}, 50303},
                     C{3, 1001, {2000}, 2},        // odd row length, huge repeats
                     C{5, 1, {64}, 4}}) {
    HostTensor idx = rand_int(c.idx, I64, rng, 0, c.hi);
    const Shape dys = cat(c.idx, Shape{c.D});
    HostTensor dy = rand_f32(dys, rng);
    // Five GPU runs over different poison: all bitwise equal.
    check_op("gather_grad V=" + std::to_string(c.V) + " D=" + std::to_string(c.D) + " idx " + c.idx.str(), {idx, dy},
             {out({c.V, c.D})}, [](auto& in, auto& o) { cpu::gather_grad(in[0], in[1], o[0]); },
             [](auto& in, auto& o) { gpu::gather_grad(in[0], in[1], o[0]); }, RunOpts{5, 0});
  }
}

// The tied table's gradient: the CPU's bits (base's row plus the summed
// rows; unnamed rows base's own), deterministic over runs.
TEST_F(CudaKernels, GatherGradAddMatchesTheCpu) {
  for (const auto& [V, D, n] : {std::tuple<int64_t, int64_t, int64_t>{50304, 768, 512}, {7, 1001, 300}, {64, 4, 9}}) {
    HostTensor idx = rand_int(Shape{n}, I64, rng, 0, V / 2);  // the upper half never named
    HostTensor dy = rand_f32(Shape{n, D}, rng), base = rand_f32(Shape{V, D}, rng);
    base.view().as<float>()[(V - 1) * D] = -0.0f;
    check_op("gather_grad_add V=" + std::to_string(V) + " D=" + std::to_string(D), {base, idx, dy}, {exact({V, D})},
             [](auto& in, auto& o) { cpu::gather_grad_add(in[0], in[1], in[2], o[0]); },
             [](auto& in, auto& o) { gpu::gather_grad_add(in[0], in[1], in[2], o[0]); }, RunOpts{3, 0});
  }
}

// ---- normalisation ----------------------------------------------------------------------

struct NormCase {
  Shape x;
  int64_t axis;
  Shape stats;  // x.shape[:axis] + 1s
  Shape params; // x.shape[axis:]
};
const std::vector<NormCase> kNorms = {
    {{4, 256, 768}, -1, {4, 256, 1}, {768}},
    {{4, 256, 768}, 2, {4, 256, 1}, {768}},
    {{6, 10, 12}, 1, {6, 1, 1}, {10, 12}},  // over the last two dims
    {{37, 1001}, -1, {37, 1}, {1001}},
    {{3, 5}, 0, {1, 1}, {3, 5}},            // one row
    {{2, 7, 4096}, -1, {2, 7, 1}, {4096}},
};

std::string norm_name(const char* op, const NormCase& c, const char* variant) {
  return std::string(op) + " " + c.x.str() + " axis " + std::to_string(c.axis) + " " + variant;
}

TEST_F(CudaKernels, LayerNorm) {
  const double eps = 1e-5;
  for (const NormCase& c : kNorms) {
    // Offset data: a one-pass E[x^2] - E[x]^2 loses digits here.
    HostTensor x = rand_f32(c.x, rng, 2, 4), scale = rand_f32(c.params, rng, 0.5, 1.5), bias = rand_f32(c.params, rng);
    auto cpu_fn = [&c, eps](auto& in, auto& o) { cpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], c.axis, eps); };
    auto gpu_fn = [&c, eps](auto& in, auto& o) { gpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], c.axis, eps); };
    const std::vector<Out> outs = {out(c.x), out(c.stats), out(c.stats)};
    check_op(norm_name("layer_norm", c, "scale+bias"), {x, scale, bias}, outs, cpu_fn, gpu_fn);
    check_op(norm_name("layer_norm", c, "no bias"), {x, scale, nullv(c.params)}, outs, cpu_fn, gpu_fn);
    check_op(norm_name("layer_norm", c, "no scale, no bias"), {x, nullv(c.params), nullv(c.params)}, outs, cpu_fn,
             gpu_fn);
  }
  // A large eps matters.
  HostTensor x = rand_f32({64, 32}, rng, -0.01, 0.01), scale = rand_f32({32}, rng);
  check_op("layer_norm eps 0.1", {x, scale, nullv({32})}, {out({64, 32}), out({64, 1}), out({64, 1})},
           [](auto& in, auto& o) { cpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], -1, 0.1); },
           [](auto& in, auto& o) { gpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], -1, 0.1); });
}

TEST_F(CudaKernels, LayerNormGrad) {
  for (const NormCase& c : kNorms) {
    HostTensor x = rand_f32(c.x, rng, -2, 3), scale = rand_f32(c.params, rng, 0.5, 1.5), dy = rand_f32(c.x, rng);
    HostTensor y(c.x, F32), mean(c.stats, F32), inv_std(c.stats, F32);
    cpu::layer_norm(x, scale, nullv(c.params), y, mean, inv_std, c.axis, 1e-5);
    auto cpu_fn = [&c](auto& in, auto& o) {
      cpu::layer_norm_grad(in[0], in[1], in[2], in[3], in[4], o[0], o[1], o[2], c.axis);
    };
    auto gpu_fn = [&c](auto& in, auto& o) {
      gpu::layer_norm_grad(in[0], in[1], in[2], in[3], in[4], o[0], o[1], o[2], c.axis);
    };
    const std::vector<View> ins = {dy, x, scale, mean, inv_std};
    check_op(norm_name("layer_norm_grad", c, "dx dscale dbias"), ins, {out(c.x), out(c.params), out(c.params)},
             cpu_fn, gpu_fn);
    check_op(norm_name("layer_norm_grad", c, "dx only"), ins, {out(c.x), none(c.params), none(c.params)}, cpu_fn,
             gpu_fn);
    check_op(norm_name("layer_norm_grad", c, "dx dscale"), ins, {out(c.x), out(c.params), none(c.params)}, cpu_fn,
             gpu_fn);
    // Without a scale (its forward had none either).
    HostTensor mean0(c.stats, F32), inv_std0(c.stats, F32);
    cpu::layer_norm(x, nullv(c.params), nullv(c.params), y, mean0, inv_std0, c.axis, 1e-5);
    check_op(norm_name("layer_norm_grad", c, "no scale, dx dbias"), {dy, x, nullv(c.params), mean0, inv_std0},
             {out(c.x), none(c.params), out(c.params)}, cpu_fn, gpu_fn);
  }
}

TEST_F(CudaKernels, RmsNorm) {
  for (const NormCase& c : kNorms) {
    HostTensor x = rand_f32(c.x, rng, -2, 3), scale = rand_f32(c.params, rng, 0.5, 1.5);
    auto cpu_fn = [&c](auto& in, auto& o) { cpu::rms_norm(in[0], in[1], o[0], o[1], c.axis, 1e-6); };
    auto gpu_fn = [&c](auto& in, auto& o) { gpu::rms_norm(in[0], in[1], o[0], o[1], c.axis, 1e-6); };
    check_op(norm_name("rms_norm", c, "scale"), {x, scale}, {out(c.x), out(c.stats)}, cpu_fn, gpu_fn);
    check_op(norm_name("rms_norm", c, "no scale"), {x, nullv(c.params)}, {out(c.x), out(c.stats)}, cpu_fn, gpu_fn);
  }
}

TEST_F(CudaKernels, RmsNormGrad) {
  for (const NormCase& c : kNorms) {
    HostTensor x = rand_f32(c.x, rng, -2, 3), scale = rand_f32(c.params, rng, 0.5, 1.5), dy = rand_f32(c.x, rng);
    HostTensor y(c.x, F32), inv_rms(c.stats, F32);
    cpu::rms_norm(x, scale, y, inv_rms, c.axis, 1e-6);
    auto cpu_fn = [&c](auto& in, auto& o) { cpu::rms_norm_grad(in[0], in[1], in[2], in[3], o[0], o[1], c.axis); };
    auto gpu_fn = [&c](auto& in, auto& o) { gpu::rms_norm_grad(in[0], in[1], in[2], in[3], o[0], o[1], c.axis); };
    check_op(norm_name("rms_norm_grad", c, "dx dscale"), {dy, x, scale, inv_rms}, {out(c.x), out(c.params)}, cpu_fn,
             gpu_fn);
    check_op(norm_name("rms_norm_grad", c, "dx only"), {dy, x, scale, inv_rms}, {out(c.x), none(c.params)}, cpu_fn,
             gpu_fn);
    HostTensor inv_rms0(c.stats, F32);
    cpu::rms_norm(x, nullv(c.params), y, inv_rms0, c.axis, 1e-6);
    check_op(norm_name("rms_norm_grad", c, "no scale"), {dy, x, nullv(c.params), inv_rms0}, {out(c.x), none(c.params)},
             cpu_fn, gpu_fn);
  }
}

// 16-bit rows (x, y, dy, dx; fy-half-activations' buffers), fp32 parameters
// and statistics: against the CPU's fp32 kernels between casts.
TEST_F(CudaKernels, NormsSixteenBits) {
  const double tol16 = 4e-3;
  for (DType h : {DType::BF16, DType::F16})
    for (const NormCase& c : kNorms) {
      const std::string hn = std::string(" ") + name(h);
      HostTensor x = rand_tensor(c.x, h, rng, 2, 4), scale = rand_f32(c.params, rng, 0.5, 1.5);
      HostTensor bias = rand_f32(c.params, rng), dy = rand_tensor(c.x, h, rng, -1, 1), dyf = rand_f32(c.x, rng);
      check_op(norm_name("layer_norm", c, "scale+bias") + hn, {x, scale, bias},
               {out(c.x, h, tol16), out(c.stats), out(c.stats)},
               cpu_around_casts([&c](auto& in, auto& o) {
                 cpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], c.axis, 1e-5);
               }),
               [&c](auto& in, auto& o) { gpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], c.axis, 1e-5); });
      HostTensor mean(c.stats, F32), inv_std(c.stats, F32), y(c.x, h);
      cpu_around_casts([&c](auto& in, auto& o) {
        cpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], c.axis, 1e-5);
      })({x.view(), scale.view(), nullv(c.params)}, {y.view(), mean.view(), inv_std.view()});
      auto lng_cpu = cpu_around_casts([&c](auto& in, auto& o) {
        cpu::layer_norm_grad(in[0], in[1], in[2], in[3], in[4], o[0], o[1], o[2], c.axis);
      });
      auto lng_gpu = [&c](auto& in, auto& o) {
        gpu::layer_norm_grad(in[0], in[1], in[2], in[3], in[4], o[0], o[1], o[2], c.axis);
      };
      check_op(norm_name("layer_norm_grad", c, "dx dscale dbias") + hn, {dy, x, scale, mean, inv_std},
               {out(c.x, h, tol16), out(c.params, F32, 1e-4), out(c.params, F32, 1e-4)}, lng_cpu, lng_gpu);
      check_op(norm_name("layer_norm_grad", c, "fp32 dy into fp32 dx") + hn, {dyf, x, scale, mean, inv_std},
               {out(c.x), none(c.params), none(c.params)}, lng_cpu, lng_gpu);
      HostTensor inv_rms(c.stats, F32);
      check_op(norm_name("rms_norm", c, "scale") + hn, {x, scale}, {out(c.x, h, tol16), out(c.stats)},
               cpu_around_casts([&c](auto& in, auto& o) { cpu::rms_norm(in[0], in[1], o[0], o[1], c.axis, 1e-6); }),
               [&c](auto& in, auto& o) { gpu::rms_norm(in[0], in[1], o[0], o[1], c.axis, 1e-6); });
      cpu_around_casts([&c](auto& in, auto& o) { cpu::rms_norm(in[0], in[1], o[0], o[1], c.axis, 1e-6); })(
          {x.view(), scale.view()}, {y.view(), inv_rms.view()});
      check_op(norm_name("rms_norm_grad", c, "dx dscale") + hn, {dy, x, scale, inv_rms},
               {out(c.x, h, tol16), out(c.params, F32, 1e-4)},
               cpu_around_casts([&c](auto& in, auto& o) {
                 cpu::rms_norm_grad(in[0], in[1], in[2], in[3], o[0], o[1], c.axis);
               }),
               [&c](auto& in, auto& o) { gpu::rms_norm_grad(in[0], in[1], in[2], in[3], o[0], o[1], c.axis); });
    }
}

// fy-fuse-norm-grad-add: the norms' input gradients with the residual's
// gradient added in the kernel, against the CPU, and bit for bit the GPU's
// gradient kernel into fp32 then its add. Formats of (dy and x, addend,
// dx): all fp32 (the fp32 kernels: warp, block cached, block W=1 and
// uncached past shared memory); 16-bit rows into fp32 (GPT-2's residual
// gradient at --half-activations: the 16-bit kernels); all 16-bit; and
// fp32 rows with a 16-bit addend and result (run as the unfused pair).
TEST_F(CudaKernels, NormGradAddIsGradThenAdd) {
  struct Fmt3 {
    DType rows, add, dx;
  };
  const DType BF16 = DType::BF16;
  std::vector<NormCase> cases = kNorms;
  cases.push_back({{3, 5001}, -1, {3, 1}, {5001}});
  cases.push_back({{2, 30001}, -1, {2, 1}, {30001}});
  for (const Fmt3 f : {Fmt3{F32, F32, F32}, Fmt3{BF16, F32, F32}, Fmt3{BF16, BF16, BF16}, Fmt3{F32, BF16, BF16}})
    for (const NormCase& c : cases) {
      const std::string what = norm_name("norm_grad_add", c, name(f.rows)) + " addend " + name(f.add) + " dx " +
                               name(f.dx);
      SCOPED_TRACE(what);
      HostTensor x = rand_tensor(c.x, f.rows, rng, -2, 3), dy = rand_tensor(c.x, f.rows, rng, -1, 1);
      HostTensor scale = rand_f32(c.params, rng, 0.5, 1.5), g = rand_tensor(c.x, f.add, rng, -1, 1);
      HostTensor y(c.x, f.rows), mean(c.stats, F32), inv_std(c.stats, F32), inv_rms(c.stats, F32);
      cpu_around_casts([&c](auto& in, auto& o) {
        cpu::layer_norm(in[0], in[1], in[2], o[0], o[1], o[2], c.axis, 1e-5);
      })({x.view(), scale.view(), nullv(c.params)}, {y.view(), mean.view(), inv_std.view()});
      cpu_around_casts([&c](auto& in, auto& o) { cpu::rms_norm(in[0], in[1], o[0], o[1], c.axis, 1e-6); })(
          {x.view(), scale.view()}, {y.view(), inv_rms.view()});
      const double tol = is_half(f.dx) ? 4e-3 : kTol;
      Results l = check_op(
          what + " layer", {dy, x, scale, mean, inv_std, g},
          {out(c.x, f.dx, tol), out(c.params, F32, 1e-4), out(c.params, F32, 1e-4)},
          cpu_around_casts([&c](auto& in, auto& o) {
            cpu::layer_norm_grad_add(in[0], in[1], in[2], in[3], in[4], in[5], o[0], o[1], o[2], c.axis);
          }),
          [&c](auto& in, auto& o) {
            gpu::layer_norm_grad_add(in[0], in[1], in[2], in[3], in[4], in[5], o[0], o[1], o[2], c.axis);
          });
      Results r = check_op(
          what + " rms", {dy, x, scale, inv_rms, g}, {out(c.x, f.dx, tol), out(c.params, F32, 1e-4)},
          cpu_around_casts([&c](auto& in, auto& o) {
            cpu::rms_norm_grad_add(in[0], in[1], in[2], in[3], in[4], o[0], o[1], c.axis);
          }),
          [&c](auto& in, auto& o) { gpu::rms_norm_grad_add(in[0], in[1], in[2], in[3], in[4], o[0], o[1], c.axis); });
      // The unfused kernels on the GPU: the gradient into fp32, then the add.
      std::vector<DevPtr> keep;
      auto dev = [&](const View& v) { return to_device(v, keep); };
      auto fresh = [&](Shape s, DType dt) {
        View v = nullv(s, dt);
        keep.push_back(dev_alloc(v.nbytes()));
        v.data = keep.back().get();
        return v;
      };
      const View ddy = dev(dy), dx_ = dev(x), dscale = dev(scale), dg = dev(g);
      const View dln = fresh(c.x, F32), dsum = fresh(c.x, f.dx), drms = fresh(c.x, F32), drsum = fresh(c.x, f.dx);
      gpu::layer_norm_grad(ddy, dx_, dscale, dev(mean), dev(inv_std), dln, nullv(c.params), nullv(c.params), c.axis);
      gpu::binary(BinOp::Add, dln, dg, dsum);
      gpu::rms_norm_grad(ddy, dx_, dscale, dev(inv_rms), drms, nullv(c.params), c.axis);
      gpu::binary(BinOp::Add, dg, drms, drsum);
      gpu::synchronize();
      const HostTensor want_l = to_host(dsum), want_r = to_host(drsum);
      EXPECT_EQ(std::memcmp(want_l.view().data, l.gpu[0].view().data, want_l.view().nbytes()), 0) << "layer_norm";
      EXPECT_EQ(std::memcmp(want_r.view().data, r.gpu[0].view().data, want_r.view().nbytes()), 0) << "rms_norm";
    }
}

// ---- softmax / loss ----------------------------------------------------------------------

struct SoftmaxCase {
  Shape x;
  int64_t axis;
  double lo, hi;
};
const std::vector<SoftmaxCase> kSoftmax = {
    {{64, 50304}, -1, -4, 4},     // vocabulary rows
    {{8, 50304}, 1, -4, 4},
    {{37, 1001}, -1, -5, 5},
    {{2, 12, 128, 128}, -1, -8, 8},  // attention
    {{4, 50, 33}, 1, -5, 5},      // a middle axis
    {{2, 3, 4, 5}, -2, -5, 5},
    {{50, 7}, 0, -5, 5},
    {{16, 300}, -1, -100, 100},   // needs the max subtracted
    {{5, 1}, -1, -5, 5},          // one element per row
    {{3, 2048}, 1, -5, 5},
};

TEST_F(CudaKernels, Softmax) {
  for (const SoftmaxCase& c : kSoftmax) {
    HostTensor x = rand_f32(c.x, rng, c.lo, c.hi);
    check_op("softmax " + c.x.str() + " axis " + std::to_string(c.axis), {x}, {out(c.x)},
             [&c](auto& in, auto& o) { cpu::softmax(in[0], o[0], c.axis); },
             [&c](auto& in, auto& o) { gpu::softmax(in[0], o[0], c.axis); });
  }
  // Masked logits (-inf, as a causal mask writes them) in every row but not
  // whole rows.
  HostTensor x = rand_f32({2, 4, 64, 64}, rng, -3, 3);
  for (int64_t r = 0; r < 2 * 4 * 64; ++r)
    for (int64_t j = r % 64 + 1; j < 64; ++j) x.as<float>()[r * 64 + j] = -std::numeric_limits<float>::infinity();
  check_op("softmax causal -inf", {x}, {out(x.shape())}, [](auto& in, auto& o) { cpu::softmax(in[0], o[0], -1); },
           [](auto& in, auto& o) { gpu::softmax(in[0], o[0], -1); });
}

TEST_F(CudaKernels, SoftmaxGrad) {
  for (const SoftmaxCase& c : kSoftmax) {
    HostTensor x = rand_f32(c.x, rng, c.lo, c.hi), y(c.x, F32), dy = rand_f32(c.x, rng);
    cpu::softmax(x, y, c.axis);
    check_op("softmax_grad " + c.x.str() + " axis " + std::to_string(c.axis), {y, dy}, {out(c.x)},
             [&c](auto& in, auto& o) { cpu::softmax_grad(in[0], in[1], o[0], c.axis); },
             [&c](auto& in, auto& o) { gpu::softmax_grad(in[0], in[1], o[0], c.axis); });
  }
}

// Attention's scaled, masked softmax: against the CPU, and bit for bit the
// GPU's own mul, where and softmax that it replaces (fy-recompose).
TEST_F(CudaKernels, MaskedSoftmax) {
  struct Case {
    Shape x, mask;
    bool causal;
  };
  const std::vector<Case> cases = {{{2, 12, 128, 128}, {1, 1, 128, 128}, true},  // warp rows
                                   {{2, 4, 1024, 1024}, {1, 1, 1024, 1024}, true},  // GPT-2's T
                                   {{3, 8, 2048}, {8, 2048}, false},                // block rows
                                   {{4, 1001}, {1001}, false},                      // unaligned: scalar loads
                                   {{5, 7, 300}, {1, 300}, false}};
  for (const Case& c : cases)
    for (float scale : {0.125f, 0.3f}) {
      const int64_t D = c.x[c.x.rank - 1], R = c.mask.numel() / D;
      HostTensor x = rand_f32(c.x, rng, -6, 6), mask(c.mask, U8);
      for (int64_t i = 0; i < c.mask.numel(); ++i)  // column 0 always kept: no row is all -inf
        mask.as<uint8_t>()[i] = c.causal ? uint8_t(i % D > (i / D) % R) : uint8_t(i % D != 0 && rng.integer(0, 2) == 0);
      HostTensor sc = make_tensor(Shape{}, F32, {scale}), ninf = make_tensor(Shape{}, F32, {-INFINITY});
      const std::string name = "masked_softmax " + c.x.str() + " mask " + c.mask.str() + " scale " + std::to_string(scale);
      auto cpu_fn = [scale](auto& in, auto& o) { cpu::masked_softmax(in[0], in[1], o[0], scale); };
      Results fused = check_op(name, {x, mask}, {out(c.x)}, cpu_fn,
                               [scale](auto& in, auto& o) { gpu::masked_softmax(in[0], in[1], o[0], scale); });
      std::vector<DevPtr> tmp;
      Results parts = check_op(name + " as mul, where, softmax", {x, mask, sc, ninf}, {out(c.x)}, cpu_fn,
                               [&](auto& in, auto& o) {
                                 View a = nullv(c.x), b = nullv(c.x);
                                 tmp.push_back(dev_alloc(a.nbytes()));
                                 a.data = tmp.back().get();
                                 tmp.push_back(dev_alloc(b.nbytes()));
                                 b.data = tmp.back().get();
                                 gpu::binary(gpu::BinOp::Mul, in[0], in[2], a);
                                 gpu::where(in[1], in[3], a, b);
                                 gpu::softmax(b, o[0], -1);
                               });
      ASSERT_FALSE(fused.gpu.empty() || parts.gpu.empty());
      EXPECT_EQ(std::memcmp(fused.gpu[0].view().data, parts.gpu[0].view().data, fused.gpu[0].view().nbytes()), 0)
          << name << ": fused kernel differs from mul, where, softmax";
    }
  HostTensor x = rand_f32({3, 5, 9}, rng), rows3({3, 9}, U8);
  std::vector<DevPtr> keep;
  View dx = to_device(x, keep), dm = to_device(rows3, keep);
  EXPECT_THROW(gpu::masked_softmax(dx, dm, dx, 1.f), fy::Error) << "3 mask rows for 5";
}

// bias_unary against the CPU, and bit-identical to the GPU's own add then
// unary (unary_grad); aligned rows run the float4 path, odd ones the scalar.
TEST_F(CudaKernels, BiasGelu) {
  for (UnOp op : {UnOp::Gelu, UnOp::GeluTanh})
    for (Shape s : {Shape{3, 7}, Shape{8, 1024, 3072}, Shape{5, 1001}}) {
      const int64_t n = s[s.rank - 1];
      HostTensor x = rand_f32(s, rng, -5, 5), b = rand_f32(Shape{n}, rng, -1, 1), dy = rand_f32(s, rng);
      HostTensor sum(s, F32), y(s, F32);
      cpu::binary(cpu::BinOp::Add, x, b, sum);
      cpu::unary(to_cpu(op), sum, y);
      const std::string name = std::string(op == UnOp::Gelu ? "bias_gelu " : "bias_gelu_tanh ") + s.str();
      Results fused = check_op(name, {x, b}, {out(s)}, [op](auto& in, auto& o) { cpu::bias_unary(to_cpu(op), in[0], in[1], o[0]); },
                               [op](auto& in, auto& o) { gpu::bias_unary(op, in[0], in[1], o[0]); });
      std::vector<DevPtr> tmp;
      Results parts = check_op(name + " as add, unary", {x, b}, {out(s)},
                               [op](auto& in, auto& o) { cpu::bias_unary(to_cpu(op), in[0], in[1], o[0]); },
                               [&](auto& in, auto& o) {
                                 View a = nullv(s);
                                 tmp.push_back(dev_alloc(a.nbytes()));
                                 a.data = tmp.back().get();
                                 gpu::binary(gpu::BinOp::Add, in[0], in[1], a);
                                 gpu::unary(op, a, o[0]);
                               });
      ASSERT_FALSE(fused.gpu.empty() || parts.gpu.empty());
      EXPECT_EQ(std::memcmp(fused.gpu[0].view().data, parts.gpu[0].view().data, fused.gpu[0].view().nbytes()), 0)
          << name << ": fused kernel differs from add, unary";
      check_op(name + " grad", {x, b, y, dy}, {out(s)},
               [op](auto& in, auto& o) { cpu::bias_unary_grad(to_cpu(op), in[0], in[1], in[2], in[3], o[0]); },
               [op](auto& in, auto& o) { gpu::bias_unary_grad(op, in[0], in[1], in[2], in[3], o[0]); });
    }
}

TEST_F(CudaKernels, SoftmaxGradScaled) {
  for (const SoftmaxCase& c : {kSoftmax[2], kSoftmax[3], kSoftmax[4], kSoftmax[9]}) {
    HostTensor x = rand_f32(c.x, rng, c.lo, c.hi), y(c.x, F32), dy = rand_f32(c.x, rng);
    cpu::softmax(x, y, c.axis);
    check_op("softmax_grad scale 0.125 " + c.x.str() + " axis " + std::to_string(c.axis), {y, dy}, {out(c.x)},
             [&c](auto& in, auto& o) { cpu::softmax_grad(in[0], in[1], o[0], c.axis, 0.125f); },
             [&c](auto& in, auto& o) { gpu::softmax_grad(in[0], in[1], o[0], c.axis, 0.125f); });
  }
}

struct SceCase {
  Shape logits;
  int64_t ignore_index;
  double ignored;  // fraction of labels set to ignore_index
};
const std::vector<SceCase> kSce = {
    {{64, 50304}, -100, 0.1},
    {{64, 50304}, -100, 0.0},
    {{4, 10, 7}, -100, 0.2},       // [N,C,d1]: class dim 1, not last
    {{2, 5, 3, 4}, -100, 0.2},     // [N,C,d1,d2]
    {{37, 1001}, 3, 0.1},          // ignore_index inside [0, C)
    {{1, 2}, -1, 0.0},
    {{128, 17}, -100, 0.5},
};

Shape labels_shape(const Shape& logits) {
  std::vector<int64_t> v = logits.vec();
  v.erase(v.begin() + 1);
  return Shape(v);
}

HostTensor sce_labels(const Shape& logits, int64_t ignore_index, double ignored, Rng& rng) {
  HostTensor labels = rand_int(labels_shape(logits), I64, rng, 0, logits[1] - 1);
  for (int64_t i = 0; i < labels.numel(); ++i)
    if (rng.uniform(0, 1) < ignored) labels.as<int64_t>()[i] = ignore_index;
  return labels;
}

std::string sce_name(const char* op, const Shape& logits, int64_t ignore_index, bool mean) {
  return std::string(op) + " " + logits.str() + " ignore_index " + std::to_string(ignore_index) +
         (mean ? " mean" : " sum");
}

TEST_F(CudaKernels, SoftmaxCrossEntropy) {
  for (const SceCase& c : kSce)
    for (bool mean : {true, false}) {
      HostTensor logits = rand_f32(c.logits, rng, -4, 4);
      HostTensor labels = sce_labels(c.logits, c.ignore_index, c.ignored, rng);
      const int64_t ii = c.ignore_index;
      check_op(sce_name("softmax_cross_entropy", c.logits, ii, mean), {logits, labels}, {out(Shape()), out(c.logits)},
               [ii, mean](auto& in, auto& o) { cpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], ii, mean); },
               [ii, mean](auto& in, auto& o) { gpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], ii, mean); });
    }
  // A one-element loss of shape [1] works too.
  HostTensor logits = rand_f32({16, 33}, rng, -4, 4);
  HostTensor labels = sce_labels({16, 33}, -100, 0.1, rng);
  check_op("softmax_cross_entropy loss shape [1]", {logits, labels}, {out({1}), out({16, 33})},
           [](auto& in, auto& o) { cpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], -100, true); },
           [](auto& in, auto& o) { gpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], -100, true); });
}

TEST_F(CudaKernels, SoftmaxCrossEntropyAllIgnored) {
  // mean over no targets is 0/0 = NaN (as PyTorch and the CPU kernel); the
  // sum is 0; the gradient is zero everywhere either way.
  for (bool mean : {true, false}) {
    HostTensor logits = rand_f32({8, 50}, rng, -4, 4);
    HostTensor labels = sce_labels({8, 50}, -100, 1.0, rng);
    Results r = check_op(sce_name("softmax_cross_entropy all ignored", {8, 50}, -100, mean), {logits, labels},
                         {out(Shape()), out({8, 50})},
                         [mean](auto& in, auto& o) { cpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], -100, mean); },
                         [mean](auto& in, auto& o) { gpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], -100, mean); });
    if (mean) {
      EXPECT_TRUE(std::isnan(r.cpu[0].as<float>()[0]));
      EXPECT_TRUE(std::isnan(r.gpu[0].as<float>()[0])) << "mean over no targets must be NaN";
    } else {
      EXPECT_EQ(r.gpu[0].as<float>()[0], 0.0f);
    }
    HostTensor dloss = make_tensor(Shape(), F32, {1.0});
    HostTensor lp = std::move(r.cpu[1]);
    Results g = check_op(sce_name("softmax_cross_entropy_grad all ignored", {8, 50}, -100, mean), {dloss, lp, labels},
                         {out({8, 50})},
                         [mean](auto& in, auto& o) {
                           cpu::softmax_cross_entropy_grad(in[0], in[1], in[2], o[0], -100, mean);
                         },
                         [mean](auto& in, auto& o) {
                           gpu::softmax_cross_entropy_grad(in[0], in[1], in[2], o[0], -100, mean);
                         });
    for (int64_t i = 0; i < g.gpu[0].numel(); ++i)
      ASSERT_EQ(g.gpu[0].as<float>()[i], 0.0f) << "element " << i << " (mean " << mean << ")";
  }
}

// Fused attention against the CPU's kernel (itself checked against the
// scores in double, attention_test.cpp): causal and sliding-window,
// grouped-query heads, T not a multiple of the 32-row tile, head dims 64
// and 128 and one that is not a multiple of the four threads a row, and
// both layouts.
TEST_F(CudaKernels, Attention) {
  struct Case {
    int64_t B, H, Hkv, T, D, window;
    bool seq_major;  // [B, T, heads, D]
  };
  for (const Case& c : {Case{2, 4, 4, 100, 64, 0, false}, Case{1, 8, 2, 77, 128, 0, false},
                        Case{2, 2, 1, 129, 64, 24, false}, Case{1, 3, 3, 33, 30, 0, false},
                        Case{1, 2, 2, 1, 64, 0, false}, Case{2, 4, 2, 70, 64, 0, true}, Case{1, 2, 2, 65, 128, 16, true}})
    for (bool grad : {false, true}) {
      const Shape qs = c.seq_major ? Shape{c.B, c.T, c.H, c.D} : Shape{c.B, c.H, c.T, c.D};
      const Shape ks = c.seq_major ? Shape{c.B, c.T, c.Hkv, c.D} : Shape{c.B, c.Hkv, c.T, c.D};
      const Shape ls{c.B, c.H, c.T};
      HostTensor q = rand_f32(qs, rng, -2, 2), k = rand_f32(ks, rng, -2, 2), v = rand_f32(ks, rng);
      const double scale = 1.0 / std::sqrt(double(c.D));
      const int64_t w = c.window;
      const bool sm = c.seq_major;
      const std::string what = std::string(grad ? "attention_grad " : "attention ") + qs.str() + " kv heads " +
                               std::to_string(c.Hkv) + " window " + std::to_string(w) + (sm ? " seq_major" : "");
      if (!grad) {
        check_op(what, {q, k, v}, {out(qs), out(ls)},
                 [=](auto& in, auto& o) { cpu::attention(in[0], in[1], in[2], o[0], o[1], scale, w, sm); },
                 [=](auto& in, auto& o) { gpu::attention(in[0], in[1], in[2], o[0], o[1], scale, w, sm); });
        continue;
      }
      HostTensor o(qs, F32), lse(ls, F32);
      cpu::attention(q, k, v, o, lse, scale, w, sm);
      HostTensor dout = rand_f32(qs, rng);
      check_op(what, {q, k, v, o, lse, dout}, {out(qs), out(ks), out(ks)},
               [=](auto& in, auto& r) {
                 cpu::attention_grad(in[0], in[1], in[2], in[3], in[4], in[5], r[0], r[1], r[2], scale, w, sm);
               },
               [=](auto& in, auto& r) {
                 gpu::attention_grad(in[0], in[1], in[2], in[3], in[4], in[5], r[0], r[1], r[2], scale, w, sm);
               });
    }
}

// Whether every attention case of head dim 64 or 128 runs on the tensor
// cores here: sm_90's shared memory (the backward's d 128 tiles need 169.5
// KiB a block), as on an H100 or H200.
bool tensor_cores_take_every_case() {
  int dev = 0, smem = 0, major = 0;
  FYT_CUDA(cudaGetDevice(&dev));
  FYT_CUDA(cudaDeviceGetAttribute(&smem, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  FYT_CUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  return major >= 9 && smem >= 173568;
}

// q, k, v, out, dout and the gradients stored in 16 bits (lse fp32): the
// products on the tensor cores (attention_tc.cu), the probabilities and dS
// rounded to 16 bits before theirs, as FlashAttention does; against the
// CPU's fp32 kernels between casts. T not a multiple of the 64-row tiles,
// grouped-query heads, windows, both layouts, head dims 64 and 128 (T 1
// forward only: its gradients dq and dk are 0 but for rounding, which a
// relative comparison cannot judge). Then fp32 operands at a bf16 matmul
// precision, rounded as they are loaded.
TEST_F(CudaKernels, AttentionTensorCores) {
  const bool all_fit = tensor_cores_take_every_case();
  struct Case {
    int64_t B, H, Hkv, T, D, window;
    bool seq_major;
  };
  const Case cases[] = {{2, 4, 2, 1000, 64, 0, true},  {1, 2, 2, 77, 128, 24, false}, {1, 6, 2, 130, 64, 0, false},
                        {1, 2, 1, 256, 128, 0, true},  {2, 2, 2, 200, 64, 70, true},  {1, 2, 2, 1, 64, 0, false}};
  for (DType h : {DType::BF16, DType::F16, F32})
    for (const Case& c : cases) {
      // F32 operands: at bf16 products (fp32 ones at FP32 are the Attention test's).
      if (h == F32) gpu::set_matmul_precision(MatmulPrecision::BF16);
      const double tol = h == DType::F16 ? 3e-3 : 2e-2;
      const Shape qs = c.seq_major ? Shape{c.B, c.T, c.H, c.D} : Shape{c.B, c.H, c.T, c.D};
      const Shape ks = c.seq_major ? Shape{c.B, c.T, c.Hkv, c.D} : Shape{c.B, c.Hkv, c.T, c.D};
      const Shape ls{c.B, c.H, c.T};
      HostTensor q = rand_tensor(qs, h, rng, -2, 2), k = rand_tensor(ks, h, rng, -2, 2);
      HostTensor v = rand_tensor(ks, h, rng, -1, 1);
      const double scale = 1.0 / std::sqrt(double(c.D));
      const int64_t w = c.window;
      const bool sm = c.seq_major;
      const std::string what = std::string(name(h)) + " " + qs.str() + " kv heads " + std::to_string(c.Hkv) +
                               " window " + std::to_string(w);
      auto fwd_cpu = [=](auto& in, auto& o) { cpu::attention(in[0], in[1], in[2], o[0], o[1], scale, w, sm); };
      const size_t before = gpu::attention_tensor_core_calls();
      check_op("attention " + what, {q, k, v}, {out(qs, h, tol), out(ls, F32, tol)}, cpu_around_casts(fwd_cpu),
               [=](auto& in, auto& o) { gpu::attention(in[0], in[1], in[2], o[0], o[1], scale, w, sm); });
      if (c.T == 1) {
        if (all_fit) {
          EXPECT_EQ(gpu::attention_tensor_core_calls() - before, 2u) << what << ": not on the tensor cores";
        }
        gpu::set_matmul_precision(MatmulPrecision::FP32);
        continue;
      }
      HostTensor o(qs, h), lse(ls, F32), dout = rand_tensor(qs, h, rng, -1, 1);
      cpu_around_casts(fwd_cpu)({q.view(), k.view(), v.view()}, {o.view(), lse.view()});
      check_op("attention_grad " + what, {q, k, v, o, lse, dout}, {out(qs, h, tol), out(ks, h, tol), out(ks, h, tol)},
               cpu_around_casts([=](auto& in, auto& r) {
                 cpu::attention_grad(in[0], in[1], in[2], in[3], in[4], in[5], r[0], r[1], r[2], scale, w, sm);
               }),
               [=](auto& in, auto& r) {
                 gpu::attention_grad(in[0], in[1], in[2], in[3], in[4], in[5], r[0], r[1], r[2], scale, w, sm);
               });
      // Two runs of each (check_op's determinism check), on the tensor cores.
      if (all_fit) {
        EXPECT_EQ(gpu::attention_tensor_core_calls() - before, 4u) << what << ": not on the tensor cores";
      }
      gpu::set_matmul_precision(MatmulPrecision::FP32);
    }
  // Head dim 32, which the tensor cores do not take: the CUDA-core kernels
  // on 16-bit operands, the fp32 kernels' bits between casts, both passes.
  {
    const Shape qs{2, 70, 4, 32}, ks{2, 70, 2, 32}, ls{2, 4, 70};
    HostTensor q = rand_tensor(qs, DType::BF16, rng, -2, 2), k = rand_tensor(ks, DType::BF16, rng, -2, 2),
               v = rand_tensor(ks, DType::BF16, rng, -1, 1);
    auto fwd = [](auto& in, auto& o) { cpu::attention(in[0], in[1], in[2], o[0], o[1], 0.25, 20, true); };
    const size_t before = gpu::attention_tensor_core_calls();
    check_native16("attention BF16 d 32", {q, k, v}, {out(qs, DType::BF16, 4e-3), out(ls)}, fwd,
                   [](auto& in, auto& o) { gpu::attention(in[0], in[1], in[2], o[0], o[1], 0.25, 20, true); });
    HostTensor o(qs, DType::BF16), lse(ls, F32), dout = rand_tensor(qs, DType::BF16, rng, -1, 1);
    cpu_around_casts(fwd)({q.view(), k.view(), v.view()}, {o.view(), lse.view()});
    check_native16("attention_grad BF16 d 32", {q, k, v, o, lse, dout},
                   {out(qs, DType::BF16, 4e-3), out(ks, DType::BF16, 4e-3), out(ks, DType::BF16, 4e-3)},
                   [](auto& in, auto& r) {
                     cpu::attention_grad(in[0], in[1], in[2], in[3], in[4], in[5], r[0], r[1], r[2], 0.25, 20, true);
                   },
                   [](auto& in, auto& r) {
                     gpu::attention_grad(in[0], in[1], in[2], in[3], in[4], in[5], r[0], r[1], r[2], 0.25, 20, true);
                   });
    EXPECT_EQ(gpu::attention_tensor_core_calls(), before) << "head dim 32 went to the tensor cores";
  }
  // 16-bit operands 4 bytes off 16-byte alignment take the CUDA-core kernels.
  const Shape qs{1, 2, 100, 64}, ls{1, 2, 100};
  HostTensor q = rand_tensor(qs, DType::BF16, rng, -2, 2), k = rand_tensor(qs, DType::BF16, rng, -2, 2),
             v = rand_tensor(qs, DType::BF16, rng, -1, 1);
  const size_t before = gpu::attention_tensor_core_calls();
  check_op("attention BF16 misaligned", {q, k, v}, {out(qs, DType::BF16, 4e-3), out(ls)},
           cpu_around_casts([](auto& in, auto& o) { cpu::attention(in[0], in[1], in[2], o[0], o[1], 0.125, 0, false); }),
           [](auto& in, auto& o) { gpu::attention(in[0], in[1], in[2], o[0], o[1], 0.125, 0, false); },
           RunOpts{2, 4});
  EXPECT_EQ(gpu::attention_tensor_core_calls(), before) << "a misaligned operand went to the tensor cores";
}

// q, k and v packed in one qkv [B, T, H + 2 Hkv, D]: against the CPU's
// packed kernels, and bit for bit the GPU's attention on the three slices
// (their gradients concatenated), on the CUDA cores (fp32) and the tensor
// cores (bf16).
TEST_F(CudaKernels, AttentionPackedQKV) {
  struct Case {
    int64_t B, H, Hkv, T, D, window;
  };
  const bool all_fit = tensor_cores_take_every_case();
  for (DType h : {F32, DType::BF16})
    for (const Case& c : {Case{2, 4, 4, 100, 64, 0}, Case{1, 8, 2, 130, 128, 40}}) {
      const size_t before = gpu::attention_tensor_core_calls();
      const int64_t Hrow = c.H + 2 * c.Hkv, H = c.H, Hkv = c.Hkv, w = c.window;
      const Shape ps{c.B, c.T, Hrow, c.D}, qs{c.B, c.T, c.H, c.D}, ks{c.B, c.T, c.Hkv, c.D}, ls{c.B, c.H, c.T};
      const double scale = 1.0 / std::sqrt(double(c.D)), tol = h == F32 ? kTol : 2e-2;
      const std::string what = std::string("attention_qkv ") + name(h) + " " + ps.str();
      HostTensor qkv = rand_tensor(ps, h, rng, -2, 2), dout = rand_tensor(qs, h, rng, -1, 1);
      // The GPU's attention on slices of qkv.
      auto sliced = [=](const View& x, std::vector<DevPtr>& keep) {
        std::vector<View> parts;
        const int64_t starts[] = {0, H, H + Hkv};
        for (int p = 0; p < 3; ++p) {
          View t{nullptr, p == 0 ? qs : ks, h};
          keep.push_back(dev_alloc(t.nbytes()));
          t.data = keep.back().get();
          gpu::slice(x, t, {0, 0, starts[p], 0}, {1, 1, 1, 1});
          parts.push_back(t);
        }
        return parts;
      };
      auto cpu_fwd = cpu_around_casts([=](auto& in, auto& o) { cpu::attention_qkv(in[0], o[0], o[1], Hkv, scale, w); });
      const std::vector<Out> fwd_outs = {out(qs, h, tol), out(ls, F32, tol)};
      Results packed = check_op(what, {qkv}, fwd_outs, cpu_fwd,
                                [=](auto& in, auto& o) { gpu::attention_qkv(in[0], o[0], o[1], Hkv, scale, w); });
      Results slices = check_op(what + " on slices", {qkv}, fwd_outs, cpu_fwd, [=](auto& in, auto& o) {
        std::vector<DevPtr> keep;
        std::vector<View> p = sliced(in[0], keep);
        gpu::attention(p[0], p[1], p[2], o[0], o[1], scale, w, true);
        gpu::synchronize();
      });
      HostTensor o(qs, h), lse(ls, F32);
      cpu_fwd({qkv.view()}, {o.view(), lse.view()});
      auto cpu_bwd = cpu_around_casts([=](auto& in, auto& r) {
        cpu::attention_qkv_grad(in[0], in[1], in[2], in[3], r[0], Hkv, scale, w);
      });
      Results dpacked = check_op(what + " grad", {qkv, o, lse, dout}, {out(ps, h, tol)}, cpu_bwd, [=](auto& in, auto& r) {
        gpu::attention_qkv_grad(in[0], in[1], in[2], in[3], r[0], Hkv, scale, w);
      });
      Results dslices = check_op(what + " grad on slices", {qkv, o, lse, dout}, {out(ps, h, tol)}, cpu_bwd,
                                 [=](auto& in, auto& r) {
                                   std::vector<DevPtr> keep;
                                   std::vector<View> p = sliced(in[0], keep), d = sliced(in[0], keep);
                                   gpu::attention_grad(p[0], p[1], p[2], in[1], in[2], in[3], d[0], d[1], d[2], scale,
                                                       w, true);
                                   gpu::concat({d[0], d[1], d[2]}, r[0], 2);
                                   gpu::synchronize();
                                 });
      for (size_t k = 0; k < 2; ++k)
        EXPECT_EQ(std::memcmp(packed.gpu[k].view().data, slices.gpu[k].view().data, packed.gpu[k].view().nbytes()), 0)
            << what << ": output " << k << " differs from attention on the slices";
      EXPECT_EQ(std::memcmp(dpacked.gpu[0].view().data, dslices.gpu[0].view().data, dpacked.gpu[0].view().nbytes()), 0)
          << what << ": dqkv differs from attention_grad's on the slices";
      // Two runs of each of the four: bf16 on the tensor cores, fp32 (at fp32 products) not.
      if (all_fit || h == F32) {
        EXPECT_EQ(gpu::attention_tensor_core_calls() - before, h == F32 ? 0u : 8u) << what;
      }
    }
}

// RoPE's rotation and its transpose: the CPU's bits at fp32 (both round
// each product, then the sum), and 16-bit x and y within rounding of them.
TEST_F(CudaKernels, Rope) {
  struct Case {
    Shape x;
    int64_t axis;
  };
  for (const Case& c : {Case{{2, 100, 12, 64}, 1}, Case{{2, 4, 77, 128}, 2}, Case{{3, 33, 16}, 1}})
    for (bool transposed : {false, true})
      for (DType h : {F32, DType::BF16, DType::F16}) {
        const int64_t T = c.x[int(c.axis)], D = c.x[c.x.rank - 1];
        HostTensor x = rand_tensor(c.x, h, rng, -2, 2), cos = rand_f32({T, D}, rng), sin = rand_f32({T, D}, rng);
        const int64_t axis = c.axis;
        const std::string what = std::string("rope ") + name(h) + " " + c.x.str() + (transposed ? " transposed" : "");
        auto cf = [=](auto& in, auto& o) { cpu::rope(in[0], in[1], in[2], o[0], axis, transposed); };
        auto gf = [=](auto& in, auto& o) { gpu::rope(in[0], in[1], in[2], o[0], axis, transposed); };
        if (h == F32)
          check_op(what, {x, cos, sin}, {exact(c.x)}, cf, gf);
        else
          check_native16(what, {x, cos, sin}, {out(c.x, h, 2e-3)}, cf, gf);
      }
}

// The loss of x w^T a block of rows at a time: the loss, dx and dw against the
// CPU's kernel, with ignored labels, mean and sum, vocabularies on the warp
// and the block path, N not always a multiple of the block's rows. Without
// the gradients dx and dw are not written.
TEST_F(CudaKernels, LinearCrossEntropy) {
  struct Case {
    int64_t B, T, D, V, R;
  };
  for (const Case& c : {Case{2, 48, 64, 1000, 32}, Case{1, 64, 32, 200, 64}, Case{3, 32, 128, 5003, 40}})
    for (bool mean : {true, false}) {
      const Shape xs{c.B, c.T, c.D}, ws{c.V, c.D};
      HostTensor x = rand_f32(xs, rng), w = rand_f32(ws, rng, -0.2, 0.2);
      HostTensor labels = sce_labels({c.B * c.T, c.V}, -100, 0.1, rng);
      const std::string what = "linear_cross_entropy " + xs.str() + " V " + std::to_string(c.V) + " rows " +
                               std::to_string(c.R) + (mean ? " mean" : " sum");
      check_op(what, {x, w, labels}, {out(Shape()), out(xs), out(ws), scratch({c.R, c.V})},
               [mean](auto& in, auto& o) {
                 cpu::linear_cross_entropy(in[0], in[1], in[2], o[0], o[1], o[2], o[3], -100, mean, true);
               },
               [mean](auto& in, auto& o) {
                 gpu::linear_cross_entropy(in[0], in[1], in[2], o[0], o[1], o[2], o[3], -100, mean, true);
               });
      check_op(what + " without gradients", {x, w, labels}, {out(Shape()), none(xs), none(ws), scratch({c.R, c.V})},
               [mean](auto& in, auto& o) {
                 cpu::linear_cross_entropy(in[0], in[1], in[2], o[0], o[1], o[2], o[3], -100, mean, false);
               },
               [mean](auto& in, auto& o) {
                 gpu::linear_cross_entropy(in[0], in[1], in[2], o[0], o[1], o[2], o[3], -100, mean, false);
               });
    }
}

// A 16-bit block holds the logits rounded to it, as autocast's are, then
// their gradient rounded to it: against the CPU's separate kernels doing
// just that (products of 16-bit operands, the logits cast, the loss and its
// gradient in fp32, the gradient cast). fp32 x and w are rounded once into
// the products' scratch where they fit (all but the XL-shaped case), else
// by each product; x and dx fp32 or 16-bit.
TEST_F(CudaKernels, LinearCrossEntropy16BitBlock) {
  struct Case {
    int64_t N, D, V, R;
  };
  const Case cases[] = {{96, 64, 1000, 32}, {96, 128, 5003, 40}, {1024, 768, 50257, 512}, {512, 1600, 50257, 1024}};
  for (DType h : {DType::BF16, DType::F16})
    for (const Case& c : cases)
      for (DType xt : {F32, h}) {
        // The vocabulary-sized shapes once per format: fp32 x at bf16, 16-bit x at fp16.
        if (c.V == 50257 && (xt == F32) != (h == DType::BF16)) continue;
        const bool mean = c.N != 96 || c.D == 64;
        const Shape xs{c.N, c.D}, ws{c.V, c.D}, ns{c.N, c.V};
        HostTensor x = rand_tensor(xs, xt, rng, -1, 1), w = rand_f32(ws, rng, -0.2, 0.2);
        HostTensor labels = sce_labels(ns, -100, 0.1, rng);
        const std::string what = std::string("linear_cross_entropy, ") + name(h) + " block [" + std::to_string(c.R) +
                                 ", " + std::to_string(c.V) + "], x " + name(xt) + " " + xs.str() + (mean ? " mean" : " sum");
        const auto mp = h == DType::BF16 ? MatmulPrecision::BF16 : MatmulPrecision::FP16;
        const auto cp = h == DType::BF16 ? cpu::MatmulOperands::BF16 : cpu::MatmulOperands::FP16;
        auto reference = [=](bool grads) {
          return [=](auto& in, auto& o) {
            cpu::set_matmul_operands(cp);
            HostTensor logits(ns, F32), l16(ns, h), lf(ns, F32), lp(ns, F32), g(ns, F32), g16(ns, h);
            cpu::matmul(in[0], in[1], logits.view(), false, true);
            cpu::cast(logits.view(), l16.view());
            cpu::cast(l16.view(), lf.view());
            cpu::softmax_cross_entropy(lf.view(), in[2], o[0], lp.view(), -100, mean);
            if (grads) {
              HostTensor one = make_tensor(Shape(), F32, {1.0});
              cpu::softmax_cross_entropy_grad(one.view(), lp.view(), in[2], g.view(), -100, mean);
              cpu::cast(g.view(), g16.view());
              cpu::matmul(g16.view(), in[1], o[1], false, false);
              cpu::matmul(g16.view(), in[0], o[2], true, false);
            }
            cpu::set_matmul_operands(cpu::MatmulOperands::FP32);
          };
        };
        auto run = [=](bool grads) {
          return [=](auto& in, auto& o) {
            gpu::set_matmul_precision(mp);
            gpu::linear_cross_entropy(in[0], in[1], in[2], o[0], o[1], o[2], o[3], -100, mean, grads);
          };
        };
        check_op(what, {x, w, labels},
                 {out(Shape(), F32, 1e-4), out(xs, xt, 1e-2), out(ws, F32, 1e-2), scratch({c.R, c.V}, h)},
                 reference(true), run(true));
        check_op(what + " without gradients", {x, w, labels},
                 {out(Shape(), F32, 1e-4), none(xs, xt), none(ws), scratch({c.R, c.V}, h)}, reference(false), run(false));
        gpu::set_matmul_precision(MatmulPrecision::FP32);
      }
}

TEST_F(CudaKernels, SoftmaxCrossEntropyGrad) {
  for (const SceCase& c : kSce)
    for (bool mean : {true, false}) {
      HostTensor logits = rand_f32(c.logits, rng, -4, 4);
      HostTensor labels = sce_labels(c.logits, c.ignore_index, c.ignored, rng);
      HostTensor loss(Shape(), F32), lp(c.logits, F32);
      cpu::softmax_cross_entropy(logits, labels, loss, lp, c.ignore_index, mean);
      HostTensor dloss = make_tensor(Shape(), F32, {0.7});
      const int64_t ii = c.ignore_index;
      check_op(sce_name("softmax_cross_entropy_grad", c.logits, ii, mean), {dloss, lp, labels}, {out(c.logits)},
               [ii, mean](auto& in, auto& o) { cpu::softmax_cross_entropy_grad(in[0], in[1], in[2], o[0], ii, mean); },
               [ii, mean](auto& in, auto& o) { gpu::softmax_cross_entropy_grad(in[0], in[1], in[2], o[0], ii, mean); });
    }
}

TEST_F(CudaKernels, SoftmaxCrossEntropyBadLabelFailsAtSynchronize) {
  const Shape ls{16, 10};
  HostTensor logits = rand_f32(ls, rng, -4, 4);
  // 10 == C; -1 is not the ignore_index (-100); a label far out of range.
  for (int64_t bad : {int64_t(10), int64_t(-1), int64_t(1) << 40}) {
    HostTensor labels = sce_labels(ls, -100, 0.2, rng);
    labels.as<int64_t>()[7] = bad;
    std::vector<DevPtr> keep;
    View dl = to_device(logits, keep), dlab = to_device(labels, keep);
    keep.push_back(dev_alloc(sizeof(float)));
    View dloss{keep.back().get(), Shape(), F32};
    keep.push_back(dev_alloc(size_t(ls.numel()) * sizeof(float)));
    View dlp{keep.back().get(), ls, F32};
    EXPECT_NO_THROW(gpu::softmax_cross_entropy(dl, dlab, dloss, dlp, -100, true))
        << "label " << bad << ": the launch is asynchronous";
    try {
      gpu::synchronize();
      ADD_FAILURE() << "label " << bad << " of 10 classes: synchronize() did not throw";
    } catch (const fy::Error& e) {
      EXPECT_NE(std::string(e.what()).find("label"), std::string::npos) << e.what();
    }
    EXPECT_NO_THROW(gpu::synchronize()) << "label " << bad << ": the error was reported twice";
  }
  // Labels equal to ignore_index are never out of range.
  HostTensor labels = sce_labels(ls, -100, 0.5, rng);
  check_op("softmax_cross_entropy after an error", {logits, labels}, {out(Shape()), out(ls)},
           [](auto& in, auto& o) { cpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], -100, true); },
           [](auto& in, auto& o) { gpu::softmax_cross_entropy(in[0], in[1], o[0], o[1], -100, true); });
}

// ---- dropout ------------------------------------------------------------------------------

TEST_F(CudaKernels, DropoutSameMaskAndValuesAsCpu) {
  for (Shape s : {Shape{1001}, Shape{16, 128, 768}, Shape{1}, Shape{3, 5, 7}})
    for (double ratio : {0.0, 0.1, 0.5, 1.0})
      for (uint64_t seed : {uint64_t(0), uint64_t(1234), uint64_t(0xDEADBEEFCAFEF00Dull)}) {
        HostTensor x = rand_f32(s, rng, -3, 3);
        check_op("dropout " + s.str() + " ratio " + std::to_string(ratio) + " seed " + std::to_string(seed), {x},
                 {exact(s, F32), exact(s, U8)},
                 [ratio, seed](auto& in, auto& o) { cpu::dropout(in[0], o[0], o[1], ratio, seed); },
                 [ratio, seed](auto& in, auto& o) { gpu::dropout(in[0], o[0], o[1], ratio, seed); });
      }
}

TEST_F(CudaKernels, DropoutGrad) {
  for (Shape s : {Shape{1001}, Shape{16, 128, 768}})
    for (double ratio : {0.0, 0.1, 0.5, 1.0}) {
      HostTensor x = rand_f32(s, rng, -3, 3), y(s, F32), mask(s, U8), dy = rand_f32(s, rng);
      cpu::dropout(x, y, mask, ratio, 42);
      check_op("dropout_grad " + s.str() + " ratio " + std::to_string(ratio), {dy, mask}, {exact(s, F32)},
               [ratio](auto& in, auto& o) { cpu::dropout_grad(in[0], in[1], o[0], ratio); },
               [ratio](auto& in, auto& o) { gpu::dropout_grad(in[0], in[1], o[0], ratio); });
    }
}

// ---- misc ----------------------------------------------------------------------------------

TEST_F(CudaKernels, Fill) {
  struct C {
    Shape s;
    DType dt;
    double v;
  };
  for (const C& c : {C{{1001}, F32, 3.25}, C{{(1 << 20) + 3}, F32, -1.5}, C{Shape(), F32, 7}, C{{4, 5}, F32, 0},
                     C{{37}, I64, -7}, C{{1001}, I64, 1099511627776.0}, C{{1001}, U8, 1}, C{{3, 3}, U8, 0},
                     C{{1001}, F32, 0.1}})  // 0.1 rounds to the nearest float, as static_cast does
    check_op(std::string("fill ") + name(c.dt) + " " + c.s.str() + " " + std::to_string(c.v), {}, {exact(c.s, c.dt)},
             [&c](auto&, auto& o) { cpu::fill(o[0], c.v); }, [&c](auto&, auto& o) { gpu::fill(o[0], c.v); });
}

TEST_F(CudaKernels, Copy) {
  struct C {
    Shape x, y;
    DType dt;
  };
  for (const C& c : {C{{7, 11, 13}, {1001}, F32}, C{{(1 << 20) + 3}, {(1 << 20) + 3}, F32}, C{{33}, {3, 11}, I64},
                     C{{1001}, {1001}, U8}, C{Shape(), {1}, F32}}) {
    HostTensor x = rand_any(c.x, c.dt, rng);
    check_op(std::string("copy ") + name(c.dt) + " " + c.x.str() + " -> " + c.y.str(), {x}, {exact(c.y, c.dt)},
             [](auto& in, auto& o) { cpu::copy(in[0], o[0]); }, [](auto& in, auto& o) { gpu::copy(in[0], o[0]); });
  }
}

// ---- optimizer -------------------------------------------------------------------------

// The GPU's AdamW is the CPU's bit for bit: five steps from the same random
// state with the same random gradients, with weight decay, a loss scale's
// unscale and a clip coefficient, on a length no block size divides.
TEST_F(CudaKernels, AdamWMatchesTheCpuBitForBit) {
  const int64_t n = 1000003;
  fy::AdamWConfig cfg;
  cfg.lr = 3e-4;
  cfg.weight_decay = 0.1f;
  cfg.grad_unscale = 1.f / 1024;
  cfg.grad_coef = 0.7f;
  HostTensor p = rand_f32(Shape{n}, rng), m = rand_f32(Shape{n}, rng, -1e-3, 1e-3), v = rand_f32(Shape{n}, rng, 0, 1e-4);
  std::vector<DevPtr> keep;
  View dp = to_device(p.view(), keep), dm = to_device(m.view(), keep), dv = to_device(v.view(), keep);
  for (int64_t step = 1; step <= 5; ++step) {
    HostTensor g = rand_f32(Shape{n}, rng, -1000, 1000);
    fy::adamw_step(p.view().as<float>(), g.view().as<float>(), m.view().as<float>(), v.view().as<float>(), n, cfg,
                   step);
    const fy::adamw_detail::Scalars c = fy::adamw_detail::make_scalars(cfg, step);
    const gpu::AdamWScalars s{c.decay,         c.beta1,    c.one_m_b1, c.beta2,   c.one_m_b2,
                              c.neg_step_size, c.bc2_sqrt, c.eps,      c.unscale, c.coef};
    gpu::adamw(s, dp, to_device(g.view(), keep), dm, dv);
    gpu::synchronize();
    for (auto [want, got, name] : {std::tuple{&p, dp, "p"}, {&m, dm, "m"}, {&v, dv, "v"}}) {
      HostTensor h = to_host(got);
      const float* a = want->view().as<float>();
      const float* b = h.view().as<float>();
      int64_t bad = 0, first = -1;
      for (int64_t i = 0; i < n; ++i)
        if (std::memcmp(a + i, b + i, sizeof(float)) != 0 && bad++ == 0) first = i;
      ASSERT_EQ(bad, 0) << name << " after step " << step << ": " << bad << " of " << n
                        << " elements differ, the first at " << first << ": cpu " << a[first] << ", gpu "
                        << b[first];
    }
  }
}

// ---- past 2^31 elements -------------------------------------------------------------

// Tensors of more than 2^31 elements (a long sequence's logits over a 128K
// vocabulary; a 175B-class token table), 8.6 GB each: an elementwise kernel
// (its float4 path and tail), the loss over rows whose offsets pass 2^31, and
// a gather of the table's last row. Each checks elements past the boundary
// against values worked out here. About 35 GB of device memory, one part at
// a time; skipped where the device has less free.
TEST_F(CudaKernels, PastTwoToThe31Elements) {
  size_t free_bytes = 0, total = 0;
  FYT_CUDA(cudaMemGetInfo(&free_bytes, &total));
  if (free_bytes < (size_t(20) << 30)) GTEST_SKIP() << "needs 20 GiB of free device memory, has " << (free_bytes >> 20) << " MiB";
  const int64_t big = (int64_t(1) << 31) + 1029;  // not a multiple of 4: the tail too
  auto put = [](View v, int64_t at, float x) {
    FYT_CUDA(cudaMemcpy(static_cast<float*>(v.data) + at, &x, sizeof x, cudaMemcpyHostToDevice));
  };
  auto get = [](View v, int64_t at) {
    float x = 0;
    FYT_CUDA(cudaMemcpy(&x, static_cast<const float*>(v.data) + at, sizeof x, cudaMemcpyDeviceToHost));
    return x;
  };
  {
    DevPtr xp = dev_alloc(size_t(big) * 4), yp = dev_alloc(size_t(big) * 4);
    View x{xp.get(), Shape{big}, F32}, y{yp.get(), Shape{big}, F32};
    gpu::fill(x, 1.0);
    put(x, (int64_t(1) << 31) + 7, -3.f);
    put(x, big - 1, 2.f);
    gpu::unary(UnOp::Neg, x, y);
    gpu::synchronize();
    EXPECT_EQ(get(y, (int64_t(1) << 31) - 1), -1.f);
    EXPECT_EQ(get(y, (int64_t(1) << 31) + 7), 3.f);
    EXPECT_EQ(get(y, big - 2), -1.f);
    EXPECT_EQ(get(y, big - 1), -2.f);
  }
  {
    // Rows of zeros (loss log C each, label 0) but the last, whose label's logit is 10.
    const int64_t C = 50304, N = (int64_t(1) << 31) / C + 2, label = 5;
    ASSERT_GT(N * C, int64_t(1) << 31);
    DevPtr lp = dev_alloc(size_t(N * C) * 4), pp = dev_alloc(size_t(N * C) * 4), ip = dev_alloc(size_t(N) * 8),
           sp = dev_alloc(4);
    View logits{lp.get(), Shape{N, C}, F32}, logp{pp.get(), Shape{N, C}, F32}, labels{ip.get(), Shape{N}, I64},
        loss{sp.get(), Shape(), F32};
    gpu::fill(logits, 0.0);
    gpu::fill(labels, 0.0);
    put(logits, (N - 1) * C + label, 10.f);
    const int64_t last_label = label;
    FYT_CUDA(cudaMemcpy(static_cast<int64_t*>(labels.data) + N - 1, &last_label, 8, cudaMemcpyHostToDevice));
    gpu::softmax_cross_entropy(logits, labels, loss, logp, -100, /*mean=*/false);
    gpu::synchronize();
    const double lse_last = std::log(std::exp(10.0) + double(C - 1));
    const double want = double(N - 1) * std::log(double(C)) + (lse_last - 10.0);
    EXPECT_NEAR(get(loss, 0), want, want * 1e-5);
    EXPECT_NEAR(get(logp, (N - 1) * C + label), 10.0 - lse_last, 1e-5);
    EXPECT_NEAR(get(logp, (N - 1) * C + label + 1), -lse_last, 1e-5);
    EXPECT_NEAR(get(logp, (N - 2) * C + 3), -std::log(double(C)), 1e-5);
  }
  {
    const int64_t D = 12288, R = (int64_t(1) << 31) / D + 2;  // 175B's width
    ASSERT_GT(R * D, int64_t(1) << 31);
    DevPtr tp = dev_alloc(size_t(R * D) * 4), ip = dev_alloc(16), op = dev_alloc(size_t(2 * D) * 4);
    View table{tp.get(), Shape{R, D}, F32}, idx{ip.get(), Shape{2}, I64}, out{op.get(), Shape{2, D}, F32};
    gpu::fill(table, 0.5);
    std::vector<float> row(static_cast<size_t>(D));
    for (int64_t k = 0; k < D; ++k) row[size_t(k)] = float(k) * 0.25f;
    FYT_CUDA(cudaMemcpy(static_cast<float*>(table.data) + (R - 1) * D, row.data(), size_t(D) * 4, cudaMemcpyHostToDevice));
    const int64_t rows[2] = {R - 1, 0};
    FYT_CUDA(cudaMemcpy(idx.data, rows, 16, cudaMemcpyHostToDevice));
    gpu::gather(table, idx, out);
    gpu::synchronize();
    std::vector<float> back(size_t(2 * D));
    FYT_CUDA(cudaMemcpy(back.data(), out.data, back.size() * 4, cudaMemcpyDeviceToHost));
    EXPECT_EQ(std::memcmp(back.data(), row.data(), size_t(D) * 4), 0) << "the table's last row";
    EXPECT_EQ(back[size_t(D)], 0.5f);
  }
}

}  // namespace
}  // namespace fyt
