// fy-recompose: fused ops from the chains of elementwise ops that exporters
// write for GELU, SiLU, RMSNorm, LayerNorm and attention's masked softmax,
// and (by option) fused attention, in the layout the Linears write, and a
// loss that never forms its logits.
#include "passes/Passes.h"

#include "mlir/IR/Matchers.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace fuyou {
#define GEN_PASS_DEF_RECOMPOSE
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

// The value of a splat float constant, if `v` is one.
std::optional<float> splatValue(Value v) {
  auto c = v.getDefiningOp<fg::ConstantOp>();
  if (!c)
    return std::nullopt;
  auto d = dyn_cast<DenseElementsAttr>(c.getValue());
  if (!d || !d.isSplat() || !d.getElementType().isF32())
    return std::nullopt;
  return d.getSplatValue<float>();
}
bool isConst(Value v, float want, float tol = 1e-6f) {
  auto x = splatValue(v);
  return x && std::fabs(*x - want) <= tol * std::max(1.f, std::fabs(want));
}

// For a commutative binary op, the operand that is not `known` (or null).
template <typename OpT> Value other(OpT op, Value known) {
  if (op.getLhs() == known)
    return op.getRhs();
  if (op.getRhs() == known)
    return op.getLhs();
  return nullptr;
}

// Returns (a, b) of a commutative op so that pred(a) holds, if either does.
template <typename OpT, typename Pred>
std::optional<std::pair<Value, Value>> split(OpT op, Pred pred) {
  if (pred(op.getLhs()))
    return std::make_pair(op.getLhs(), op.getRhs());
  if (pred(op.getRhs()))
    return std::make_pair(op.getRhs(), op.getLhs());
  return std::nullopt;
}

template <typename OpT> OpT def(Value v) { return v ? v.getDefiningOp<OpT>() : OpT(); }

// x * sigmoid(x) -> silu(x)
struct FormSilu : OpRewritePattern<fg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::MulOp mul, PatternRewriter &rw) const override {
    auto s = split(mul, [&](Value v) {
      auto sg = def<fg::SigmoidOp>(v);
      return sg && other(mul, v) == sg.getInput();
    });
    if (!s || s->second.getType() != mul.getType())
      return failure();
    rw.replaceOpWithNewOp<fg::SiluOp>(mul, s->second);
    return success();
  }
};

// 0.5 * (x * (1 + t)) or (0.5 * x) * (1 + t), with t = erf(x / sqrt2) or
// tanh(sqrt(2/pi) * (x + 0.044715 x^3))
struct FormGelu : OpRewritePattern<fg::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  // x^3 written as pow(x, 3) or x * (x * x).
  static bool isCube(Value v, Value x) {
    if (auto p = def<fg::PowOp>(v))
      return p.getLhs() == x && isConst(p.getRhs(), 3.f);
    if (auto m = def<fg::MulOp>(v)) {
      Value sq = other(m, x);
      auto m2 = def<fg::MulOp>(sq);
      return m2 && m2.getLhs() == x && m2.getRhs() == x;
    }
    return false;
  }

  // Returns "none"/"tanh" when t is the GELU inner function of x.
  static std::optional<StringRef> inner(Value t, Value x) {
    if (auto e = def<fg::ErfOp>(t)) {
      Value arg = e.getInput();
      if (auto d = def<fg::DivOp>(arg); d && d.getLhs() == x && isConst(d.getRhs(), std::sqrt(2.f), 1e-5f))
        return StringRef("none");
      if (auto m = def<fg::MulOp>(arg); m && other(m, x) && isConst(other(m, x), 1.f / std::sqrt(2.f), 1e-5f))
        return StringRef("none");
      return std::nullopt;
    }
    auto th = def<fg::TanhOp>(t);
    auto scaled = th ? def<fg::MulOp>(th.getInput()) : fg::MulOp();
    if (!scaled)
      return std::nullopt;
    auto parts = split(scaled, [](Value v) { return isConst(v, std::sqrt(2.f / float(M_PI)), 1e-5f); });
    auto sum = parts ? def<fg::AddOp>(parts->second) : fg::AddOp();
    Value cubic = sum ? other(sum, x) : Value();
    auto cm = def<fg::MulOp>(cubic);
    if (!cm)
      return std::nullopt;
    auto c = split(cm, [](Value v) { return isConst(v, 0.044715f, 1e-5f); });
    if (!c || !isCube(c->second, x))
      return std::nullopt;
    return StringRef("tanh");
  }

  // The GELU of x, if onePlus is 1 + t for its inner function t.
  static std::optional<StringRef> ofOnePlus(Value onePlus, Value x) {
    auto add = def<fg::AddOp>(onePlus);
    auto t = add ? split(add, [](Value v) { return isConst(v, 1.f); }) : std::nullopt;
    return t ? inner(t->second, x) : std::nullopt;
  }

  LogicalResult matchAndRewrite(fg::MulOp root, PatternRewriter &rw) const override {
    auto form = [&](Value x, StringRef kind) {
      if (x.getType() != root.getType())
        return false;
      rw.replaceOpWithNewOp<fg::GeluOp>(root, x, kind);
      return true;
    };
    // (0.5 * x) * (1 + t), as Hugging Face's NewGELUActivation (GPT-2's
    // "gelu_new") writes it.
    for (auto [hx, onePlus] : {std::pair(root.getLhs(), root.getRhs()), std::pair(root.getRhs(), root.getLhs())}) {
      auto hm = def<fg::MulOp>(hx);
      auto h = hm ? split(hm, [](Value v) { return isConst(v, 0.5f); }) : std::nullopt;
      if (!h)
        continue;
      if (auto kind = ofOnePlus(onePlus, h->second); kind && form(h->second, *kind))
        return success();
    }
    // 0.5 * (x * (1 + t)).
    auto half = split(root, [](Value v) { return isConst(v, 0.5f); });
    auto xm = half ? def<fg::MulOp>(half->second) : fg::MulOp();
    if (!xm)
      return failure();
    // x * (1 + t): try both operands as x.
    for (auto [x, onePlus] : {std::pair(xm.getLhs(), xm.getRhs()), std::pair(xm.getRhs(), xm.getLhs())})
      if (auto kind = ofOnePlus(onePlus, x); kind && form(x, *kind))
        return success();
    return failure();
  }
};

