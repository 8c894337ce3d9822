// Fused causal attention on the CPU, forward and backward, without a T x T
// tensor: a block of kBlock query rows at a time against the keys it may see,
// its scores in a buffer of kBlock x T per thread; the forward keeps each
// row's log-sum-exp, from which the backward recomputes the probabilities
// (FlashAttention's scheme, with the softmax taken over a whole row of the
// block at once rather than online, since the row fits).
//
// Deterministic whatever the thread count: a forward block is one thread's
// work, and a key/value head's gradient is summed by one thread over its
// query heads and blocks in order; BLAS calls have shapes set by the block.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/detail.h"
#include "kernels/cpu/kernels.h"

namespace fy::cpu {
using namespace detail;

namespace {

constexpr int64_t kBlock = 64;  // query rows a block

// Sizes, and where a head's rows are: [B, heads, T, D] (a head's T rows
// contiguous) or, seq_major, [B, T, heads, D] (its rows heads x D apart).
// Packed (Hrow > 0): q, k and v (and dq, dk, dv) are the heads of one
// [B, T, Hrow, D] tensor, Hrow = H + 2 Hkv, each from its own first head.
struct Dims {
  int64_t B, H, Hkv, T, D;
  bool seq_major;
  int64_t Hrow = 0;
  // The products' operands rounded as matmul rounds them (at a 16-bit
  // matmul_operands()): each thread rounds the rows of q, k, v and dout it
  // multiplies, and the probabilities and dS before their products.
  bool round = false;
  // Row 0 of head h (of `heads`) of batch b, and the distance between rows.
  int64_t head(int64_t b, int64_t h, int64_t heads) const {
    return seq_major ? (b * T * heads + h) * D : (b * heads + h) * T * D;
  }
  int64_t ld(int64_t heads) const { return seq_major ? heads * D : D; }
  // The same in q's (dq's) tensor and in k's and v's (dk's, dv's).
  int64_t qhead(int64_t b, int64_t h) const { return Hrow ? head(b, h, Hrow) : head(b, h, H); }
  int64_t khead(int64_t b, int64_t h) const { return Hrow ? head(b, h, Hrow) : head(b, h, Hkv); }
  int64_t ldq() const { return Hrow ? ld(Hrow) : ld(H); }
  int64_t ldk() const { return Hrow ? ld(Hrow) : ld(Hkv); }
};

Dims check_dims(const char* op, const View& q, const View& k, const View& v, const View& out, const View& lse,
                bool seq_major) {
  check(q.dtype == DType::F32 && k.dtype == DType::F32 && v.dtype == DType::F32 && out.dtype == DType::F32 &&
            lse.dtype == DType::F32,
        op, "wants F32 tensors");
  check(q.shape.rank == 4 && k.shape.rank == 4 && v.shape.rank == 4, op,
        seq_major ? "q, k, v must be [B, T, H, D]" : "q, k, v must be [B, H, T, D]");
  const int h = seq_major ? 2 : 1, t = seq_major ? 1 : 2;
  Dims d{q.shape[0], q.shape[h], k.shape[h], q.shape[t], q.shape[3], seq_major};
  check(k.shape == v.shape && k.shape[0] == d.B && k.shape[t] == d.T && k.shape[3] == d.D, op,
        "k and v must have q's B, T and D, with Hkv heads");
  check(d.Hkv > 0 && d.H % d.Hkv == 0, op, "q's heads must be a multiple of k's (grouped-query heads)");
  check(out.shape == q.shape, op, "out must have q's shape");
  check(lse.shape.rank == 3 && lse.shape[0] == d.B && lse.shape[1] == d.H && lse.shape[2] == d.T, op,
        "lse must be [B, H, T]");
  return d;
}

// The keys query row i sees: [first_key(i), i].
inline int64_t first_key(int64_t i, int64_t window) { return window > 0 ? std::max<int64_t>(0, i - window + 1) : 0; }

// Scores of rows [i0, i1) against keys [j0, i1) of one head (q at row i0,
// k at row j0, rows ldq and ldk apart), scaled, with the keys a row may not
// see at -inf: S is (i1 - i0) x (i1 - j0).
void scores(const float* q, int64_t ldq, const float* k, int64_t ldk, int64_t i0, int64_t i1, int64_t j0, int64_t D,
            float scale, int64_t window, float* S) {
  const int64_t rows = i1 - i0, keys = i1 - j0;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(D), scale, q, int(ldq), k, int(ldk),
              0.0f, S, int(keys));
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = i0 + r, lo = first_key(i, window);
    float* s = S + r * keys;
    for (int64_t j = j0; j < lo; ++j) s[j - j0] = -std::numeric_limits<float>::infinity();
    for (int64_t j = i + 1; j < i1; ++j) s[j - j0] = -std::numeric_limits<float>::infinity();
  }
}


