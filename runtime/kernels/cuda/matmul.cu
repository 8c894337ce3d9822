// numpy matmul on F32 row-major device data via cuBLASLt.
//
// cuBLAS is column-major: a row-major [R, C] matrix is a column-major
// [C, R] one with the same memory, so C = op(A) op(B) is computed as
// C^T = op(B)^T op(A)^T with b passed as cuBLAS's A and a as its B.
// Batches use strided batching (stride 0 for a fully broadcast operand);
// only partial broadcasts loop over the outer batch indices.
// Descriptors, layouts and the heuristic's algorithm are cached per
// shape / strides / alignment / precision, so steady-state calls only
// look up the plan and launch.
//
// BF16 (FP16): both operands are rounded to bf16 (fp16) copies in a fixed
// scratch buffer and multiplied on the tensor cores with fp32 accumulation
// and output, as autocast does. One GEMM whose operands do not fit the
// scratch runs as blocks that do (split16); a batched product that does not
// fit keeps fp32 operands with cuBLAS's COMPUTE_32F_FAST_16BF (_16F),
// slower: TF32-like rates.
//
// Operands or a result stored in 16 bits (fy-half-activations' buffers) go
// to cuBLASLt as they are, with fp32 accumulation; only fp32 operands are
// rounded to copies, whole or, for one GEMM, in blocks of c's rows or
// columns (a Linear's weight too large for the scratch).
#include "abi/sizes.h"

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <climits>
#include <cstdint>
#include <string>
#include <type_traits>
#include <unordered_map>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {
namespace {

[[noreturn]] void cublas_fail(const char* call, cublasStatus_t st, const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  fail(std::string("cuBLASLt: ") + call + " failed: " + cublasLtGetStatusName(st) + " (" +
       cublasLtGetStatusString(st) + ") at " + base + ":" + std::to_string(line));
}

}  // namespace
}  // namespace fy::cuda

