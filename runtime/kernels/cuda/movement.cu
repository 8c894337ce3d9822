// Data movement on the device: transpose, slice (+ grad), concat, gather
// (+ grad). Copies are bit-exact; gather_grad adds each table row's
// gradients in position order, as the CPU does, so it matches bit for bit.
// slice, slice_grad and concat between float formats (half.cuh) convert as
// they move: a cast's bits.
#include <cub/device/device_radix_sort.cuh>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/half.cuh"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {
namespace {

namespace cd = ::fy::cpu::detail;
using detail::check;
using detail::check_dtype;
using detail::check_shape;
using detail::current_stream;
using detail::DevStrided;
using detail::grid_for;
using detail::host_shapes;
using detail::offsets;
using detail::thread_index;
using detail::thread_stride;

constexpr int kThreads = 256;

inline uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }



// ---- strided copy: dst[off0] = src[off1] over the iteration space -------------------

template <class T, class I> __global__ void k_strided_copy(DevStrided s, I n, T* dst, const T* src) {
  for (I i = thread_index<I>(); i < n; i += thread_stride<I>()) {
    int64_t off[2];
    offsets<2>(s, i, off);
    dst[off[0]] = src[off[1]];
  }
}

// Moves g elements at a time (up to 16 bytes) when the inner dim is
// contiguous on both sides and every offset and stride is a multiple of g.
int64_t widen(cd::Strided& it, size_t es, const void* dst, const void* src) {
  const int R = it.rank - 1;
  if (it.stride[0][R] != 1 || it.stride[1][R] != 1) return 1;
  int64_t g = int64_t(16 / es);
  for (; g > 1; g /= 2) {
    bool ok = it.dims[R] % g == 0 && addr(dst) % (g * es) == 0 && addr(src) % (g * es) == 0;
    for (int k = 0; k < 2 && ok; ++k) {
      ok = it.base[k] % g == 0;
      for (int d = 0; d < R && ok; ++d) ok = it.stride[k][d] % g == 0;
    }
    if (ok) break;
  }
  if (g > 1) {
    it.dims[R] /= g;
    for (int k = 0; k < 2; ++k) {
      it.base[k] /= g;
      for (int d = 0; d < R; ++d) it.stride[k][d] /= g;
    }
  }
  return g;
}

template <class T> void launch_copy(const cd::Strided& it, void* dst, const void* src) {
  const int64_t n = it.numel();
  const DevStrided s(it);
  if (n <= INT32_MAX) {
    k_strided_copy<T, uint32_t><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        s, uint32_t(n), static_cast<T*>(dst), static_cast<const T*>(src));
  } else {
    k_strided_copy<T, int64_t><<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(
        s, n, static_cast<T*>(dst), static_cast<const T*>(src));
  }
  FY_CUDA_LAUNCHED("k_strided_copy");
}

// Operand 0 indexes dst, operand 1 src, in elements of es bytes.
void strided_copy(cd::Strided it, size_t es, void* dst, const void* src) {
  if (it.numel() == 0) return;
  if (it.rank == 1 && it.stride[0][0] == 1 && it.stride[1][0] == 1) {
    FY_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(dst) + it.base[0] * es,
                                  static_cast<const char*>(src) + it.base[1] * es, size_t(it.dims[0]) * es,
                                  cudaMemcpyDeviceToDevice, current_stream()));
    return;
  }
  switch (size_t(widen(it, es, dst, src)) * es) {
    case 1: return launch_copy<uint8_t>(it, dst, src);
    case 2: return launch_copy<uint16_t>(it, dst, src);
    case 4: return launch_copy<uint32_t>(it, dst, src);
    case 8: return launch_copy<uint64_t>(it, dst, src);
    case 16: return launch_copy<uint4>(it, dst, src);
    default: fail("fy::cuda: unsupported element size");
  }
}

// ---- strided conversion: dst[off0] = src[off1] between float formats ------------------

__global__ void k_strided_convert(DevStrided s, int64_t n, detail::FOut dst, detail::FIn src) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    int64_t off[2];
    offsets<2>(s, i, off);
    dst.set(off[0], src[off[1]]);
  }
}