// Rows [r0, r1) of a head (rows ld apart) as the products take them: the
// head itself, or with d.round their copy in `buf`, rounded as matmul
// rounds its operands, rows D apart (*ld set to match). Rounding is
// elementwise, so a thread's copy of the rows it multiplies gives the bits
// a copy of the whole tensor would, without a tensor's worth of memory.
const float* rows_as_operand(const Dims& d, const float* head, int64_t r0, int64_t r1, int64_t* ld,
                             std::vector<float>& buf) {
  if (!d.round) return head + r0 * *ld;
  buf.resize(size_t((r1 - r0) * d.D));
  round_operand_rows(head + r0 * *ld, *ld, buf.data(), r1 - r0, d.D);
  *ld = d.D;
  return buf.data();
}

// The forward over q, k, v, out and lse laid out as d says.
void forward(const Dims& d, const float* q, const float* k, const float* v, float* out, float* lse, double scale,
             int64_t window) {
  check(window >= 0, "attention", "the window must be 0 (causal) or positive");
  blas_on_one_thread();
  const int64_t blocks = (d.T + kBlock - 1) / kBlock, group = d.H / d.Hkv;
  const float sc = float(scale);
#pragma omp parallel
  {
    std::vector<float> S, rq;  // made by a thread that takes work
    // Rounded, this thread's copy of one key/value head's first rows: the
    // next block of the head (or of another query head of its group) that
    // the thread takes rounds only the rows it adds.
    struct {
      int64_t head = -1, rows = 0;
      std::vector<float> k, v;
    } kv;
#pragma omp for schedule(dynamic) collapse(2)
    for (int64_t bh = 0; bh < d.B * d.H; ++bh)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t b = bh / d.H, h = bh % d.H, kvh = h / group;
        int64_t lq = d.ldq(), lk = d.ldk(), lv = d.ldk();
        const int64_t lo = d.ld(d.H);
        float* oh = out + d.head(b, h, d.H);
        float* lh = lse + bh * d.T;
        const int64_t i0 = blk * kBlock, i1 = std::min(d.T, i0 + kBlock), j0 = first_key(i0, window);
        const int64_t keys = i1 - j0;
        // This block's query rows and the rows of the keys and values it sees.
        const float* qb = rows_as_operand(d, q + d.qhead(b, h), i0, i1, &lq, rq);
        const float* kb = k + d.khead(b, kvh) + j0 * lk;
        const float* vb = v + d.khead(b, kvh) + j0 * lv;
        if (d.round) {
          if (kv.head != b * d.Hkv + kvh) {
            kv.head = b * d.Hkv + kvh;
            kv.rows = 0;
            kv.k.resize(size_t(d.T * d.D));
            kv.v.resize(size_t(d.T * d.D));
          }
          if (kv.rows < i1) {
            const int64_t at = d.khead(b, kvh) + kv.rows * lk;
            round_operand_rows(k + at, lk, kv.k.data() + kv.rows * d.D, i1 - kv.rows, d.D);
            round_operand_rows(v + at, lv, kv.v.data() + kv.rows * d.D, i1 - kv.rows, d.D);
            kv.rows = i1;
          }
          kb = kv.k.data() + j0 * d.D;
          vb = kv.v.data() + j0 * d.D;
          lk = lv = d.D;
        }
        S.resize(size_t(kBlock * d.T));
        scores(qb, lq, kb, lk, i0, i1, j0, d.D, sc, window, S.data());
        for (int64_t r = 0; r < i1 - i0; ++r) {
          // (A row always sees its own key: m is finite.)
          float* s = S.data() + r * keys;
          float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
          for (int64_t c = 0; c < keys; ++c) m = s[c] > m ? s[c] : m;
          lh[i0 + r] = m + float(std::log(softmax_from_max(s, s, keys, m)));
        }
        if (d.round) round_operands(S.data(), S.data(), (i1 - i0) * keys, false);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(i1 - i0), int(d.D), int(keys), 1.0f, S.data(),
                    int(keys), vb, int(lv), 0.0f, oh + i0 * lo, int(lo));
      }
  }
}