#define FY_CUBLAS_CHECK(call)                                                             \
  do {                                                                                    \
    cublasStatus_t fy_st_ = (call);                                                       \
    if (fy_st_ != CUBLAS_STATUS_SUCCESS) ::fy::cuda::cublas_fail(#call, fy_st_, __FILE__, __LINE__); \
  } while (0)

namespace fy::cuda {
using namespace detail;

namespace {

constexpr size_t kWorkspaceBytes = kMatmulWorkspaceBytes;
constexpr size_t kConvertBytes = kMatmulConvertBytes;  // 16-bit copies of both operands

// How a plan multiplies: the precision's compute type on fp32 operands, or
// 16-bit operands (BF16 / FP16 when they fit the scratch).
enum class Mode : int64_t { FP32, TF32, BF16Fast, BF16Operands, FP16Fast, FP16Operands };
bool operands16(Mode m) { return m == Mode::BF16Operands || m == Mode::FP16Operands; }

// m, n, k, batch, stride_a, stride_b, stride_c, trans_a, trans_b, precision,
// align_a, align_b, align_c, c in 16 bits, c's leading dim, the alignment of
// a bias added in the epilogue (0: none) (strides and the leading dim in
// elements, alignments in bytes).
using Key = std::array<int64_t, 16>;
struct KeyHash {
  size_t operator()(const Key& k) const {
    uint64_t h = 1469598103934665603ull;
    for (int64_t v : k) h = (h ^ uint64_t(v)) * 1099511628211ull;
    return size_t(h);
  }
};

struct Plan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t la = nullptr, lb = nullptr, lc = nullptr;  // cuBLAS's A (= b), B (= a), C
  cublasLtMatmulAlgo_t algo{};
};

struct LtContext {
  cublasLtHandle_t handle = nullptr;
  // One workspace per stream: matmuls queued on different streams may run
  // at the same time.
  std::unordered_map<cudaStream_t, void*> workspace, convert;
  std::unordered_map<Key, Plan, KeyHash> plans;
};

// Never destroyed: cuBLAS and CUDA may already be torn down at exit.
LtContext& lt() {
  static LtContext* ctx = [] {
    auto* c = new LtContext;
    FY_CUBLAS_CHECK(cublasLtCreate(&c->handle));
    return c;
  }();
  return *ctx;
}

// Per stream, allocated at first use (matmuls on different streams may run
// at the same time).
void* per_stream(std::unordered_map<cudaStream_t, void*>& m, cudaStream_t s, size_t bytes) {
  auto it = m.find(s);
  if (it != m.end()) return it->second;
  void* p = nullptr;
  FY_CUDA_CHECK(cudaMalloc(&p, bytes));
  m.emplace(s, p);
  return p;
}
void* workspace(cudaStream_t s) { return per_stream(lt().workspace, s, kWorkspaceBytes); }

cublasComputeType_t compute_type(Mode m) {
  switch (m) {
    case Mode::FP32: return CUBLAS_COMPUTE_32F;
    case Mode::TF32: return CUBLAS_COMPUTE_32F_FAST_TF32;
    case Mode::BF16Fast: return CUBLAS_COMPUTE_32F_FAST_16BF;
    case Mode::BF16Operands: return CUBLAS_COMPUTE_32F;
    case Mode::FP16Fast: return CUBLAS_COMPUTE_32F_FAST_16F;
    case Mode::FP16Operands: return CUBLAS_COMPUTE_32F;
  }
  return CUBLAS_COMPUTE_32F;
}

// Largest power of two (<= 256) dividing the address and every batch offset.
int64_t alignment(const void* p, int64_t batch, int64_t stride, size_t elem) {
  uint64_t a = uint64_t(reinterpret_cast<uintptr_t>(p)) | 256u;
  if (batch > 1 && stride != 0) a |= uint64_t(stride) * elem;
  return int64_t(a & (~a + 1));
}

// Column-major [rows, cols] with columns `ld` apart (0: rows).
cublasLtMatrixLayout_t make_layout(cudaDataType_t type, uint64_t rows, uint64_t cols, int64_t batch,
                                   int64_t stride, int64_t ld = 0) {
  cublasLtMatrixLayout_t l = nullptr;
  FY_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&l, type, rows, cols, ld > 0 ? ld : int64_t(rows)));
  if (batch > 1) {
    const int32_t count = int32_t(batch);
    FY_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count)));
    FY_CUBLAS_CHECK(
        cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return l;
}

std::string key_str(const Key& k) {
  return "M=" + std::to_string(k[0]) + " N=" + std::to_string(k[1]) + " K=" + std::to_string(k[2]) +
         " batch=" + std::to_string(k[3]) + (k[7] ? " trans_a" : "") + (k[8] ? " trans_b" : "");
}