// Operand 0 indexes dst, operand 1 src: a strided copy when the formats
// agree, else a conversion.
void strided_move(const cd::Strided& it, View dst, View src, const char* op) {
  if (dst.dtype == src.dtype || !detail::any16({dst, src})) {
    check(dst.dtype == src.dtype, op, "dtype mismatch");
    return strided_copy(it, dtype_size(dst.dtype), dst.data, src.data);
  }
  const int64_t n = it.numel();
  if (n == 0) return;
  const detail::FOut d = detail::fout(dst, op, "out");
  const detail::FIn x = detail::fin(src, op, "in");
  k_strided_convert<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(DevStrided(it), n, d, x);
  FY_CUDA_LAUNCHED("k_strided_convert");
}

// ---- transpose: tiled when y's last dim is not x's last ---------------------------
// y is walked as a batch of 2-D transposes between dim A (stride 1 in x) and
// dim L (y's last, stride 1 in y); a 32x32 tile is read along A and written
// along L, so both sides stay coalesced.
struct TileGeom {
  int nb = 0;  // the other dims, with x's and y's strides
  int64_t bdim[Shape::kMaxRank] = {}, bx[Shape::kMaxRank] = {}, by[Shape::kMaxRank] = {};
  int64_t A = 0, L = 0, xsL = 0, ysA = 0;
  int64_t tilesA = 0, tilesL = 0, ntiles = 0;
};

template <class T> __global__ void k_transpose_tiled(TileGeom g, const T* x, T* y) {
  __shared__ T tile[32][33];
  const int tx = threadIdx.x, ty = threadIdx.y;
  for (int64_t t = blockIdx.x; t < g.ntiles; t += gridDim.x) {
    const int64_t tl = t % g.tilesL, r = t / g.tilesL, ta = r % g.tilesA;
    int64_t b = r / g.tilesA, xo = 0, yo = 0;
    for (int d = g.nb - 1; d >= 0; --d) {
      const int64_t q = b / g.bdim[d], i = b - q * g.bdim[d];
      b = q;
      xo += i * g.bx[d];
      yo += i * g.by[d];
    }
    const int64_t a0 = ta * 32, l0 = tl * 32;
    for (int k = ty; k < 32; k += 8) {
      const int64_t l = l0 + k, a = a0 + tx;
      if (l < g.L && a < g.A) tile[k][tx] = x[xo + a + l * g.xsL];
    }
    __syncthreads();
    for (int k = ty; k < 32; k += 8) {
      const int64_t a = a0 + k, l = l0 + tx;
      if (a < g.A && l < g.L) y[yo + a * g.ysA + l] = tile[tx][k];
    }
    __syncthreads();
  }
}

template <class T> void launch_tiled(const TileGeom& g, const void* x, void* y) {
  const unsigned grid = unsigned(g.ntiles < (1 << 20) ? g.ntiles : (1 << 20));
  k_transpose_tiled<T><<<grid, dim3(32, 8), 0, current_stream()>>>(g, static_cast<const T*>(x), static_cast<T*>(y));
  FY_CUDA_LAUNCHED("k_transpose_tiled");
}

// Launches the tiled kernel if the space suits it; false otherwise.
bool transpose_tiled(const cd::Strided& it, size_t es, const void* x, void* y) {
  const int L = it.rank - 1;
  if (L < 1 || it.stride[1][L] == 1) return false;
  int A = -1;
  for (int d = 0; d < L; ++d)
    if (it.stride[1][d] == 1) A = d;
  if (A < 0 || it.dims[A] < 8 || it.dims[L] < 8) return false;
  TileGeom g;
  for (int d = 0; d < L; ++d) {
    if (d == A) continue;
    g.bdim[g.nb] = it.dims[d];
    g.bx[g.nb] = it.stride[1][d];
    g.by[g.nb++] = it.stride[0][d];
  }
  g.A = it.dims[A];
  g.L = it.dims[L];
  g.xsL = it.stride[1][L];
  g.ysA = it.stride[0][A];
  g.tilesA = (g.A + 31) / 32;
  g.tilesL = (g.L + 31) / 32;
  g.ntiles = it.numel() / (g.A * g.L) * g.tilesA * g.tilesL;
  switch (es) {
    case 1: launch_tiled<uint8_t>(g, x, y); return true;
    case 2: launch_tiled<uint16_t>(g, x, y); return true;
    case 4: launch_tiled<uint32_t>(g, x, y); return true;
    case 8: launch_tiled<uint64_t>(g, x, y); return true;
    default: return false;
  }
}