// The backward, laid out as d says (dq, dk, dv as q, k, v; dout as out).
void backward(const Dims& d, const float* q, const float* k, const float* v, const float* out, const float* lse,
              const float* dout, float* dq, float* dk, float* dv, double scale, int64_t window) {
  check(window >= 0, "attention_grad", "the window must be 0 (causal) or positive");
  blas_on_one_thread();
  const int64_t blocks = (d.T + kBlock - 1) / kBlock, group = d.H / d.Hkv;
  const float sc = float(scale);
#pragma omp parallel
  {
    std::vector<float> P, Pr, dS, delta, rq, rk, rv, rdo;  // made by a thread that takes work
    // A key/value head's gradients are this thread's alone: summed over its
    // query heads and their blocks, in order.
#pragma omp for schedule(dynamic)
    for (int64_t bkv = 0; bkv < d.B * d.Hkv; ++bkv) {
      const int64_t b = bkv / d.Hkv, kvh = bkv % d.Hkv;
      P.resize(size_t(kBlock * d.T));
      dS.resize(size_t(kBlock * d.T));
      delta.resize(size_t(kBlock));
      const int64_t lq = d.ldq(), lk = d.ldk(), lo = d.ld(d.H), kvoff = d.khead(b, kvh);
      // The head's keys and values as the products take them (kl, vl apart).
      int64_t kl = lk, vl = lk;
      const float* kh = rows_as_operand(d, k + kvoff, 0, d.T, &kl, rk);
      const float* vh = rows_as_operand(d, v + kvoff, 0, d.T, &vl, rv);
      float* dkh = dk + kvoff;
      float* dvh = dv + kvoff;
      for (int64_t j = 0; j < d.T; ++j) {
        std::fill(dkh + j * lk, dkh + j * lk + d.D, 0.0f);
        std::fill(dvh + j * lk, dvh + j * lk + d.D, 0.0f);
      }
      for (int64_t h = kvh * group; h < (kvh + 1) * group; ++h) {
        const int64_t bh = b * d.H + h, qoff = d.qhead(b, h), ooff = d.head(b, h, d.H);
        int64_t ql = lq, dol = lo;
        const float* qh = rows_as_operand(d, q + qoff, 0, d.T, &ql, rq);
        const float* oh = out + ooff;
        const float* doh = dout + ooff;
        const float* dor = rows_as_operand(d, dout + ooff, 0, d.T, &dol, rdo);
        const float* lh = lse + bh * d.T;
        float* dqh = dq + qoff;
        for (int64_t blk = 0; blk < blocks; ++blk) {
          const int64_t i0 = blk * kBlock, i1 = std::min(d.T, i0 + kBlock), j0 = first_key(i0, window);
          const int64_t rows = i1 - i0, keys = i1 - j0;
          // P again from the scores and each row's log-sum-exp.
          scores(qh + i0 * ql, ql, kh + j0 * kl, kl, i0, i1, j0, d.D, sc, window, P.data());
          for (int64_t r = 0; r < rows; ++r) {
            float* p = P.data() + r * keys;
            const float l = lh[i0 + r];
#pragma omp simd
            for (int64_t c = 0; c < keys; ++c) p[c] = exp_nonpos(p[c] - l);
            // delta = rowsum(dO * O) = rowsum(P * dP) (rounded: the latter, below).
            if (d.round) continue;
            double dsum = 0;
            for (int64_t x = 0; x < d.D; ++x) dsum += double(doh[(i0 + r) * lo + x]) * oh[(i0 + r) * lo + x];
            delta[size_t(r)] = float(dsum);
          }
          // dV += P^T dO
          const float* pv = P.data();
          if (d.round) {
            Pr.resize(P.size());
            round_operands(P.data(), Pr.data(), rows * keys, false);
            pv = Pr.data();
          }
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(keys), int(d.D), int(rows), 1.0f, pv, int(keys),
                      dor + i0 * dol, int(dol), 1.0f, dvh + j0 * lk, int(lk));
          // dP = dO V^T, then dS = P (dP - delta)
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(d.D), 1.0f,
                      dor + i0 * dol, int(dol), vh + j0 * vl, int(vl), 0.0f, dS.data(), int(keys));
          for (int64_t r = 0; r < rows; ++r) {
            // Rounded, dO O is not rowsum(P dP) (O came from the rounded P):
            // the unfused softmax's gradient takes the latter, and where dP
            // and delta nearly cancel the difference is all dS has.
            if (d.round) {
              double dsum = 0;
              for (int64_t c = 0; c < keys; ++c) dsum += double(P[size_t(r * keys + c)]) * dS[size_t(r * keys + c)];
              delta[size_t(r)] = float(dsum);
            }
            for (int64_t c = 0; c < keys; ++c) {
              float& s = dS[size_t(r * keys + c)];
              s = P[size_t(r * keys + c)] * (s - delta[size_t(r)]);
            }
          }
          // Rounded, dS takes the scale first, as the unfused graph's
          // products take the scores' gradient (round(x s) is not round(x) s).
          float alpha = sc;
          if (d.round) {
            for (int64_t e = 0; e < rows * keys; ++e) dS[size_t(e)] *= sc;
            round_operands(dS.data(), dS.data(), rows * keys, false);
            alpha = 1.0f;
          }
          // dQ = scale dS K (this block's rows, whole); dK += scale dS^T Q
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(d.D), int(keys), alpha, dS.data(),
                      int(keys), kh + j0 * kl, int(kl), 0.0f, dqh + i0 * lq, int(lq));
          cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, int(keys), int(d.D), int(rows), alpha, dS.data(),
                      int(keys), qh + i0 * ql, int(ql), 1.0f, dkh + j0 * lk, int(lk));
        }
      }
    }
  }
}