const Plan& plan_for(const Key& k) {
  LtContext& ctx = lt();
  auto it = ctx.plans.find(k);
  if (it != ctx.plans.end()) return it->second;
  const int64_t M = k[0], N = k[1], K = k[2], batch = k[3];
  const bool ta = k[7] != 0, tb = k[8] != 0;
  const Mode mode = Mode(k[9]);
  const cudaDataType_t in = mode == Mode::BF16Operands   ? CUDA_R_16BF
                           : mode == Mode::FP16Operands ? CUDA_R_16F
                                                        : CUDA_R_32F;
  Plan p;
  FY_CUBLAS_CHECK(cublasLtMatmulDescCreate(&p.op, compute_type(mode), CUDA_R_32F));
  const cublasOperation_t op_a = tb ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = ta ? CUBLAS_OP_T : CUBLAS_OP_N;
  FY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof(op_a)));
  FY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof(op_b)));
  if (k[15]) {
    // An fp32 bias along c's rows (cuBLAS's column-major D's rows).
    const cublasLtEpilogue_t epi = CUBLASLT_EPILOGUE_BIAS;
    const cudaDataType_t bias_type = CUDA_R_32F;
    FY_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)));
    FY_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof(bias_type)));
    // The heuristic reads the bias pointer's alignment from its value (it is
    // not dereferenced here): an address with the key's alignment stands in
    // until each call sets the real one.
    const void* stand_in = reinterpret_cast<const void*>(uintptr_t(k[15]));
    FY_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(p.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &stand_in, sizeof(stand_in)));
  }
  // Layouts as stored: b is [K,N] (or [N,K] with trans_b) row-major, i.e.
  // column-major [N,K] (or [K,N]); likewise a; c is column-major [N,M].
  p.la = tb ? make_layout(in, K, N, batch, k[5]) : make_layout(in, N, K, batch, k[5]);
  p.lb = ta ? make_layout(in, M, K, batch, k[4]) : make_layout(in, K, M, batch, k[4]);
  p.lc = make_layout(k[13] ? in : CUDA_R_32F, N, M, batch, k[6], k[14]);

  cublasLtMatmulPreference_t pref = nullptr;
  FY_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
  const uint64_t ws = kWorkspaceBytes;
  FY_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)));
  const uint32_t al_a = uint32_t(k[11]), al_b = uint32_t(k[10]), al_c = uint32_t(k[12]);
  FY_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &al_a, sizeof(al_a)));
  FY_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &al_b, sizeof(al_b)));
  FY_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &al_c, sizeof(al_c)));
  FY_CUBLAS_CHECK(
      cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &al_c, sizeof(al_c)));
  cublasLtMatmulHeuristicResult_t res{};
  int found = 0;
  const cublasStatus_t st =
      cublasLtMatmulAlgoGetHeuristic(ctx.handle, p.op, p.la, p.lb, p.lc, p.lc, pref, 1, &res, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  if (st != CUBLAS_STATUS_SUCCESS || found == 0) {
    if (operands16(mode) || k[15]) {
      // Remembered as none (op null): the caller keeps fp32 operands, or adds
      // the bias after the product, instead.
      for (cublasLtMatrixLayout_t l : {p.la, p.lb, p.lc}) cublasLtMatrixLayoutDestroy(l);
      cublasLtMatmulDescDestroy(p.op);
      return ctx.plans.emplace(k, Plan{}).first->second;
    }
    fail(std::string("fy::cuda::matmul: cuBLASLt has no algorithm for ") + key_str(k) + " (" +
         cublasLtGetStatusName(st) + ")");
  }
  p.algo = res.algo;
  return ctx.plans.emplace(k, p).first->second;
}

// A bias for c's columns, added in the epilogue of a single product when
// cuBLASLt has one for it (`added` says whether it did).
struct Bias {
  const float* data = nullptr;
  bool added = false;
};

// One (strided-batched) GEMM: `batch` products of a [M,K] (or [K,M]) and
// b [K,N] (or [N,K]) into c [M,N], whose rows are ldc apart (0: N); strides
// in elements. T: float, or __nv_bfloat16 / __half with 16-bit operands,
// where c may be 16-bit too (c16) and it returns false (nothing launched)
// when cuBLASLt has no algorithm for the operands. With a bias (batch 1),
// in the epilogue where cuBLASLt has one.
template <class T>
bool gemm(const T* a, const T* b, void* c, bool c16, int64_t M, int64_t N, int64_t K, bool ta, bool tb,
          int64_t batch, int64_t sa, int64_t sb, int64_t sc, Mode mode, cudaStream_t s, float beta = 0.f,
          int64_t ldc = 0, Bias* bias = nullptr) {
  check(batch <= INT32_MAX, "matmul", "too many batches");
  if (batch == 1) sa = sb = sc = 0;
  Key k = {M, N, K, batch, sa, sb, sc, ta, tb, int64_t(mode), alignment(a, batch, sa, sizeof(T)),
           alignment(b, batch, sb, sizeof(T)), alignment(c, batch, sc, c16 ? 2 : 4), c16, ldc > 0 ? ldc : N, 0};
  const Plan* plan = nullptr;
  if (bias && bias->data && batch == 1 && beta == 0.f) {
    k[15] = alignment(bias->data, 1, 0, sizeof(float));
    if (const Plan& pb = plan_for(k); pb.op) {
      FY_CUBLAS_CHECK(
          cublasLtMatmulDescSetAttribute(pb.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias->data, sizeof(bias->data)));
      bias->added = true;
      plan = &pb;
    } else {
      k[15] = 0;
    }
  }
  if (!plan) plan = &plan_for(k);
  const Plan& p = *plan;
  if (!p.op) return false;
  const float alpha = 1.f;
  FY_CUBLAS_CHECK(cublasLtMatmul(lt().handle, p.op, &alpha, b, p.la, a, p.lb, &beta, c, p.lc, c, p.lc, &p.algo,
                                 workspace(s), kWorkspaceBytes, s));
  return true;
}