// silu(g) * u, the silu read by the product alone -> swiglu(g, u): its
// backward computes the silu again instead of keeping it.
struct FormSwiGLU : OpRewritePattern<fg::MulOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::MulOp mul, PatternRewriter &rw) const override {
    auto parts = split(mul, [](Value v) { return def<fg::SiluOp>(v) && v.hasOneUse(); });
    if (!parts || parts->second.getType() != mul.getType() || parts->first.getType() != mul.getType())
      return failure();
    rw.replaceOpWithNewOp<fg::SwiGLUOp>(mul, def<fg::SiluOp>(parts->first).getInput(), parts->second);
    return success();
  }
};

// gelu(x + b), b a bias along x's last dim, only read by the gelu (perhaps
// through a reshape keeping that dim) -> bias_gelu(x, b): the sum is never
// written out.
struct FormBiasGelu : OpRewritePattern<fg::GeluOp> {
  using OpRewritePattern::OpRewritePattern;

  LogicalResult matchAndRewrite(fg::GeluOp gelu, PatternRewriter &rw) const override {
    // A reshape between them that keeps the last dim (Conv1D's [B*T, F] sum
    // back to [B, T, F]): the gelu is taken before it.
    auto reshape = def<fg::ReshapeOp>(gelu.getInput());
    auto gt = cast<RankedTensorType>(gelu.getType());
    if (reshape && (!reshape->hasOneUse() ||
                    cast<RankedTensorType>(reshape.getInput().getType()).getShape().back() != gt.getShape().back()))
      return failure();
    auto add = def<fg::AddOp>(reshape ? reshape.getInput() : gelu.getInput());
    if (!add || !add->hasOneUse())
      return failure();
    for (auto [x, b] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      auto xt = cast<RankedTensorType>(x.getType()), bt = cast<RankedTensorType>(b.getType());
      if (xt != add.getType() || xt.getRank() < 2 || bt.getRank() != 1 ||
          bt.getDimSize(0) != xt.getDimSize(xt.getRank() - 1))
        continue;
      if (!reshape) {
        rw.replaceOpWithNewOp<fg::BiasGeluOp>(gelu, xt, x, b, gelu.getApproximate());
        return success();
      }
      auto bg = rw.create<fg::BiasGeluOp>(gelu.getLoc(), xt, x, b, gelu.getApproximateAttr());
      rw.replaceOpWithNewOp<fg::ReshapeOp>(gelu, gt, bg.getResult());
      return success();
    }
    return failure();
  }
};

// (x * 1/sqrt(mean(x^2, -1) + eps)) * w -> rms_norm(x, w)
struct FormRMSNorm : OpRewritePattern<fg::MulOp> {
  using OpRewritePattern::OpRewritePattern;

  // If v is 1/sqrt(mean(x^2 over the last dim, keepdims) + eps), returns (x, eps).
  static std::optional<std::pair<Value, float>> invRms(Value v) {
    Value s;
    if (auto d = def<fg::DivOp>(v); d && isConst(d.getLhs(), 1.f))
      s = d.getRhs();
    else if (auto r = def<fg::ReciprocalOp>(v))
      s = r.getInput();
    auto sq = def<fg::SqrtOp>(s);
    auto add = sq ? def<fg::AddOp>(sq.getInput()) : fg::AddOp();
    if (!add)
      return std::nullopt;
    auto e = split(add, [](Value v) { return splatValue(v).has_value(); });
    auto mean = e ? def<fg::ReduceMeanOp>(e->second) : fg::ReduceMeanOp();
    if (!mean || !mean.getKeepdims() || mean.getAxes().size() != 1)
      return std::nullopt;
    auto pw = def<fg::PowOp>(mean.getInput());
    Value x;
    if (pw && isConst(pw.getRhs(), 2.f))
      x = pw.getLhs();
    else if (auto m = def<fg::MulOp>(mean.getInput()); m && m.getLhs() == m.getRhs())
      x = m.getLhs();
    if (!x)
      return std::nullopt;
    int64_t rank = cast<RankedTensorType>(x.getType()).getRank();
    int64_t axis = mean.getAxes()[0];
    if (axis != -1 && axis != rank - 1)
      return std::nullopt;
    return std::make_pair(x, *splatValue(e->first));
  }

  LogicalResult matchAndRewrite(fg::MulOp root, PatternRewriter &rw) const override {
    for (auto [normed, w] : {std::pair(root.getLhs(), root.getRhs()), std::pair(root.getRhs(), root.getLhs())}) {
      auto nm = def<fg::MulOp>(normed);
      if (!nm)
        continue;
      for (auto [x, ir] : {std::pair(nm.getLhs(), nm.getRhs()), std::pair(nm.getRhs(), nm.getLhs())}) {
        auto r = invRms(ir);
        auto xt = cast<RankedTensorType>(x.getType());
        auto wt = cast<RankedTensorType>(w.getType());
        if (!r || r->first != x || root.getType() != xt || wt.getRank() != 1 ||
            wt.getDimSize(0) != xt.getShape().back())
          continue;
        SmallVector<int64_t> stat(xt.getShape());
        stat.back() = 1;
        auto statT = RankedTensorType::get(stat, xt.getElementType());
        auto op = rw.create<fg::RMSNormOp>(root.getLoc(), TypeRange{xt, statT}, x, w,
                                           rw.getI64IntegerAttr(xt.getRank() - 1),
                                           rw.getF32FloatAttr(r->second));
        rw.replaceOp(root, op.getResult());
        return success();
      }
    }
    return failure();
  }
};

