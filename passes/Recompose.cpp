// fy-recompose: fused ops from the chains of elementwise ops that exporters
// write for GELU, SiLU, RMSNorm, LayerNorm and attention's masked softmax,
// and (by option) fused attention, in the layout the Linears write, and a
// loss that never forms its logits.
#include "passes/Passes.h"
#include "passes/RecomposeMatchers.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include <cmath>

namespace fuyou {
#define GEN_PASS_DEF_RECOMPOSE
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

using namespace fuyou::recompose;

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
std::optional<DenseElementsAttr> additiveMaskAsBool(DenseElementsAttr d) {
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
  auto boolType = RankedTensorType::get(maskShape, IntegerType::get(d.getContext(), 1));
  return DenseElementsAttr::get(boolType, ArrayRef<bool>(reinterpret_cast<const bool *>(dropped.data()), dropped.size()));
}

// softmax(x + C) over the last dim, C a constant additive mask ->
// masked_softmax(x, C < 0): the same bits for finite scores (a dropped score
// gives exp(...) = 0 either way, a kept one x + 0 = x), with a bool mask of
// a quarter of the bytes and no add or its gradient.
struct FormMaskedSoftmaxFromAdditive : OpRewritePattern<fg::SoftmaxOp> {
  using OpRewritePattern::OpRewritePattern;
  // Every layer's mask is one uniqued attribute: read once (a 175B graph's
  // 96 masks of 2048 x 2048 took most of its import read one by one).
  mutable llvm::DenseMap<Attribute, std::optional<DenseElementsAttr>> asBool;
  LogicalResult matchAndRewrite(fg::SoftmaxOp sm, PatternRewriter &rw) const override {
    auto t = cast<RankedTensorType>(sm.getType());
    const int64_t axis = static_cast<int64_t>(sm.getAxis());
    auto add = def<fg::AddOp>(sm.getInput());
    if (!add || !(axis == -1 || axis == t.getRank() - 1))
      return failure();
    for (auto [x, c] : {std::pair(add.getLhs(), add.getRhs()), std::pair(add.getRhs(), add.getLhs())}) {
      auto cst = def<fg::ConstantOp>(c);
      auto d = cst ? dyn_cast<DenseElementsAttr>(cst.getValue()) : DenseElementsAttr();
      if (!d || x.getType() != t)
        continue;
      const std::optional<DenseElementsAttr> mask = memoized(asBool, Attribute(d), [&](Attribute) {
        return additiveMaskAsBool(d);
      });
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
  mutable llvm::DenseMap<Attribute, bool> everyRowKeeps;  // by mask, read once
  static bool keepsEveryRow(DenseElementsAttr d) {
    const int64_t cols = cast<RankedTensorType>(d.getType()).getShape().back();
    int64_t k = 0;
    bool rowKeeps = false;
    for (bool dropped : d.getValues<bool>()) {
      rowKeeps |= !dropped;
      if (++k % cols == 0) {
        if (!rowKeeps)
          return false;
        rowKeeps = false;
      }
    }
    return true;
  }
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
    if (!memoized(everyRowKeeps, Attribute(d), [&](Attribute) { return keepsEveryRow(d); }))
      return failure();
    rw.replaceOp(w, sm.getResult());
    return success();
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
      addAttentionPatterns(patterns, attentionMaxHeadDim);
    if (crossEntropy)
      patterns.add<FormLinearCrossEntropy>(&getContext());
    if (swiglu)
      patterns.add<FormSwiGLU>(&getContext());
    if (rope)
      addRopePatterns(patterns, /*waitForSwaps=*/attention);
    if (failed(applyPatternsAndFoldGreedily(getOperation(), std::move(patterns))))
      signalPassFailure();
  }
};

} // namespace