// Round-to-nearest 16-bit copies (fp16: past 65504 to inf).
__device__ __nv_bfloat162 pair_to(float a, float b, __nv_bfloat162*) { return __floats2bfloat162_rn(a, b); }
__device__ __half2 pair_to(float a, float b, __half2*) { return __floats2half2_rn(a, b); }
__device__ __nv_bfloat16 one_to(float a, __nv_bfloat16*) { return __float2bfloat16_rn(a); }
__device__ __half one_to(float a, __half*) { return __float2half_rn(a); }

// With vec, four elements per thread and step (x 16-byte aligned).
template <class H, class H2>
__global__ void to_16bit(const float* __restrict__ x, H* __restrict__ y, int64_t n, bool vec) {
  const int64_t stride = int64_t(gridDim.x) * blockDim.x;
  const int64_t n4 = vec ? n / 4 : 0;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = reinterpret_cast<const float4*>(x)[i];
    H2* o = reinterpret_cast<H2*>(y + 4 * i);
    o[0] = pair_to(v.x, v.y, o);
    o[1] = pair_to(v.z, v.w, o);
  }
  for (int64_t i = 4 * n4 + int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = one_to(x[i], y);
}

template <class H, class H2>
void launch_to_16bit(const float* x, H* y, int64_t n, cudaStream_t s) {
  if (n == 0) return;
  const bool vec = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  const int64_t blocks = std::min<int64_t>(((vec ? n / 4 : n) + 255) / 256 + 1, 4096);
  to_16bit<H, H2><<<unsigned(blocks), 256, 0, s>>>(x, y, n, vec);
  FY_CUDA_LAUNCHED("matmul (16-bit operands)");
}

// A [rows, cols] block of a row-major matrix whose rows are `ld` apart,
// copied dense: threads run along a row, so reads and writes coalesce.
template <class H>
__global__ void block_to_16bit(const float* __restrict__ x, int64_t ld, int64_t rows, int64_t cols,
                               H* __restrict__ y) {
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y)
    for (int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; c < cols; c += int64_t(gridDim.x) * blockDim.x)
      y[r * cols + c] = one_to(x[r * ld + c], y);
}

template <class H, class H2>
void launch_block_to_16bit(const float* x, int64_t ld, int64_t rows, int64_t cols, H* y, cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  if (ld == cols) return launch_to_16bit<H, H2>(x, y, rows * cols, s);
  const dim3 grid(unsigned(std::min<int64_t>((cols + 255) / 256, 64)), unsigned(std::min<int64_t>(rows, 65535)));
  block_to_16bit<H><<<grid, 256, 0, s>>>(x, ld, rows, cols, y);
  FY_CUDA_LAUNCHED("matmul (16-bit operand block)");
}