// ((x - mean(x)) / sqrt(mean((x - mean(x))^2) + eps)) * w + b -> layer_norm
struct FormLayerNorm : OpRewritePattern<fg::AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::AddOp root, PatternRewriter &rw) const override {
    for (auto [scaled, bias] : {std::pair(root.getLhs(), root.getRhs()), std::pair(root.getRhs(), root.getLhs())}) {
      auto sm = def<fg::MulOp>(scaled);
      if (!sm)
        continue;
      for (auto [normed, w] : {std::pair(sm.getLhs(), sm.getRhs()), std::pair(sm.getRhs(), sm.getLhs())}) {
        auto div = def<fg::DivOp>(normed);
        auto centred = div ? def<fg::SubOp>(div.getLhs()) : fg::SubOp();
        auto mean = centred ? def<fg::ReduceMeanOp>(centred.getRhs()) : fg::ReduceMeanOp();
        if (!mean || mean.getInput() != centred.getLhs())
          continue;
        Value x = centred.getLhs();
        auto sq = def<fg::SqrtOp>(div.getRhs());
        auto add = sq ? def<fg::AddOp>(sq.getInput()) : fg::AddOp();
        auto e = add ? split(add, [](Value v) { return splatValue(v).has_value(); }) : std::nullopt;
        auto var = e ? def<fg::ReduceMeanOp>(e->second) : fg::ReduceMeanOp();
        auto pw = var ? def<fg::PowOp>(var.getInput()) : fg::PowOp();
        if (!pw || pw.getLhs() != centred.getResult() || !isConst(pw.getRhs(), 2.f))
          continue;
        auto xt = cast<RankedTensorType>(x.getType());
        int64_t rank = xt.getRank();
        auto lastOnly = [&](fg::ReduceMeanOp m) {
          return m.getKeepdims() && m.getAxes().size() == 1 &&
                 (m.getAxes()[0] == -1 || m.getAxes()[0] == rank - 1);
        };
        int64_t d = xt.getShape().back();
        auto isVecD = [&](Value v) {
          ArrayRef<int64_t> s = cast<RankedTensorType>(v.getType()).getShape();
          return s.size() == 1 && s[0] == d;
        };
        if (!lastOnly(mean) || !lastOnly(var) || !isVecD(w) || !isVecD(bias) ||
            root.getType() != xt)
          continue;
        SmallVector<int64_t> stat(xt.getShape());
        stat.back() = 1;
        auto statT = RankedTensorType::get(stat, xt.getElementType());
        auto op = rw.create<fg::LayerNormOp>(root.getLoc(), TypeRange{xt, statT, statT}, x, w, bias,
                                             rw.getI64IntegerAttr(rank - 1),
                                             rw.getF32FloatAttr(*splatValue(e->first)));
        rw.replaceOp(root, op.getResult());
        return success();
      }
    }
    return failure();
  }
};

// matmul(x, transpose(w)) with the last two dims swapped -> matmul(x, w) {trans_b}:
// torch exports every Linear this way, and the copy costs more than the GEMM.
struct FoldTransposeIntoMatMul : OpRewritePattern<fg::MatMulOp> {
  using OpRewritePattern::OpRewritePattern;

  static bool swapsLastTwo(fg::TransposeOp t) {
    ArrayRef<int64_t> perm = t.getPerm();
    int64_t r = perm.size();
    if (r < 2 || perm[r - 1] != r - 2 || perm[r - 2] != r - 1)
      return false;
    for (int64_t i = 0; i < r - 2; ++i)
      if (perm[i] != i)
        return false;
    return true;
  }

  LogicalResult matchAndRewrite(fg::MatMulOp mm, PatternRewriter &rw) const override {
    auto tl = def<fg::TransposeOp>(mm.getLhs());
    auto tr = def<fg::TransposeOp>(mm.getRhs());
    bool foldL = tl && swapsLastTwo(tl), foldR = tr && swapsLastTwo(tr);
    if (!foldL && !foldR)
      return failure();
    Value lhs = foldL ? tl.getInput() : mm.getLhs();
    Value rhs = foldR ? tr.getInput() : mm.getRhs();
    rw.replaceOpWithNewOp<fg::MatMulOp>(mm, mm.getType(), lhs, rhs,
                                        mm.getTransA() != foldL, mm.getTransB() != foldR);
    return success();
  }
};

// softmax(where(mask, -inf, x * c)) over the last dim -> masked_softmax(x, mask) {scale = c}:
// attention's scores as torch exports masked_fill; the mul and where cost more
// than the softmax, and their gradients as much again.
struct FormMaskedSoftmax : OpRewritePattern<fg::SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::SoftmaxOp sm, PatternRewriter &rw) const override {
    auto t = cast<RankedTensorType>(sm.getType());
    // The I64Attr reads back as uint64_t; the axis is signed (-1 is the last).
    const int64_t axis = static_cast<int64_t>(sm.getAxis());
    const bool lastAxis = axis == -1 || axis == t.getRank() - 1;
    auto w = def<fg::WhereOp>(sm.getInput());
    auto ninf = w ? splatValue(w.getLhs()) : std::nullopt;
    if (!w || !ninf || !std::isinf(*ninf) || *ninf > 0 || w.getRhs().getType() != t || !lastAxis ||
        !fg::isRowMask(cast<RankedTensorType>(w.getCondition().getType()), t))
      return failure();
    Value x = w.getRhs();
    float scale = 1.f;
    if (auto m = def<fg::MulOp>(x)) {
      auto c = split(m, [](Value v) { return splatValue(v).has_value(); });
      if (c && c->second.getType() == t) {
        scale = *splatValue(c->first);
        x = c->second;
      }
    }
    rw.replaceOpWithNewOp<fg::MaskedSoftmaxOp>(sm, t, x, w.getCondition(), rw.getF32FloatAttr(scale));
    return success();
  }
};

