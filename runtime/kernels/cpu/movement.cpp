// Data movement kernels: transpose, slice, concat, gather (+ gradients).
#include <cstring>
#include <utility>
#include <vector>

#include "kernels/cpu/detail.h"
#include "kernels/cpu/kernels.h"

namespace fy::cpu {
using namespace detail;

namespace {

// dst[off0 + i*s0] = src[off1 + i*s1] over the iteration space.
void strided_copy(const Strided& it, DType dt, void* dst, const void* src) {
  dispatch_bits(dt, [&](auto tag) {
    using T = typename decltype(tag)::type;
    T* pd = static_cast<T*>(dst);
    const T* ps = static_cast<const T*>(src);
    const int R = it.rank - 1;
    const int64_t s0 = it.stride[0][R], s1 = it.stride[1][R];
    for_rows(it, [&](const int64_t* off, int64_t n) {
      if (s0 == 1 && s1 == 1) {
        std::memcpy(pd + off[0], ps + off[1], size_t(n) * sizeof(T));
      } else {
        for (int64_t i = 0; i < n; ++i) pd[off[0] + i * s0] = ps[off[1] + i * s1];
      }
    });
  });
}

}  // namespace

// Iteration over the slice: operand 0 walks the contiguous slice (y), operand
// 1 the strided positions in the full tensor (x).
Strided detail::slice_iter(const Shape& full, const Shape& part, const int64_t* starts, size_t nstarts, const int64_t* steps,
                   size_t nsteps, const char* op) {
  const int R = full.rank;
  check(part.rank == R, op, "slice rank " + std::to_string(part.rank) + " differs from input rank " + std::to_string(R));
  check(int(nstarts) == R && int(nsteps) == R, op, "need one start and one step per axis");
  Strided it;
  it.rank = R;
  it.nops = 2;
  int64_t fs[Shape::kMaxRank];
  contiguous_strides(full, fs);
  contiguous_strides(part, it.stride[0]);
  for (int i = 0; i < R; ++i) {
    int64_t s = starts[i] < 0 ? starts[i] + full.d[i] : starts[i];
    const int64_t step = steps[i], n = part.d[i];
    check(step > 0, op, "step must be positive on axis " + std::to_string(i));
    check(n == 0 || (s >= 0 && s + (n - 1) * step < full.d[i]), op,
          "slice of " + std::to_string(n) + " from " + std::to_string(starts[i]) + " step " + std::to_string(step) +
              " exceeds axis " + std::to_string(i) + " of " + full.str());
    it.dims[i] = n;
    it.stride[1][i] = fs[i] * step;
    it.base[1] += (n ? s : 0) * fs[i];
  }
  it.coalesce();
  return it;
}


Strided detail::transpose_iter(const View& x, const View& y, const int64_t* perm) {
  check(x.dtype == y.dtype, "transpose", "dtype mismatch");
  const int R = x.shape.rank;
  check(y.shape.rank == R, "transpose", "rank mismatch");
  Strided it;
  it.rank = R;
  it.nops = 2;
  int64_t xs[Shape::kMaxRank];
  contiguous_strides(x.shape, xs);
  contiguous_strides(y.shape, it.stride[0]);
  bool seen[Shape::kMaxRank] = {};
  for (int i = 0; i < R; ++i) {
    const int64_t p = perm[i] < 0 ? perm[i] + R : perm[i];
    check(p >= 0 && p < R && !seen[p], "transpose", "perm is not a permutation of " + std::to_string(R) + " axes");
    seen[p] = true;
    check(y.shape[i] == x.shape[int(p)], "transpose",
          "y shape " + y.shape.str() + " does not match permuted " + x.shape.str());
    it.dims[i] = y.shape[i];
    it.stride[1][i] = xs[p];
  }
  it.coalesce();
  return it;
}

void transpose(View x, View y, const int64_t* perm) {
  Strided it = transpose_iter(x, y, perm);
  if (x.numel() == 0) return;
  strided_copy(it, x.dtype, y.data, x.data);
}
void transpose(View x, View y, const std::vector<int64_t>& perm) {
  check(int(perm.size()) == x.shape.rank, "transpose", "perm length differs from rank");
  transpose(x, y, perm.data());
}
void transpose(View x, View y, std::initializer_list<int64_t> perm) {
  transpose(x, y, std::vector<int64_t>(perm));
}

void slice(View x, View y, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps) {
  check(x.dtype == y.dtype, "slice", "dtype mismatch");
  Strided it = slice_iter(x.shape, y.shape, starts.data(), starts.size(), steps.data(), steps.size(), "slice");
  if (y.numel() == 0) return;
  strided_copy(it, x.dtype, y.data, x.data);
}
void slice(View x, View y, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps) {
  slice(x, y, std::vector<int64_t>(starts), std::vector<int64_t>(steps));
}

void slice_grad(View dy, View dx, const std::vector<int64_t>& starts, const std::vector<int64_t>& steps) {
  check(dx.dtype == dy.dtype, "slice_grad", "dtype mismatch");
  Strided it = slice_iter(dx.shape, dy.shape, starts.data(), starts.size(), steps.data(), steps.size(), "slice_grad");
  fill(dx, 0.0);
  if (dy.numel() == 0) return;
  // Same walk as slice with the copy direction reversed: swap operands.
  for (int i = 0; i < it.rank; ++i) std::swap(it.stride[0][i], it.stride[1][i]);
  std::swap(it.base[0], it.base[1]);
  strided_copy(it, dx.dtype, dx.data, dy.data);
}
void slice_grad(View dy, View dx, std::initializer_list<int64_t> starts, std::initializer_list<int64_t> steps) {
  slice_grad(dy, dx, std::vector<int64_t>(starts), std::vector<int64_t>(steps));
}

int detail::concat_axis(const std::vector<View>& ins, const View& out, int64_t axis) {
  const int R = out.shape.rank;
  const int a = int(norm_axis(axis, R, "concat"));
  check(!ins.empty(), "concat", "no inputs");
  int64_t total = 0;
  for (const View& v : ins) {
    check(v.dtype == out.dtype, "concat", "dtype mismatch");
    check(v.shape.rank == R, "concat", "rank mismatch: " + v.shape.str() + " vs " + out.shape.str());
    for (int i = 0; i < R; ++i)
      check(i == a || v.shape[i] == out.shape[i], "concat",
            "input " + v.shape.str() + " does not match output " + out.shape.str() + " off axis " + std::to_string(a));
    total += v.shape[a];
  }
  check(total == out.shape[a], "concat", "inputs sum to " + std::to_string(total) + " on axis " + std::to_string(a) +
                                             ", output has " + std::to_string(out.shape[a]));
  return a;
}

void concat(const std::vector<View>& ins, View out, int64_t axis) {
  const int R = out.shape.rank;
  const int a = concat_axis(ins, out, axis);
  const int64_t outer = prod(out.shape, 0, a);
  const size_t inner = size_t(prod(out.shape, a + 1, R)) * dtype_size(out.dtype);
  const size_t out_row = size_t(out.shape[a]) * inner;
  char* po = static_cast<char*>(out.data);
#pragma omp parallel for schedule(static) if (outer > 1 && out.numel() >= kParallelMin)
  for (int64_t o = 0; o < outer; ++o) {
    size_t pos = 0;
    for (const View& v : ins) {
      const size_t n = size_t(v.shape[a]) * inner;
      if (n) std::memcpy(po + size_t(o) * out_row + pos, static_cast<const char*>(v.data) + size_t(o) * n, n);
      pos += n;
    }
  }
}
void concat(std::initializer_list<View> ins, View out, int64_t axis) {
  concat(std::vector<View>(ins), out, axis);
}

namespace {
// Validates indices serially (exceptions cannot leave an OpenMP region) and
// returns the row length of the table.
int64_t check_gather(const char* op, const View& idx, const Shape& table, const View& rowsv) {
  check_dtype(idx, DType::I64, op, "indices");
  check(table.rank >= 1, op, "table must have rank >= 1");
  Shape expect = idx.shape;
  check(expect.rank + table.rank - 1 <= Shape::kMaxRank, op, "rank too large");
  for (int i = 1; i < table.rank; ++i) expect.d[expect.rank++] = table.d[i];
  check_shape(rowsv, expect, op, "rows tensor");
  const int64_t* pi = idx.as<int64_t>();
  const int64_t rows = table.d[0];
  for (int64_t i = 0, n = idx.numel(); i < n; ++i)
    if (pi[i] < 0 || pi[i] >= rows)
      fail(std::string("fy::cpu::") + op + ": index " + std::to_string(pi[i]) + " at position " + std::to_string(i) +
           " is out of range for table of " + std::to_string(rows) + " rows");
  return prod(table, 1, table.rank);
}
}  // namespace

void gather(View table, View idx, View out) {
  check(table.dtype == out.dtype, "gather", "dtype mismatch");
  const int64_t D = check_gather("gather", idx, table.shape, out);
  const size_t row = size_t(D) * dtype_size(table.dtype);
  const int64_t* pi = idx.as<int64_t>();
  const char* pt = static_cast<const char*>(table.data);
  char* po = static_cast<char*>(out.data);
  const int64_t n = idx.numel();
#pragma omp parallel for schedule(static) if (n * D >= kParallelMin)
  for (int64_t i = 0; i < n; ++i) std::memcpy(po + size_t(i) * row, pt + size_t(pi[i]) * row, row);
}

namespace {
// dtable[r] = base[r] + (the sum of r's dy rows in index order) for each row
// r the indices name, base[r] (bit for bit) for the others; no base: 0.
void scatter_rows(const View& idx, const View& dy, const View* base, View dtable) {
  const char* op = base ? "gather_grad_add" : "gather_grad";
  check(dy.dtype == dtable.dtype, op, "dtype mismatch");
  const int64_t D = check_gather(op, idx, dtable.shape, dy);
  if (base) {
    check(base->dtype == dtable.dtype, op, "dtype mismatch");
    check_shape(*base, dtable.shape, op, "base");
    check(base->data != dtable.data, op, "base and result must be different buffers");
    std::memcpy(dtable.data, base->data, dtable.nbytes());
  } else {
    fill(dtable, 0.0);
  }
  const int64_t* pi = idx.as<int64_t>();
  const int64_t n = idx.numel();
  // The rows named, each once, in first-named order: summed from zero, then base added.
  std::vector<int64_t> named;
  if (base) {
    std::vector<uint8_t> seen(size_t(dtable.shape[0]), 0);
    for (int64_t i = 0; i < n; ++i)
      if (!seen[size_t(pi[i])]) {
        seen[size_t(pi[i])] = 1;
        named.push_back(pi[i]);
      }
  }
  dispatch_float(dy.dtype, op, [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pdy = dy.as<T>();
    const T* pb = base ? base->as<T>() : nullptr;
    T* pdt = dtable.as<T>();
    // Threads own disjoint column blocks and each visits indices in order, so
    // repeated indices are accumulated in the same order for any thread count.
    constexpr int64_t kBlock = 64;
    const int64_t nblocks = (D + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (nblocks > 1 && n * D >= kParallelMin)
    for (int64_t blk = 0; blk < nblocks; ++blk) {
      const int64_t c0 = blk * kBlock, c1 = c0 + kBlock < D ? c0 + kBlock : D;
      for (int64_t r : named)
        for (int64_t c = c0; c < c1; ++c) pdt[r * D + c] = T(0);
      for (int64_t i = 0; i < n; ++i) {
        T* dst = pdt + pi[i] * D;
        const T* src = pdy + i * D;
        for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
      }
      for (int64_t r : named)
        for (int64_t c = c0; c < c1; ++c) pdt[r * D + c] = pb[r * D + c] + pdt[r * D + c];
    }
  });
}
}  // namespace

void gather_grad(View idx, View dy, View dtable) { scatter_rows(idx, dy, nullptr, dtable); }

void gather_grad_add(View base, View idx, View dy, View dtable) { scatter_rows(idx, dy, &base, dtable); }

}  // namespace fy::cpu