// The slice's iteration space, with the CPU's checks.
cd::Strided slice_iter(const Shape& full, const Shape& part, const std::vector<int64_t>& starts,
                       const std::vector<int64_t>& steps, const char* op) {
  return host_shapes(
      [&] { return cd::slice_iter(full, part, starts.data(), starts.size(), steps.data(), steps.size(), op); });
}

// ---- gather ---------------------------------------------------------------------------

// The CPU's checks but the index range, which the kernels check; returns the
// table's row length.
int64_t check_gather(const char* op, const View& idx, const Shape& table, const View& rowsv) {
  check_dtype(idx, DType::I64, op, "indices");
  check(table.rank >= 1, op, "table must have rank >= 1");
  Shape expect = idx.shape;
  check(expect.rank + table.rank - 1 <= Shape::kMaxRank, op, "rank too large");
  for (int i = 1; i < table.rank; ++i) expect.d[expect.rank++] = table.d[i];
  check_shape(rowsv, expect, op, "rows tensor");
  return cd::prod(table, 1, table.rank);
}

// A bad index flags the error (reported by synchronize) and yields zeros.
template <class U, class I>
__global__ void k_gather(const U* table, const int64_t* idx, U* out, I total, I du, int64_t rows, int* flag) {
  for (I i = thread_index<I>(); i < total; i += thread_stride<I>()) {
    const I r = i / du, c = i - r * du;
    const int64_t id = idx[r];
    if (id < 0 || id >= rows) {
      *flag = int(detail::DeviceError::GatherIndex);
      out[i] = U{};
    } else {
      out[i] = table[id * int64_t(du) + c];
    }
  }
}

template <class U> void launch_gather(const void* table, const int64_t* idx, void* out, int64_t total, int64_t du,
                                      int64_t rows) {
  int* flag = detail::device_error_flag();
  if (total <= INT32_MAX) {
    k_gather<U, uint32_t><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<const U*>(table), idx, static_cast<U*>(out), uint32_t(total), uint32_t(du), rows, flag);
  } else {
    k_gather<U, int64_t><<<grid_for(total, kThreads), kThreads, 0, current_stream()>>>(
        static_cast<const U*>(table), idx, static_cast<U*>(out), total, du, rows, flag);
  }
  FY_CUDA_LAUNCHED("k_gather");
}

// Sort keys for gather_grad: the index, or `rows` (sorts last) when out of
// range, which also flags the error. With null keys it only checks.
__global__ void k_keys(const int64_t* idx, int64_t n, int64_t rows, uint64_t* keys, int64_t* pos, int* flag) {
  for (int64_t i = thread_index<int64_t>(); i < n; i += thread_stride<int64_t>()) {
    const int64_t id = idx[i];
    const bool ok = id >= 0 && id < rows;
    if (!ok) *flag = int(detail::DeviceError::GatherIndex);
    if (keys) {
      keys[i] = ok ? uint64_t(id) : uint64_t(rows);
      pos[i] = i;
    }
  }
}