// The additive mask of a constant (torch 2.x's SDPA decomposition: 0 where a
// score is kept, the float's lowest where it is dropped) as a bool mask, true
// where dropped: only when every entry is one or the other and every row
// keeps at least one score, so that no row is all dropped. A mask repeated
// along its leading dims (Hugging Face expands it over the batch) comes back
// as one [1.., R, D] block.
std::optional<DenseElementsAttr> additiveMaskAsBool(Value c) {
  auto op = c.getDefiningOp<fg::ConstantOp>();
  auto d = op ? dyn_cast<DenseElementsAttr>(op.getValue()) : DenseElementsAttr();
  auto type = d ? dyn_cast<RankedTensorType>(d.getType()) : RankedTensorType();
  if (!d || d.isSplat() || !type.getElementType().isF32() || type.getRank() < 2)
    return std::nullopt;
  ArrayRef<int64_t> shape = type.getShape();
  const int64_t cols = shape.back(), block = cols * shape[shape.size() - 2];
  if (block == 0)
    return std::nullopt;
  SmallVector<char> dropped;
  dropped.reserve(block);
  bool rowKeeps = false;
  int64_t k = 0;
  for (float v : d.getValues<float>()) {
    // exp(v + x - max) is exactly 0 for v this low and any finite score x
    // below 1e29, as for -inf.
    const bool drop = v <= -1e30f;
    if (!drop && v != 0.f)
      return std::nullopt;
    if (k < block) {
      dropped.push_back(drop);
      rowKeeps |= !drop;
      if ((k + 1) % cols == 0) {
        if (!rowKeeps)
          return std::nullopt;
        rowKeeps = false;
      }
    } else if (bool(dropped[k % block]) != drop) {
      return std::nullopt;  // the blocks differ: not one mask for every batch
    }
    ++k;
  }
  SmallVector<int64_t> maskShape(shape.size() - 2, 1);
  maskShape.append({shape[shape.size() - 2], cols});
  auto boolType = RankedTensorType::get(maskShape, IntegerType::get(c.getContext(), 1));
  return DenseElementsAttr::get(boolType, ArrayRef<bool>(reinterpret_cast<const bool *>(dropped.data()), dropped.size()));
}

// softmax(x + C) over the last dim, C a constant additive mask ->
// masked_softmax(x, C < 0): the same bits for finite scores (a dropped score
// gives exp(...) = 0 either way, a kept one x + 0 = x), with a bool mask of
// a quarter of the bytes and no add or its gradient.
struct FormMaskedSoftmaxFromAdditive : OpRewritePattern<fg::SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::SoftmaxOp sm, PatternRewriter &rw) const override {
    auto t = cast<RankedTensorType>(sm.getType());
    const int64_t axis = static_cast<int64_t>(sm.getAxis());
    auto add = def<fg::AddOp>(sm.getInput());
    if (!add || !(axis == -1 || axis == t.getRank() - 1))
      return failure();
    for (auto [x, c] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      auto mask = x.getType() == t ? additiveMaskAsBool(c) : std::nullopt;
      if (!mask || !fg::isRowMask(cast<RankedTensorType>(mask->getType()), t))
        continue;
      Value m = rw.create<fg::ConstantOp>(sm.getLoc(), *mask);
      rw.replaceOpWithNewOp<fg::MaskedSoftmaxOp>(sm, t, x, m, rw.getF32FloatAttr(1.f));
      return success();
    }
    return failure();
  }
};

// where(p == p, p, 0) of p = masked_softmax(x, constant mask in which every
// row keeps a score) -> p: the "safe softmax" torch's SDPA writes zeroes the
// NaN rows a fully dropped row would give; no row here is, so p has NaN only
// where the scores are not finite (training has diverged either way).
struct DropSafeSoftmaxGuard : OpRewritePattern<fg::WhereOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::WhereOp w, PatternRewriter &rw) const override {
    auto eq = def<fg::EqualOp>(w.getCondition());
    auto sm = eq ? def<fg::MaskedSoftmaxOp>(eq.getLhs()) : fg::MaskedSoftmaxOp();
    if (!sm || eq.getRhs() != eq.getLhs() || w.getLhs() != sm.getResult() || !isConst(w.getRhs(), 0.f, 0.f) ||
        w.getType() != sm.getType())
      return failure();
    auto mc = sm.getMask().getDefiningOp<fg::ConstantOp>();
    auto d = mc ? dyn_cast<DenseElementsAttr>(mc.getValue()) : DenseElementsAttr();
    if (!d)
      return failure();
    const int64_t cols = cast<RankedTensorType>(d.getType()).getShape().back();
    int64_t k = 0;
    bool rowKeeps = false;
    for (bool dropped : d.getValues<bool>()) {
      rowKeeps |= !dropped;
      if (++k % cols == 0) {
        if (!rowKeeps)
          return failure();
        rowKeeps = false;
      }
    }
    rw.replaceOp(w, sm.getResult());
    return success();
  }
};

// The window of a constant attention mask (true where a score is dropped)
// that drops exactly the keys after each query row and, with a window w > 0,
// those at or before row - w: 0 for causal, w for a sliding window; nothing
// for any other mask (it may not be [.., T, T] with leading 1s either).
std::optional<int64_t> causalWindow(Value mask) {
  auto c = def<fg::ConstantOp>(mask);
  auto d = c ? dyn_cast<DenseElementsAttr>(c.getValue()) : DenseElementsAttr();
  auto t = d ? dyn_cast<RankedTensorType>(d.getType()) : RankedTensorType();
  if (!t || !t.getElementType().isInteger(1) || t.getRank() < 2)
    return std::nullopt;
  const int64_t T = t.getDimSize(t.getRank() - 1);
  if (t.getDimSize(t.getRank() - 2) != T || t.getNumElements() != T * T)
    return std::nullopt;
  SmallVector<bool> m(d.getValues<bool>());
  int64_t seen = 0;  // the last row's keys kept: its window (T: causal)
  for (int64_t j = 0; j < T; ++j)
    seen += !m[size_t((T - 1) * T + j)];
  const int64_t window = seen == T ? 0 : seen;
  if (window == 0 && seen != T)
    return std::nullopt;
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < T; ++j)
      if (m[size_t(i * T + j)] != (j > i || (window > 0 && j <= i - window)))
        return std::nullopt;
  return window;
}

// The value before a multiplication by a splat constant (perhaps reshaped),
// and the constant.
std::pair<Value, float> unscaled(Value v) {
  auto splat = [](Value x) {
    if (auto r = def<fg::ReshapeOp>(x))
      x = r.getInput();
    return splatValue(x);
  };
  if (auto mul = def<fg::MulOp>(v))
    if (auto s = split(mul, [&](Value x) { return splat(x).has_value(); }); s && s->second.hasOneUse())
      if (cast<RankedTensorType>(s->second.getType()) == cast<RankedTensorType>(v.getType()))
        return {s->second, *splat(s->first)};
  return {v, 1.f};
}

