// fy-recompose's patterns for attention: fused attention from the scores'
// products, masked softmax and causal (or sliding-window) mask; the head
// swaps, repeated heads, query scale and packed qkv folded into it; and
// RoPE's rotation in one op. Recompose.cpp adds them by option.
#include "passes/RecomposeMatchers.h"

#include "mlir/IR/Matchers.h"
#include "llvm/ADT/DenseMap.h"

using namespace mlir;
using namespace fuyou::recompose;

namespace {

// The window of a constant attention mask (true where a score is dropped)
// that drops exactly the keys after each query row and, with a window w > 0,
// those at or before row - w: 0 for causal, w for a sliding window; nothing
// for any other mask (it may not be [.., T, T] with leading 1s either).
std::optional<int64_t> causalWindow(DenseElementsAttr d) {
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
  mutable llvm::DenseMap<Attribute, std::optional<int64_t>> windows;  // by mask: every layer's is one attribute
  LogicalResult matchAndRewrite(fg::MatMulOp pv, PatternRewriter &rw) const override {
    auto sm = def<fg::MaskedSoftmaxOp>(pv.getLhs());
    if (!sm || pv.getTransA() || pv.getTransB() || !sm->hasOneUse())
      return failure();
    auto qk = def<fg::MatMulOp>(sm.getInput());
    if (!qk || qk.getTransA() || !qk->hasOneUse())
      return failure();
    auto mc = def<fg::ConstantOp>(sm.getMask());
    auto md = mc ? dyn_cast<DenseElementsAttr>(mc.getValue()) : DenseElementsAttr();
    if (!md)
      return failure();
    const std::optional<int64_t> window =
        memoized(windows, Attribute(md), [&](Attribute) { return causalWindow(md); });
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


} // namespace

namespace fuyou::recompose {

void addAttentionPatterns(RewritePatternSet &patterns, int64_t maxHeadDim) {
  patterns.add<FormAttention>(patterns.getContext(), maxHeadDim);
  patterns.add<AbsorbRepeatedHeads, SinkHeadSwap, FoldAttentionTransposes, FoldQueryScale, FormPackedAttention>(
      patterns.getContext());
}

void addRopePatterns(RewritePatternSet &patterns, bool waitForSwaps) {
  patterns.add<FormRope>(patterns.getContext(), waitForSwaps);
}

} // namespace fuyou::recompose