// A block per sorted position; the block at the start of a run of equal keys
// sums the dy rows of the run in position order (the sort is stable) and
// writes the table row. Runs are found by binary search in the sorted keys.
template <int V>
__global__ void k_gather_grad_runs(const uint64_t* keys, const int64_t* pos, int64_t n, uint64_t rows,
                                   const float* dy, const float* base, float* dtable, int64_t D) {
  const int64_t dv = D / V;
  for (int64_t k = blockIdx.x; k < n; k += gridDim.x) {
    const uint64_t key = keys[k];
    if (key >= rows) break;                     // bad indices sort last
    if (k > 0 && keys[k - 1] == key) continue;  // inside a run
    int64_t lo = k + 1, hi = n;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo) / 2;
      if (keys[mid] == key) lo = mid + 1;
      else hi = mid;
    }
    const int64_t end = lo;
    float* out = dtable + int64_t(key) * D;
    for (int64_t c = threadIdx.x; c < dv; c += blockDim.x) {
      if constexpr (V == 4) {
        float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
        for (int64_t e = k; e < end; ++e) {
          const float4 v = *reinterpret_cast<const float4*>(dy + pos[e] * D + 4 * c);
          acc.x += v.x;
          acc.y += v.y;
          acc.z += v.z;
          acc.w += v.w;
        }
        if (base) {  // base's row plus the sum, as add(base, gather_grad) rounds
          const float4 b = *reinterpret_cast<const float4*>(base + int64_t(key) * D + 4 * c);
          acc = make_float4(b.x + acc.x, b.y + acc.y, b.z + acc.z, b.w + acc.w);
        }
        *reinterpret_cast<float4*>(out + 4 * c) = acc;
      } else {
        float acc = 0.f;
        for (int64_t e = k; e < end; ++e) acc += dy[pos[e] * D + c];
        out[c] = base ? base[int64_t(key) * D + c] + acc : acc;
      }
    }
  }
}