// k, when k^T [B, H, D, T] is written as torch exports a batched product's
// operand: reshape(transpose(reshape(k, [B*H, T, D]), (0, 2, 1)), [B, H, D, T])
// of k [B, H, T, D]; else null.
Value transposedThroughBatch(Value kT) {
  auto outer = def<fg::ReshapeOp>(kT);
  auto t = outer ? def<fg::TransposeOp>(outer.getInput()) : fg::TransposeOp();
  auto inner = t ? def<fg::ReshapeOp>(t.getInput()) : fg::ReshapeOp();
  if (!inner || t.getPerm() != ArrayRef<int64_t>{0, 2, 1})
    return {};
  auto k = cast<RankedTensorType>(inner.getInput().getType());
  auto flat = cast<RankedTensorType>(inner.getType()), kt = cast<RankedTensorType>(kT.getType());
  if (k.getRank() != 4 || flat.getRank() != 3 || kt.getRank() != 4)
    return {};
  const int64_t B = k.getDimSize(0), H = k.getDimSize(1), T = k.getDimSize(2), D = k.getDimSize(3);
  if (flat.getShape() != ArrayRef<int64_t>{B * H, T, D} || kt.getShape() != ArrayRef<int64_t>{B, H, D, T})
    return {};
  return inner.getInput();
}

// matmul(masked_softmax(matmul(q, k^T) {scale}, causal mask), v) ->
// attention(q, k, v): no T x T scores or probabilities are ever written, in
// either pass. q, k, v [B, H, T, D] (k as the product reads it: transposed,
// through torch's batch reshapes or not, or with trans_b); a splat factor on q or k (torch's sqrt of the scale on
// each) joins the scale. Only for a constant mask of causal or sliding-window
// shape, which the kernel's mask then is.
struct FormAttention : OpRewritePattern<fg::MatMulOp> {
  FormAttention(MLIRContext *ctx, int64_t maxHeadDim) : OpRewritePattern(ctx), maxHeadDim(maxHeadDim) {}
  int64_t maxHeadDim;
  LogicalResult matchAndRewrite(fg::MatMulOp pv, PatternRewriter &rw) const override {
    auto sm = def<fg::MaskedSoftmaxOp>(pv.getLhs());
    if (!sm || pv.getTransA() || pv.getTransB() || !sm->hasOneUse())
      return failure();
    auto qk = def<fg::MatMulOp>(sm.getInput());
    if (!qk || qk.getTransA() || !qk->hasOneUse())
      return failure();
    std::optional<int64_t> window = causalWindow(sm.getMask());
    if (!window)
      return failure();
    auto [q, cq] = unscaled(qk.getLhs());
    auto [kx, ck] = unscaled(qk.getRhs());
    auto qt = cast<RankedTensorType>(q.getType()), vt = cast<RankedTensorType>(pv.getRhs().getType());
    if (qt.getRank() != 4 || vt.getRank() != 4 || vt.getShape() != qt.getShape() ||
        (maxHeadDim > 0 && qt.getDimSize(3) > maxHeadDim))
      return failure();
    // k [B, H, T, D]: as the product reads it with trans_b, else k^T [B, H, D, T]
    // transposed back (checked before anything is built).
    auto kt = cast<RankedTensorType>(kx.getType());
    if (kt.getRank() != 4)
      return failure();
    auto kType = qk.getTransB() ? kt
                                : RankedTensorType::get({kt.getDimSize(0), kt.getDimSize(1), kt.getDimSize(3),
                                                         kt.getDimSize(2)},
                                                        kt.getElementType());
    if (kType.getShape() != qt.getShape())
      return failure();
    Value k = qk.getTransB() ? kx : transposedThroughBatch(kx);
    if (!k)
      k = rw.create<fg::TransposeOp>(qk.getLoc(), kType, kx, rw.getDenseI64ArrayAttr({0, 1, 3, 2})).getResult();
    auto lse = RankedTensorType::get(qt.getShape().drop_back(), qt.getElementType());
    const float scale = sm.getScale().convertToFloat() * cq * ck;
    auto a = rw.create<fg::AttentionOp>(pv.getLoc(), TypeRange{pv.getType(), lse}, q, k, pv.getRhs(),
                                        rw.getF32FloatAttr(scale), rw.getI64IntegerAttr(*window));
    rw.replaceOp(pv, a.getResult());
    return success();
  }
};

// Whether t swaps heads and tokens ([B, T, heads, D] <-> [B, heads, T, D]),
// how a Linear's output is split into heads.
bool swapsHeads(fg::TransposeOp t) { return t && t.getPerm() == ArrayRef<int64_t>{0, 2, 1, 3}; }

// attention(transpose(q), transpose(k), transpose(v)) whose result is only
// transposed back, each transpose swapping heads and tokens ([B, T, heads,
// D] <-> [B, heads, T, D], how a Linear's output is split into heads):
// attention {seq_major} of q, k and v as they are. No copies of them, nor
// of the result, in either pass.
struct FoldAttentionTransposes : OpRewritePattern<fg::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  static Value swapped(Value v) {
    auto t = def<fg::TransposeOp>(v);
    return swapsHeads(t) ? t.getInput() : Value();
  }
  LogicalResult matchAndRewrite(fg::AttentionOp a, PatternRewriter &rw) const override {
    if (a.getSeqMajor() || !a.getResult().hasOneUse())
      return failure();
    auto back = dyn_cast<fg::TransposeOp>(*a.getResult().getUsers().begin());
    Value q = swapped(a.getQ()), k = swapped(a.getK()), v = swapped(a.getV());
    if (!swapsHeads(back) || !q || !k || !v)
      return failure();
    auto s = rw.create<fg::AttentionOp>(a.getLoc(), TypeRange{back.getType(), a.getLse().getType()}, q, k, v,
                                        a.getScaleAttr(), a.getWindowAttr(), rw.getUnitAttr());
    rw.replaceOp(back, s.getResult());
    rw.replaceAllUsesWith(a.getLse(), s.getLse());
    rw.eraseOp(a);
    return success();
  }
};