constexpr size_t align256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// One GEMM c[Mt,N] = a[Mt,K] (a^T: [K,Mt]) x b (b^T) whose 16-bit operands do
// not fit the scratch together: in row blocks of c, each a product of the
// same K with all of b (rounded first when fp32, fb), when b's copy leaves
// room for 1024 rows of a or more. False otherwise (the caller runs it on
// fp32 operands), or when cuBLASLt has no algorithm for a block (c perhaps
// partly written). Blocks of K added into c instead were slower than fp32
// operands on an H100 for the one such product in our models, the logits'
// input gradient (2.68 against 2.00 ms at d 1024, bench/RESULTS.md, the
// H100 run of 2026-11-27, commit ca5437b).
template <class H, class H2>
bool split_rows(const float* pa, const void* pb, bool fb, void* pc, bool c16, int64_t Mt, int64_t N, int64_t K,
                bool ta, bool tb, Mode mode, char* scratch, cudaStream_t s, float beta) {
  constexpr int64_t kMinRows = 1024;
  const size_t room = kConvertBytes - 256;
  const size_t b16 = fb ? align256(size_t(K) * size_t(N) * 2) : 0;
  if (b16 >= room || int64_t((room - b16) / (size_t(K) * 2)) < kMinRows) return false;
  // c's rows m0.. come from a's rows (a^T: columns) m0.. and all of b.
  int64_t rows = int64_t((room - b16) / (size_t(K) * 2)) / 64 * 64;
  const int64_t pieces = (Mt + rows - 1) / rows;
  rows = ((Mt + pieces - 1) / pieces + 63) / 64 * 64;
  const H* B = static_cast<const H*>(pb);
  if (fb) {
    launch_to_16bit<H, H2>(static_cast<const float*>(pb), reinterpret_cast<H*>(scratch), K * N, s);
    B = reinterpret_cast<const H*>(scratch);
  }
  H* A = reinterpret_cast<H*>(scratch + b16);
  const size_t ces = c16 ? 2 : 4;
  for (int64_t m0 = 0; m0 < Mt; m0 += rows) {
    const int64_t m = std::min(rows, Mt - m0);
    if (ta)
      launch_block_to_16bit<H, H2>(pa + m0, Mt, K, m, A, s);  // dense [K, m]
    else
      launch_to_16bit<H, H2>(pa + m0 * K, A, m * K, s);
    if (!gemm(static_cast<const H*>(A), B, static_cast<char*>(pc) + size_t(m0 * N) * ces, c16, m, N, K, ta, tb, 1,
              0, 0, 0, mode, s, beta))
      return false;
  }
  return true;
}

// One GEMM c[Mt,N] = a x b (b^T) whose a is 16-bit and whose fp32 b does not
// fit the scratch (a Linear's weight over the vocabulary): in blocks of c's
// columns, each from a block of b's columns (b^T's rows) rounded in turn.
// False when the scratch holds fewer than 64 of them or cuBLASLt has no
// algorithm for a block.
template <class H, class H2>
bool split_cols(const H* A, const float* pb, void* pc, bool c16, int64_t Mt, int64_t N, int64_t K, bool ta,
                bool tb, Mode mode, char* scratch, cudaStream_t s, float beta) {
  int64_t cols = int64_t(kConvertBytes / (size_t(K) * 2)) / 64 * 64;
  if (cols < 64) return false;
  const int64_t pieces = (N + cols - 1) / cols;
  cols = ((N + pieces - 1) / pieces + 63) / 64 * 64;
  H* B = reinterpret_cast<H*>(scratch);
  const size_t ces = c16 ? 2 : 4;
  for (int64_t n0 = 0; n0 < N; n0 += cols) {
    const int64_t n = std::min(cols, N - n0);
    if (tb)
      launch_to_16bit<H, H2>(pb + n0 * K, B, n * K, s);  // b^T's rows: [n, K]
    else
      launch_block_to_16bit<H, H2>(pb + n0, N, K, n, B, s);  // dense [K, n]
    if (!gemm(A, static_cast<const H*>(B), static_cast<char*>(pc) + size_t(n0) * ces, c16, Mt, n, K, ta, tb, 1, 0,
              0, 0, mode, s, beta, N))
      return false;
  }
  return true;
}