// Stream-ordered scratch memory, freed (in stream order) on scope exit.
struct Scratch {
  void* p = nullptr;
  explicit Scratch(size_t bytes) { FY_CUDA_CHECK(cudaMallocAsync(&p, bytes, current_stream())); }
  ~Scratch() {
    if (p) cudaFreeAsync(p, current_stream());  // errors surface at the next checked call
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

inline size_t round256(size_t b) { return (b + 255) & ~size_t(255); }

}  // namespace

// ---- entry points ------------------------------------------------------------------

void transpose(View x, View y, const std::vector<int64_t>& perm) {
  check(int(perm.size()) == x.shape.rank, "transpose", "perm length differs from rank");
  cd::Strided it = host_shapes([&] { return cd::transpose_iter(x, y, perm.data()); });
  if (x.numel() == 0) return;
  const size_t es = dtype_size(x.dtype);
  if (transpose_tiled(it, es, x.data, y.data)) return;
  strided_copy(it, es, y.data, x.data);
}

void slice(View x, View y, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps) {
  const cd::Strided it = slice_iter(x.shape, y.shape, starts, steps, "slice");
  if (y.numel() == 0) return;
  strided_move(it, y, x, "slice");
}

void slice_grad(View dy, View dx, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps) {
  check(dx.dtype == dy.dtype || detail::any16({dx, dy}), "slice_grad", "dtype mismatch");
  cd::Strided it = slice_iter(dx.shape, dy.shape, starts, steps, "slice_grad");
  // Zero bits are zero in every dtype.
  if (dx.nbytes()) FY_CUDA_CHECK(cudaMemsetAsync(dx.data, 0, dx.nbytes(), current_stream()));
  if (dy.numel() == 0) return;
  // The walk of slice with the copy direction reversed: swap operands.
  for (int i = 0; i < it.rank; ++i) std::swap(it.stride[0][i], it.stride[1][i]);
  std::swap(it.base[0], it.base[1]);
  strided_move(it, dx, dy, "slice_grad");
}

void concat(const std::vector<View>& ins, View out, int64_t axis) {
  const int R = out.shape.rank;
  // Float formats may differ (half.cuh): shapes checked as out's dtype, each
  // input converted as it moves.
  std::vector<View> as_out(ins);
  for (View& v : as_out)
    if (detail::any16({v, out})) v.dtype = out.dtype;
  const int a = host_shapes([&] { return cd::concat_axis(as_out, out, axis); });
  // Each input is a [outer, len] block at column pos of out's [outer, out_len].
  const int64_t outer = cd::prod(out.shape, 0, a), inner = cd::prod(out.shape, a + 1, R);
  const int64_t out_len = out.shape[a] * inner;
  int64_t pos = 0;
  for (const View& v : ins) {
    const int64_t len = v.shape[a] * inner;
    if (len && outer) {
      cd::Strided it;
      it.rank = 2;
      it.nops = 2;
      it.dims[0] = outer;
      it.dims[1] = len;
      it.stride[0][0] = out_len;
      it.stride[0][1] = 1;
      it.stride[1][0] = len;
      it.stride[1][1] = 1;
      it.base[0] = pos;
      it.coalesce();
      strided_move(it, out, v, "concat");
    }
    pos += len;
  }
}

void gather(View table, View idx, View out) {
  check(table.dtype == out.dtype, "gather", "dtype mismatch");
  const int64_t D = check_gather("gather", idx, table.shape, out);
  const int64_t n = idx.numel(), rows = table.shape[0];
  if (n == 0) return;
  const int64_t* pi = static_cast<const int64_t*>(idx.data);
  if (D == 0) {  // nothing to copy, but bad indices still fail
    k_keys<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(pi, n, rows, nullptr, nullptr,
                                                                     detail::device_error_flag());
    FY_CUDA_LAUNCHED("k_keys");
    return;
  }
  // Copy in the widest unit that divides a row and suits both pointers.
  const size_t row = size_t(D) * dtype_size(table.dtype);
  size_t unit = 16;
  while (unit > 1 && (row % unit || addr(table.data) % unit || addr(out.data) % unit)) unit /= 2;
  const int64_t du = int64_t(row / unit), total = n * du;
  switch (unit) {
    case 1: return launch_gather<uint8_t>(table.data, pi, out.data, total, du, rows);
    case 2: return launch_gather<uint16_t>(table.data, pi, out.data, total, du, rows);
    case 4: return launch_gather<uint32_t>(table.data, pi, out.data, total, du, rows);
    case 8: return launch_gather<uint64_t>(table.data, pi, out.data, total, du, rows);
    default: return launch_gather<uint4>(table.data, pi, out.data, total, du, rows);
  }
}

namespace {
// dtable[r] = base[r] + (r's dy rows summed in index order) for the rows the
// indices name, base[r] for the others; no base: 0 instead.
void scatter_rows(const View& idx, const View& dy, const View* base, View dtable) {
  const char* op = base ? "gather_grad_add" : "gather_grad";
  check(dy.dtype == dtable.dtype, op, "dtype mismatch");
  const int64_t D = check_gather(op, idx, dtable.shape, dy);
  if (dy.dtype != DType::F32)
    fail(std::string("fy::cuda::") + op + ": unsupported dtype " + dtype_name(dy.dtype) +
         " (the CUDA kernels take F32)");
  if (base) {
    check(base->dtype == dtable.dtype && base->shape == dtable.shape, op, "base must have the result's type");
    check(base->data != dtable.data, op, "base and result must be different buffers");
    if (dtable.nbytes())
      FY_CUDA_CHECK(cudaMemcpyAsync(dtable.data, base->data, dtable.nbytes(), cudaMemcpyDeviceToDevice,
                                    current_stream()));
  } else if (dtable.nbytes()) {
    FY_CUDA_CHECK(cudaMemsetAsync(dtable.data, 0, dtable.nbytes(), current_stream()));
  }
  const int64_t n = idx.numel(), rows = dtable.shape[0];
  if (n == 0) return;
  const int64_t* pi = static_cast<const int64_t*>(idx.data);
  int* flag = detail::device_error_flag();
  if (D == 0 || rows == 0) {  // nothing to add, but bad indices still fail
    k_keys<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(pi, n, rows, nullptr, nullptr, flag);
    FY_CUDA_LAUNCHED("k_keys");
    return;
  }
  // Sort (index, position) pairs by index; only the bits up to `rows` (the
  // key of bad indices) matter.
  int end_bit = 0;
  while (end_bit < 64 && (uint64_t(rows) >> end_bit) != 0) ++end_bit;
  size_t sort_bytes = 0;
  FY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, sort_bytes, static_cast<const uint64_t*>(nullptr),
                                                static_cast<uint64_t*>(nullptr), static_cast<const int64_t*>(nullptr),
                                                static_cast<int64_t*>(nullptr), n, 0, end_bit, current_stream()));
  const size_t vec_bytes = round256(size_t(n) * 8);
  Scratch scratch(4 * vec_bytes + round256(sort_bytes));
  char* scratch_at = static_cast<char*>(scratch.p);
  uint64_t* keys_in = reinterpret_cast<uint64_t*>(scratch_at);
  uint64_t* keys_out = reinterpret_cast<uint64_t*>(scratch_at + vec_bytes);
  int64_t* pos_in = reinterpret_cast<int64_t*>(scratch_at + 2 * vec_bytes);
  int64_t* pos_out = reinterpret_cast<int64_t*>(scratch_at + 3 * vec_bytes);
  void* temp = scratch_at + 4 * vec_bytes;
  k_keys<<<grid_for(n, kThreads), kThreads, 0, current_stream()>>>(pi, n, rows, keys_in, pos_in, flag);
  FY_CUDA_LAUNCHED("k_keys");
  FY_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, sort_bytes, keys_in, keys_out, pos_in, pos_out, n, 0, end_bit,
                                                current_stream()));
  const float* pdy = static_cast<const float*>(dy.data);
  const float* pb = base ? static_cast<const float*>(base->data) : nullptr;
  float* pdt = static_cast<float*>(dtable.data);
  const bool vec = D % 4 == 0 && addr(pdy) % 16 == 0 && addr(pdt) % 16 == 0 && addr(pb) % 16 == 0;
  const int64_t dv = vec ? D / 4 : D;
  const int threads = dv >= kThreads ? kThreads : int((dv + 31) / 32 * 32);
  const unsigned grid = unsigned(n < (1 << 20) ? n : (1 << 20));
  if (vec) {
    k_gather_grad_runs<4><<<grid, threads, 0, current_stream()>>>(keys_out, pos_out, n, uint64_t(rows), pdy, pb, pdt, D);
  } else {
    k_gather_grad_runs<1><<<grid, threads, 0, current_stream()>>>(keys_out, pos_out, n, uint64_t(rows), pdy, pb, pdt, D);
  }
  FY_CUDA_LAUNCHED("k_gather_grad_runs");
}
}  // namespace