// x [B, Hkv, T, D] repeated for grouped-query heads as Hugging Face's
// repeat_kv writes it, reshape(expand(reshape(x) [B, Hkv, 1, T, D]) [B, Hkv,
// n, T, D]) [B, Hkv * n, T, D]; else null.
Value repeatedHeads(Value v) {
  auto outer = def<fg::ReshapeOp>(v);
  auto e = outer ? def<fg::ExpandOp>(outer.getInput()) : fg::ExpandOp();
  auto inner = e ? def<fg::ReshapeOp>(e.getInput()) : fg::ReshapeOp();
  if (!inner)
    return nullptr;
  auto x = cast<RankedTensorType>(inner.getInput().getType());
  auto one = cast<RankedTensorType>(inner.getType()), rep = cast<RankedTensorType>(e.getType());
  auto out = cast<RankedTensorType>(v.getType());
  if (x.getRank() != 4 || one.getRank() != 5 || rep.getRank() != 5 || out.getRank() != 4)
    return nullptr;
  const int64_t B = x.getDimSize(0), H = x.getDimSize(1), T = x.getDimSize(2), D = x.getDimSize(3);
  const int64_t n = rep.getDimSize(2);
  if (one.getShape() != ArrayRef<int64_t>{B, H, 1, T, D} || rep.getShape() != ArrayRef<int64_t>{B, H, n, T, D} ||
      out.getShape() != ArrayRef<int64_t>{B, H * n, T, D})
    return nullptr;
  return inner.getInput();
}

// attention(q, repeat_kv(k), repeat_kv(v)) -> attention(q, k, v): the kernel
// reads query head h's keys and values from head h / n, so the repeated
// copies are never made, kept for backward, or summed back in it.
struct AbsorbRepeatedHeads : OpRewritePattern<fg::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::AttentionOp a, PatternRewriter &rw) const override {
    Value k = repeatedHeads(a.getK()), v = repeatedHeads(a.getV());
    if (a.getSeqMajor() || !k || !v || k.getType() != v.getType())
      return failure();
    rw.modifyOpInPlace(a, [&] {
      a.getKMutable().assign(k);
      a.getVMutable().assign(v);
    });
    return success();
  }
};

// attention(q c, k, v, scale s), c a splat constant and the product read by
// the attention alone -> attention(q, k, v, scale s c): the factor torch
// 2.x's exporter leaves on q (it scales q and k by the scale's square root
// each; k's folds as the scores form) costs no pass over q, and q stays the
// slice FormPackedAttention looks for.
struct FoldQueryScale : OpRewritePattern<fg::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::AttentionOp a, PatternRewriter &rw) const override {
    auto [q, c] = unscaled(a.getQ());
    if (q == a.getQ() || !a.getQ().hasOneUse())
      return failure();
    const double scale = a.getScaleAttr().getValueAsDouble() * double(c);
    rw.modifyOpInPlace(a, [&] {
      a.getQMutable().assign(q);
      a.setScaleAttr(rw.getF32FloatAttr(float(scale)));
    });
    return success();
  }
};

// attention {seq_major} of q, k and v cut in that order from one x [B, T,
// (H + 2 Hkv) D] along its last dim (a fused qkv Linear's output, GPT-2's
// c_attn), each slice reshaped into heads and read by the attention alone ->
// attention_qkv(x as [B, T, H + 2 Hkv, D]): no slice is copied out, and the
// gradient comes back as one tensor, not a concat of three.
struct FormPackedAttention : OpRewritePattern<fg::AttentionOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::AttentionOp a, PatternRewriter &rw) const override {
    if (!a.getSeqMajor())
      return failure();
    Value x;
    int64_t at = 0;  // where the next slice must start
    for (Value part : {a.getQ(), a.getK(), a.getV()}) {
      auto r = def<fg::ReshapeOp>(part);
      auto s = r ? def<fg::SliceOp>(r.getInput()) : fg::SliceOp();
      if (!s || !r->hasOneUse() || !s->hasOneUse() || (x && s.getInput() != x))
        return failure();
      x = s.getInput();
      auto in = cast<RankedTensorType>(x.getType()), out = cast<RankedTensorType>(s.getType());
      if (in.getRank() != 3)
        return failure();
      ArrayRef<int64_t> starts = s.getStarts(), steps = s.getSteps();
      for (int64_t d = 0; d < 3; ++d)
        if (steps[d] != 1 || starts[d] != (d == 2 ? at : 0) || (d < 2 && out.getDimSize(d) != in.getDimSize(d)))
          return failure();
      at += out.getDimSize(2);
    }
    auto in = cast<RankedTensorType>(x.getType());
    auto q = cast<RankedTensorType>(a.getQ().getType()), k = cast<RankedTensorType>(a.getK().getType());
    const int64_t H = q.getDimSize(2), Hkv = k.getDimSize(2), D = q.getDimSize(3);
    // (The reshapes into heads keep the tokens: [B, T, C] -> [B, T, heads, D].)
    if (at != in.getDimSize(2) || at != (H + 2 * Hkv) * D || q.getDimSize(0) != in.getDimSize(0) ||
        q.getDimSize(1) != in.getDimSize(1) || k.getDimSize(0) != in.getDimSize(0) ||
        k.getDimSize(1) != in.getDimSize(1))
      return failure();
    auto packed = RankedTensorType::get({in.getDimSize(0), in.getDimSize(1), H + 2 * Hkv, D}, in.getElementType());
    Value qkv = rw.create<fg::ReshapeOp>(a.getLoc(), packed, x);
    rw.replaceOpWithNewOp<fg::AttentionQKVOp>(a, TypeRange{a.getResult().getType(), a.getLse().getType()}, qkv,
                                              rw.getI64IntegerAttr(Hkv), a.getScaleAttr(), a.getWindowAttr());
    return success();
  }
};

// A swap of heads and tokens whose every reader is an op it can move below.
bool sinkableSwap(Value v) {
  auto t = def<fg::TransposeOp>(v);
  return swapsHeads(t) && llvm::all_of(t->getUsers(), [](Operation *u) {
           return isa<fg::NegOp, fg::SliceOp, fg::ConcatOp, fg::MulOp, fg::AddOp, fg::SubOp>(u);
         });
}