// The 16-bit type among a product's operands and result, F32 when none is;
// one 16-bit type per product.
DType sixteen_bits(const View& a, const View& b, const View& c, const char* op) {
  DType h = DType::F32;
  for (const View* v : {&a, &b, &c}) {
    if (v->dtype == DType::F32) continue;
    check(v->dtype == DType::BF16 || v->dtype == DType::F16, op,
          std::string("operands and result are F32, BF16 or F16, got ") + dtype_name(v->dtype));
    check(h == DType::F32 || h == v->dtype, op, "BF16 and F16 in one product");
    h = v->dtype;
  }
  return h;
}

}  // namespace

void* detail::convert_scratch() { return per_stream(lt().convert, current_stream(), kConvertBytes); }

size_t matmul_scratch_bytes(MatmulPrecision p) {
  return kWorkspaceBytes + (p == MatmulPrecision::BF16 || p == MatmulPrecision::FP16 ? kConvertBytes : 0);
}

void matmul(View a, View b, View c, bool ta, bool tb) { matmul_into(a, b, c, ta, tb, false); }

namespace {

// matmul_into, with a bias for c's columns added in the epilogue where the
// product is one GEMM and cuBLASLt has one for it (bias->added says so).
void product(View a, View b, View c, bool ta, bool tb, bool accumulate, Bias* bias) {
  const char* op = "matmul";
  const DType h = sixteen_bits(a, b, c, op);
  const int ra = a.shape.rank, rb = b.shape.rank;
  check(ra >= 2 && rb >= 2, op, "operands need rank >= 2, got " + a.shape.str() + " and " + b.shape.str());
  // (A product that falls back to other operands runs again from the start:
  // only one GEMM, which fails before it writes, may add to c.)
  check(!accumulate || (ra == 2 && rb == 2), op, "adds into c for rank-2 operands only");
  const int64_t M = ta ? a.shape[ra - 1] : a.shape[ra - 2];
  const int64_t K = ta ? a.shape[ra - 2] : a.shape[ra - 1];
  const int64_t Kb = tb ? b.shape[rb - 1] : b.shape[rb - 2];
  const int64_t N = tb ? b.shape[rb - 2] : b.shape[rb - 1];
  check(K == Kb, op, "inner dims differ: a " + a.shape.str() + (ta ? "^T" : "") + " b " + b.shape.str() +
                         (tb ? "^T" : ""));
  // Broadcast batch shape (right-aligned, numpy rules).
  const Shape ab(a.shape.d, ra - 2), bb(b.shape.d, rb - 2);
  Shape cs;
  cs.rank = ab.rank > bb.rank ? ab.rank : bb.rank;
  for (int i = 0; i < cs.rank; ++i) {
    const int ia = i - (cs.rank - ab.rank), ib = i - (cs.rank - bb.rank);
    const int64_t da = ia >= 0 ? ab.d[ia] : 1, db = ib >= 0 ? bb.d[ib] : 1;
    check(da == db || da == 1 || db == 1, op, "batch dims of " + a.shape.str() + " and " + b.shape.str() +
                                                  " do not broadcast");
    cs.d[i] = da == 1 ? db : da;
  }
  check(cs.rank + 2 <= Shape::kMaxRank, op, "rank too large");
  const Shape cb = cs;
  cs.d[cs.rank++] = M;
  cs.d[cs.rank++] = N;
  check_shape(c, cs, op, "c");
  if (c.numel() == 0) return;
  cudaStream_t s = current_stream();
  char* pc = static_cast<char*>(c.data);
  const bool c16 = c.dtype != DType::F32;
  const size_t ces = c16 ? 2 : 4;
  if (K == 0) {
    if (!accumulate) FY_CUDA_CHECK(cudaMemsetAsync(pc, 0, c.nbytes(), s));
    return;
  }
  const float beta = accumulate ? 1.f : 0.f;
  const MatmulPrecision prec = matmul_precision();
  const int64_t nbatch = c.numel() / (M * N);
  // a's batches stack into the rows of one GEMM: b shared, a not transposed
  // (or unbatched).
  const bool oneGemm = bb.numel() == 1 && (ab.numel() == 1 || !ta);
  auto run = [&](const auto* A, const auto* B, Mode mode) {
    if (bb.numel() == 1 && !ta && ab.numel() == nbatch) {
      // x @ W with a shared W: a's batches stacked into one tall GEMM.
      return gemm(A, B, pc, c16, nbatch * M, N, K, false, tb, 1, 0, 0, 0, mode, s, beta, 0, bias);
    }
    // Coalesced batch iteration: the innermost dim is one strided-batched
    // call (stride 0 where broadcast); any outer dims loop.
    const cpu::detail::Strided it = cpu::detail::broadcast_iter(cb, {ab, bb}, op);
    const int R = it.rank - 1;
    const int64_t batch = it.dims[R];
    const int64_t sc = it.stride[0][R] * M * N, sa = it.stride[1][R] * M * K, sb = it.stride[2][R] * K * N;
    int64_t off[cpu::detail::Strided::kMaxOps];
    for (int64_t r = 0; r < it.rows(); ++r) {
      it.row_offsets(r, off);
      if (!gemm(A + off[1] * M * K, B + off[2] * K * N, pc + size_t(off[0] * M * N) * ces, c16, M, N, K, ta, tb,
                batch, sa, sb, sc, mode, s, beta, 0, it.rows() == 1 ? bias : nullptr))
        return false;  // any products already written are written again
    }
    return true;
  };
  // Each operand's copy starts on a 256-byte boundary of the scratch.
  const bool fa = a.dtype == DType::F32, fb = b.dtype == DType::F32;
  const size_t a16 = matmul_copy_b_offset(fa ? size_t(a.numel()) : 0);
  const bool fits = matmul_copies_fit(fa ? size_t(a.numel()) : 0, fb ? size_t(b.numel()) : 0);
  auto scratch = [&] { return static_cast<char*>(per_stream(lt().convert, s, kConvertBytes)); };
  // 16-bit operands, the fp32 ones among them rounded to copies.
  auto run16 = [&](auto* tag, auto* tag2, Mode mode) {
    using H = std::remove_pointer_t<decltype(tag)>;
    using H2 = std::remove_pointer_t<decltype(tag2)>;
    char* sc = fa || fb ? scratch() : nullptr;
    const H* A = static_cast<const H*>(a.data);
    const H* B = static_cast<const H*>(b.data);
    if (fa) {
      launch_to_16bit<H, H2>(static_cast<const float*>(a.data), reinterpret_cast<H*>(sc), a.numel(), s);
      A = reinterpret_cast<const H*>(sc);
    }
    if (fb) {
      launch_to_16bit<H, H2>(static_cast<const float*>(b.data), reinterpret_cast<H*>(sc + a16), b.numel(), s);
      B = reinterpret_cast<const H*>(sc + a16);
    }
    return run(A, B, mode);
  };
  if (h != DType::F32) {
    // Stored 16-bit: no fp32 operands to fall back on.
    const Mode mode = h == DType::BF16 ? Mode::BF16Operands : Mode::FP16Operands;
    auto mixed = [&](auto* tag, auto* tag2) {
      using H = std::remove_pointer_t<decltype(tag)>;
      using H2 = std::remove_pointer_t<decltype(tag2)>;
      if (fits) return run16(tag, tag2, mode);
      check(oneGemm, op, "a batched product of " + a.shape.str() + " and " + b.shape.str() +
                             " whose fp32 operands' 16-bit copies exceed the scratch");
      if (fa)
        return split_rows<H, H2>(static_cast<const float*>(a.data), b.data, fb, pc, c16, nbatch * M, N, K, ta, tb,
                                 mode, scratch(), s, beta);
      return split_cols<H, H2>(static_cast<const H*>(a.data), static_cast<const float*>(b.data), pc, c16,
                               nbatch * M, N, K, ta, tb, mode, scratch(), s, beta);
    };
    const bool done = h == DType::BF16
                          ? mixed(static_cast<__nv_bfloat16*>(nullptr), static_cast<__nv_bfloat162*>(nullptr))
                          : mixed(static_cast<__half*>(nullptr), static_cast<__half2*>(nullptr));
    check(done, op, std::string("no way to run ") + dtype_name(a.dtype) + " " + a.shape.str() + (ta ? "^T" : "") +
                        " x " + dtype_name(b.dtype) + " " + b.shape.str() + (tb ? "^T" : "") + " into " +
                        dtype_name(c.dtype) + ": cuBLASLt has no algorithm, or the scratch no block, for it");
    return;
  }
  const float* pa = static_cast<const float*>(a.data);
  const float* pb = static_cast<const float*>(b.data);
  if (fits) {
    if (prec == MatmulPrecision::BF16 &&
        run16(static_cast<__nv_bfloat16*>(nullptr), static_cast<__nv_bfloat162*>(nullptr), Mode::BF16Operands))
      return;
    if (prec == MatmulPrecision::FP16 &&
        run16(static_cast<__half*>(nullptr), static_cast<__half2*>(nullptr), Mode::FP16Operands))
      return;
  } else if ((prec == MatmulPrecision::BF16 || prec == MatmulPrecision::FP16) && matmul_blocks() && !accumulate &&
             oneGemm) {
    // One GEMM (a's batches stack into rows) too large for the scratch: in
    // blocks whose copies fit, still on the tensor cores' 16-bit operands.
    if (prec == MatmulPrecision::BF16 &&
        split_rows<__nv_bfloat16, __nv_bfloat162>(pa, pb, true, pc, false, nbatch * M, N, K, ta, tb,
                                                  Mode::BF16Operands, scratch(), s, 0.f))
      return;
    if (prec == MatmulPrecision::FP16 &&
        split_rows<__half, __half2>(pa, pb, true, pc, false, nbatch * M, N, K, ta, tb, Mode::FP16Operands,
                                    scratch(), s, 0.f))
      return;
  }
  const Mode mode = prec == MatmulPrecision::FP32   ? Mode::FP32
                    : prec == MatmulPrecision::TF32 ? Mode::TF32
                    : prec == MatmulPrecision::FP16 ? Mode::FP16Fast
                                                    : Mode::BF16Fast;
  run(pa, pb, mode);
}

}  // namespace

void matmul_into(View a, View b, View c, bool ta, bool tb, bool accumulate) {
  product(a, b, c, ta, tb, accumulate, nullptr);
}

namespace {
size_t bias_epilogues = 0;
}  // namespace

size_t matmul_bias_epilogues() { return bias_epilogues; }

void matmul_bias(View a, View b, View bias, View c, bool ta, bool tb) {
  const char* op = "matmul_bias";
  check_dtype(bias, DType::F32, op, "bias");
  check(bias.shape.rank == 1 && c.shape.rank >= 1 && bias.shape[0] == c.shape[c.shape.rank - 1], op,
        "bias must be 1-D with c's last dim, got " + bias.shape.str() + " for " + c.shape.str());
  Bias e{static_cast<const float*>(bias.data)};
  product(a, b, c, ta, tb, false, &e);
  if (e.added)
    ++bias_epilogues;
  else
    binary(BinOp::Add, c, bias, c);  // a 16-bit c rounded twice: the product's, then the sum's
}

}  // namespace fy::cuda