void gather_grad(View idx, View dy, View dtable) { scatter_rows(idx, dy, nullptr, dtable); }

void gather_grad_add(View base, View idx, View dy, View dtable) { scatter_rows(idx, dy, &base, dtable); }

namespace {
// A block per row: one coalesced row copy each, between the table's rows
// (`rows`) and the packed [n, D] rows; kToTable: packed into the table.
template <bool kToTable>
__global__ void k_copy_rows(const float* from, const int64_t* rows, int64_t n, int64_t D, float* to) {
  for (int64_t r = blockIdx.x; r < n; r += gridDim.x) {
    const float* src = from + (kToTable ? r : rows[r]) * D;
    float* dst = to + (kToTable ? rows[r] : r) * D;
    for (int64_t c = threadIdx.x; c < D; c += blockDim.x) dst[c] = src[c];
  }
}

template <bool kToTable>
void copy_rows(const char* op, View packed, View rows, View table, void* stream) {
  const std::string name = kToTable ? "values" : "out";
  check_dtype(packed, DType::F32, op, name.c_str());
  check_dtype(rows, DType::I64, op, "rows");
  check_dtype(table, DType::F32, op, "table");
  check(table.shape.rank == 2 && packed.shape.rank == 2 && rows.shape.rank == 1, op,
        "table and " + name + " must be 2-D, rows 1-D");
  check(packed.shape[0] == rows.shape[0] && packed.shape[1] == table.shape[1], op,
        name + " must be [rows, the table's row length]");
  const int64_t n = rows.shape[0];
  if (n == 0) return;
  const unsigned blocks = unsigned(n < (1 << 20) ? n : (1 << 20));
  k_copy_rows<kToTable><<<blocks, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      kToTable ? packed.as<float>() : table.as<float>(), rows.as<int64_t>(), n, table.shape[1],
      kToTable ? table.as<float>() : packed.as<float>());
  FY_CUDA_LAUNCHED(op);
}
}  // namespace

void scatter_rows(View values, View rows, View table, void* stream) {
  copy_rows<true>("scatter_rows", values, rows, table, stream);
}

void gather_rows(View table, View rows, View out, void* stream) {
  copy_rows<false>("gather_rows", out, rows, table, stream);
}

}  // namespace fy::cuda