// Whether v is computed by the ops a swap moves below from a swap that has
// not moved yet: it will be a swap itself, so an op reading it waits.
bool pendingSwap(Value v, int depth = 8) {
  Operation *d = v.getDefiningOp();
  if (!d || depth == 0 || !isa<fg::NegOp, fg::SliceOp, fg::ConcatOp, fg::MulOp, fg::AddOp, fg::SubOp>(d))
    return false;
  return llvm::any_of(d->getOperands(), [&](Value x) { return sinkableSwap(x) || pendingSwap(x, depth - 1); });
}

// The shape an operand broadcast against a head-major value has against the
// token-major one: left-padded to rank 4, heads and tokens swapped, where
// one of them is 1 (so the same bytes, reshaped); else none.
std::optional<SmallVector<int64_t>> swappedBroadcast(Value v) {
  auto t = cast<RankedTensorType>(v.getType());
  if (t.getRank() > 4)
    return std::nullopt;
  SmallVector<int64_t> s(4 - t.getRank(), 1);
  llvm::append_range(s, t.getShape());
  if (s[1] != 1 && s[2] != 1)
    return std::nullopt;
  std::swap(s[1], s[2]);
  return s;
}

// op(swap(x), ...) -> swap(op(x, ...)) for the ops of RoPE (neg, slices and
// a concat along the head dim, products with cos and sin broadcast over
// heads, sums): the swap Llama's q and k take before their rotation moves
// below it, where attention folds it (FoldAttentionTransposes). Only for
// swaps whose readers all move it, so none stays behind.
struct SinkHeadSwap : RewritePattern {
  SinkHeadSwap(MLIRContext *ctx) : RewritePattern(MatchAnyOpTypeTag(), /*benefit=*/1, ctx) {}
  LogicalResult matchAndRewrite(Operation *op, PatternRewriter &rw) const override {
    if (!isa<fg::NegOp, fg::SliceOp, fg::ConcatOp, fg::MulOp, fg::AddOp, fg::SubOp>(op))
      return failure();
    auto type = cast<RankedTensorType>(op->getResult(0).getType());
    const bool elementwise = isa<fg::MulOp, fg::AddOp, fg::SubOp>(op);
    bool any = false;
    for (Value v : op->getOperands()) {
      const bool swap = sinkableSwap(v);
      any |= swap;
      if (type.getRank() != 4 || (!swap && (!elementwise || pendingSwap(v) || !swappedBroadcast(v))))
        return failure();
    }
    if (!any)
      return failure();
    SmallVector<Value> operands;
    for (Value v : op->getOperands()) {
      if (sinkableSwap(v)) {
        operands.push_back(def<fg::TransposeOp>(v).getInput());
        continue;
      }
      auto s = *swappedBroadcast(v);
      auto t = RankedTensorType::get(s, cast<RankedTensorType>(v.getType()).getElementType());
      operands.push_back(rw.create<fg::ReshapeOp>(op->getLoc(), t, v));
    }
    SmallVector<NamedAttribute> attrs(op->getAttrs());
    for (NamedAttribute &a : attrs) {
      if (auto arr = dyn_cast<DenseI64ArrayAttr>(a.getValue()); arr && arr.size() == 4)  // slice's starts, steps
        a.setValue(rw.getDenseI64ArrayAttr({arr[0], arr[2], arr[1], arr[3]}));
      if (auto axis = dyn_cast<IntegerAttr>(a.getValue()); axis && isa<fg::ConcatOp>(op)) {
        int64_t x = axis.getInt() < 0 ? axis.getInt() + 4 : axis.getInt();
        a.setValue(rw.getI64IntegerAttr(x == 1 ? 2 : x == 2 ? 1 : x));
      }
    }
    auto swapped = RankedTensorType::get({type.getDimSize(0), type.getDimSize(2), type.getDimSize(1), type.getDimSize(3)},
                                         type.getElementType());
    Operation *moved = rw.create(op->getLoc(), op->getName().getIdentifier(), operands, {swapped}, attrs);
    rw.replaceOpWithNewOp<fg::TransposeOp>(op, type, moved->getResult(0), rw.getDenseI64ArrayAttr({0, 2, 1, 3}));
    return success();
  }
};

// Which half of x's last dim slice s takes whole (0 the first, 1 the
// second), keeping every other dim whole; -1 for any other slice.
int halfOf(fg::SliceOp s, Value x) {
  if (!s || s.getInput() != x)
    return -1;
  auto in = cast<RankedTensorType>(x.getType()), out = cast<RankedTensorType>(s.getType());
  const int64_t r = in.getRank(), D = in.getDimSize(r - 1);
  ArrayRef<int64_t> starts = s.getStarts(), steps = s.getSteps();
  for (int64_t d = 0; d < r; ++d)
    if (steps[d] != 1 || (d < r - 1 && (starts[d] != 0 || out.getDimSize(d) != in.getDimSize(d))))
      return -1;
  if (2 * out.getDimSize(r - 1) != D)
    return -1;
  return starts[r - 1] == 0 ? 0 : starts[r - 1] == D / 2 ? 1 : -1;
}

// The dim of x that a table broadcast against it indexes: the table's last
// dim is x's, and of its others (right-aligned with x's) exactly one is not
// 1 and equals x's there. -1: not such a table.
int64_t tableAxis(Value table, RankedTensorType x) {
  auto t = cast<RankedTensorType>(table.getType());
  const int64_t r = x.getRank(), tr = t.getRank();
  if (tr < 2 || tr > r || t.getDimSize(tr - 1) != x.getDimSize(r - 1))
    return -1;
  int64_t axis = -1;
  for (int64_t d = 0; d < tr - 1; ++d) {
    if (t.getDimSize(d) == 1)
      continue;
    if (axis >= 0 || t.getDimSize(d) != x.getDimSize(d + r - tr))
      return -1;
    axis = d + r - tr;
  }
  return axis;
}