// q, k and v packed in one [B, T, H + 2 Hkv, D] tensor (a fused qkv
// Linear's output): the same kernels reading them where they are.
Dims packed_dims(const char* op, const View& qkv, const View& out, const View& lse, int64_t kv_heads,
                 int64_t window, PackedQKV& p) {
  check(qkv.dtype == DType::F32 && out.dtype == DType::F32 && lse.dtype == DType::F32, op, "wants F32 tensors");
  p = packed_qkv(op, qkv, out, lse, kv_heads, window);
  return Dims{p.B, p.H, p.Hkv, p.T, p.D, true, p.Hrow};
}

// Whether the products round their operands (a 16-bit matmul_operands()).
Dims& rounding(Dims& d) {
  d.round = matmul_operands() != MatmulOperands::FP32;
  return d;
}

}  // namespace

void attention(View q, View k, View v, View out, View lse, double scale, int64_t window, bool seq_major) {
  Dims d = check_dims("attention", q, k, v, out, lse, seq_major);
  forward(rounding(d), q.as<float>(), k.as<float>(), v.as<float>(), out.as<float>(), lse.as<float>(), scale, window);
}

void attention_grad(View q, View k, View v, View out, View lse, View dout, View dq, View dk, View dv, double scale,
                    int64_t window, bool seq_major) {
  Dims d = check_dims("attention_grad", q, k, v, out, lse, seq_major);
  check(dout.shape == q.shape && dq.shape == q.shape && dk.shape == k.shape && dv.shape == v.shape,
        "attention_grad", "dout and dq must have q's shape, dk and dv k's");
  backward(rounding(d), q.as<float>(), k.as<float>(), v.as<float>(), out.as<float>(), lse.as<float>(),
           dout.as<float>(), dq.as<float>(), dk.as<float>(), dv.as<float>(), scale, window);
}

void attention_qkv(View qkv, View out, View lse, int64_t kv_heads, double scale, int64_t window) {
  PackedQKV p;
  Dims d = packed_dims("attention_qkv", qkv, out, lse, kv_heads, window, p);
  const float* q = qkv.as<float>();
  forward(rounding(d), q, q + p.k0(), q + p.v0(), out.as<float>(), lse.as<float>(), scale, window);
}

void attention_qkv_grad(View qkv, View out, View lse, View dout, View dqkv, int64_t kv_heads, double scale,
                        int64_t window) {
  PackedQKV p;
  Dims d = packed_dims("attention_qkv_grad", qkv, out, lse, kv_heads, window, p);
  check(dout.shape == out.shape && dqkv.shape == qkv.shape && dout.dtype == DType::F32 && dqkv.dtype == DType::F32,
        "attention_qkv_grad", "dout must be F32 of out's shape, dqkv of qkv's");
  const float* q = qkv.as<float>();
  float* dq = dqkv.as<float>();
  backward(rounding(d), q, q + p.k0(), q + p.v0(), out.as<float>(), lse.as<float>(), dout.as<float>(), dq, dq + p.k0(),
           dq + p.v0(), scale, window);
}

}  // namespace fy::cpu