// Whether v is computed from a trainable parameter (so would need a gradient).
bool fromTrainable(Value v, int depth = 16) {
  Operation *d = v.getDefiningOp();
  if (!d)
    return false;
  if (auto gp = dyn_cast<fg::GetParamOp>(d)) {
    auto p = SymbolTable::lookupNearestSymbolFrom<fg::ParamOp>(d, gp.getNameAttr());
    return !p || p.getTrainable();
  }
  if (depth == 0)
    return true;  // (too deep to tell: assume so)
  return llvm::any_of(d->getOperands(), [&](Value x) { return fromTrainable(x, depth - 1); });
}

// x * cos + concat(-x[..., D/2:], x[..., :D/2]) * sin -> rope(x, cos, sin):
// one pass over x instead of seven ops' (Llama's and Hugging Face's RoPE),
// cos and sin [.., T, .., D] tables reshaped to [T, D]. Not while a swap of
// heads above x is still to move below the rotation (`waitForSwaps`, with
// attention: the swap must reach attention first), nor for tables that
// would need a gradient.
struct FormRope : OpRewritePattern<fg::AddOp> {
  FormRope(MLIRContext *ctx, bool waitForSwaps) : OpRewritePattern(ctx), waitForSwaps(waitForSwaps) {}
  bool waitForSwaps;

  LogicalResult matchAndRewrite(fg::AddOp add, PatternRewriter &rw) const override {
    auto type = cast<RankedTensorType>(add.getType());
    if (type.getRank() < 2)
      return failure();
    for (auto [a, b] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      auto byCos = def<fg::MulOp>(a), bySin = def<fg::MulOp>(b);
      if (!byCos || !bySin)
        continue;
      auto parts = split(bySin, [](Value v) { return bool(def<fg::ConcatOp>(v)); });
      if (!parts)
        continue;
      auto cat = def<fg::ConcatOp>(parts->first);
      Value sin = parts->second;
      const int64_t axis = int64_t(cat.getAxis());
      if (cat.getInputs().size() != 2 || (axis != type.getRank() - 1 && axis != -1))
        continue;
      auto neg = def<fg::NegOp>(cat.getInputs()[0]);
      auto hi = neg ? def<fg::SliceOp>(neg.getInput()) : fg::SliceOp();
      if (!hi)
        continue;
      Value x = hi.getInput();
      Value cos = other(byCos, x);
      if (!cos || x.getType() != type || halfOf(hi, x) != 1 || halfOf(def<fg::SliceOp>(cat.getInputs()[1]), x) != 0)
        continue;
      const int64_t seq = tableAxis(cos, type);
      if (seq < 0 || cos.getType() != sin.getType() || tableAxis(sin, type) != seq)
        continue;
      if ((waitForSwaps && (sinkableSwap(x) || pendingSwap(x))) || fromTrainable(cos) || fromTrainable(sin))
        return failure();
      auto table = RankedTensorType::get({type.getDimSize(seq), type.getDimSize(type.getRank() - 1)},
                                         cast<RankedTensorType>(cos.getType()).getElementType());
      auto flat = [&](Value t) { return t.getType() == table ? t : rw.create<fg::ReshapeOp>(add.getLoc(), table, t); };
      rw.replaceOpWithNewOp<fg::RopeOp>(add, type, x, flat(cos), flat(sin), rw.getI64IntegerAttr(seq), UnitAttr());
      return success();
    }
    return failure();
  }
};

// softmax_cross_entropy_loss(reshape?(matmul(x, w {trans_b})), labels) ->
// linear_cross_entropy(x, w, labels): the [N, V] logits are never formed
// whole, nor their log-probabilities kept for backward. Only where the
// logits feed the loss alone, nothing reads the log-probabilities, and w is
// a Linear's [V, D] weight as its product reads it (trans_b).
struct FormLinearCrossEntropy : OpRewritePattern<fg::SoftmaxCrossEntropyLossOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(fg::SoftmaxCrossEntropyLossOp sce, PatternRewriter &rw) const override {
    if (!sce.getLogProb().use_empty() || cast<RankedTensorType>(sce.getScores().getType()).getRank() != 2)
      return failure();
    Value logits = sce.getScores();
    auto reshape = def<fg::ReshapeOp>(logits);
    if (reshape) {
      if (!reshape->hasOneUse())
        return failure();
      logits = reshape.getInput();
    }
    auto mm = def<fg::MatMulOp>(logits);
    if (!mm || mm.getTransA() || !mm.getTransB() || !mm->hasOneUse() ||
        cast<RankedTensorType>(mm.getRhs().getType()).getRank() != 2)
      return failure();
    Value x = mm.getLhs(), w = mm.getRhs();
    auto l = rw.create<fg::LinearCrossEntropyOp>(
        sce.getLoc(), TypeRange{sce.getLoss().getType(), x.getType(), w.getType()}, x, w, sce.getLabels(),
        sce.getReductionAttr(), sce.getIgnoreIndexAttr());
    rw.replaceAllUsesWith(sce.getLoss(), l.getLoss());
    rw.eraseOp(sce);
    if (reshape)
      rw.eraseOp(reshape);
    rw.eraseOp(mm);
    return success();
  }
};

struct Recompose : fuyou::impl::RecomposeBase<Recompose> {
  using RecomposeBase::RecomposeBase;
  void runOnOperation() override {
    RewritePatternSet patterns(&getContext());
    patterns.add<FormSilu, FormGelu, FormBiasGelu, FormRMSNorm, FormLayerNorm, FormMaskedSoftmax,
                 FormMaskedSoftmaxFromAdditive, DropSafeSoftmaxGuard, FoldTransposeIntoMatMul>(&getContext());
    if (attention)
      patterns.add<FormAttention>(&getContext(), attentionMaxHeadDim);
    if (attention)
      patterns.add<AbsorbRepeatedHeads, SinkHeadSwap, FoldAttentionTransposes, FoldQueryScale, FormPackedAttention>(
          &getContext());
    if (crossEntropy)
      patterns.add<FormLinearCrossEntropy>(&getContext());
    if (swiglu)
      patterns.add<FormSwiGLU>(&getContext());
    if (rope)
      patterns.add<FormRope>(&getContext(), /*waitForSwaps=*/attention);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
