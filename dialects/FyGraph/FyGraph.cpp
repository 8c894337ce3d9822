#include "dialects/FyGraph/FyGraphOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/OpImplementation.h"
#include "mlir/IR/PatternMatch.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringSwitch.h"

using namespace mlir;
using namespace fuyou::fygraph;

#include "dialects/FyGraph/FyGraphDialect.cpp.inc"

void FyGraphDialect::initialize() {
  addOperations<
#define GET_OP_LIST
#include "dialects/FyGraph/FyGraphOps.cpp.inc"
      >();
}

static ArrayRef<int64_t> shapeOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getShape();
}
static Type elemOf(Value v) {
  return cast<RankedTensorType>(v.getType()).getElementType();
}
static int64_t rankOf(Value v) { return shapeOf(v).size(); }

// Normalises a possibly negative axis; fails when out of [0, rank).
static FailureOr<int64_t> normAxis(Operation *op, int64_t axis, int64_t rank) {
  int64_t a = axis < 0 ? axis + rank : axis;
  if (a < 0 || a >= rank)
    return op->emitOpError("axis ") << axis << " out of range for rank " << rank;
  return a;
}

// True when `small`, right-aligned, broadcasts to `big`.
static bool broadcastsTo(ArrayRef<int64_t> small, ArrayRef<int64_t> big) {
  if (small.size() > big.size())
    return false;
  size_t off = big.size() - small.size();
  for (size_t i = 0; i < small.size(); ++i)
    if (small[i] != 1 && small[i] != big[off + i])
      return false;
  return true;
}

//===----------------------------------------------------------------------===//
// Parameters and constants
//===----------------------------------------------------------------------===//

LogicalResult ParamOp::verify() {
  auto t = dyn_cast<RankedTensorType>(getType());
  if (!t || !t.hasStaticShape())
    return emitOpError("type must be a statically shaped tensor, got ") << getType();
  return success();
}

LogicalResult GetParamOp::verifySymbolUses(SymbolTableCollection &tables) {
  auto param = tables.lookupNearestSymbolFrom<ParamOp>(*this, getNameAttr());
  if (!param)
    return emitOpError("'") << getName() << "' does not name a fygraph.param";
  if (param.getType() != getType())
    return emitOpError("type ") << getType() << " differs from the parameter's "
                                << param.getType();
  return success();
}

LogicalResult AdamWOp::verifySymbolUses(SymbolTableCollection &tables) {
  auto param = tables.lookupNearestSymbolFrom<ParamOp>(*this, getParamAttr());
  if (!param)
    return emitOpError("'") << getParam() << "' does not name a fygraph.param";
  if (!param.getTrainable())
    return emitOpError("parameter '") << getParam() << "' is not trainable";
  if (param.getType() != getGrad().getType())
    return emitOpError("gradient type ") << getGrad().getType()
                                         << " differs from the parameter's " << param.getType();
  return success();
}

OpFoldResult ConstantOp::fold(FoldAdaptor) { return getValue(); }

//===----------------------------------------------------------------------===//
// Elementwise
//===----------------------------------------------------------------------===//

static LogicalResult verifyBinary(Operation *op, bool isCompare) {
  Value l = op->getOperand(0), r = op->getOperand(1), res = op->getResult(0);
  if (elemOf(l) != elemOf(r))
    return op->emitOpError("operand element types differ: ") << elemOf(l) << " vs " << elemOf(r);
  Type want = isCompare ? IntegerType::get(op->getContext(), 1) : elemOf(l);
  if (elemOf(res) != want)
    return op->emitOpError("result element type must be ") << want;
  SmallVector<int64_t> shape;
  if (!OpTrait::util::getBroadcastedShape(shapeOf(l), shapeOf(r), shape) ||
      ArrayRef<int64_t>(shape) != shapeOf(res))
    return op->emitOpError("result shape is not the broadcast of the operand shapes");
  return success();
}

LogicalResult AddOp::verify() { return verifyBinary(*this, false); }
LogicalResult SubOp::verify() { return verifyBinary(*this, false); }
LogicalResult MulOp::verify() { return verifyBinary(*this, false); }
LogicalResult DivOp::verify() { return verifyBinary(*this, false); }
LogicalResult PowOp::verify() { return verifyBinary(*this, false); }
LogicalResult EqualOp::verify() { return verifyBinary(*this, true); }

bool fuyou::fygraph::isRowMask(RankedTensorType m, RankedTensorType x) {
  int64_t r = x.getRank(), mr = m.getRank();
  if (r < 1 || mr < 1 || mr > r || m.getShape().back() != x.getShape().back())
    return false;
  for (int64_t i = 0; i + 2 < mr; ++i)
    if (m.getDimSize(i) != 1)
      return false;
  return mr < 2 || m.getDimSize(mr - 2) == 1 || (r >= 2 && m.getDimSize(mr - 2) == x.getDimSize(r - 2));
}

LogicalResult MaskedSoftmaxOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType());
  auto m = cast<RankedTensorType>(getMask().getType());
  if (getResult().getType() != x)
    return emitOpError("result type must be the input's");
  if (!isRowMask(m, x))
    return emitOpError("mask must be [1.., R, D] with D the input's last dim and R 1 or the dim before it, got ")
           << m << " for " << x;
  return success();
}

// Attention's operands (and its gradient's): q, its result [B, H, T, D],
// k and v [B, Hkv, T, D] with Hkv dividing H, lse [B, H, T].
static LogicalResult verifyAttention(Operation *op, Value qv, Value kv, Value vv, Value result, Value lsev,
                                     int64_t window, bool seqMajor) {
  auto q = cast<RankedTensorType>(qv.getType()), k = cast<RankedTensorType>(kv.getType());
  const char *layout = seqMajor ? "q must be [B, T, H, D], k and v [B, T, Hkv, D]"
                                : "q must be [B, H, T, D], k and v [B, Hkv, T, D]";
  if (q.getRank() != 4 || k.getRank() != 4 || vv.getType() != k)
    return op->emitOpError(layout);
  const int h = seqMajor ? 2 : 1, t = seqMajor ? 1 : 2;
  if (k.getDimSize(0) != q.getDimSize(0) || k.getDimSize(t) != q.getDimSize(t) || k.getDimSize(3) != q.getDimSize(3))
    return op->emitOpError("k and v must have q's B, T and D, got ") << k << " for " << q;
  if (k.getDimSize(h) < 1 || q.getDimSize(h) % k.getDimSize(h) != 0)
    return op->emitOpError("q's heads must be a multiple of k's (grouped-query heads), got ")
           << q.getDimSize(h) << " and " << k.getDimSize(h);
  if (result.getType() != q)
    return op->emitOpError("result type must be q's");
  auto lse = cast<RankedTensorType>(lsev.getType());
  if (lse.getShape() != ArrayRef<int64_t>{q.getDimSize(0), q.getDimSize(h), q.getDimSize(t)})
    return op->emitOpError("lse must be [B, H, T], got ") << lse;
  if (window < 0)
    return op->emitOpError("window must be 0 (causal) or positive, got ") << window;
  return success();
}

LogicalResult AttentionOp::verify() {
  return verifyAttention(*this, getQ(), getK(), getV(), getResult(), getLse(), getWindow(), getSeqMajor());
}

LogicalResult AttentionGradOp::verify() {
  if (failed(verifyAttention(*this, getQ(), getK(), getV(), getResult(), getLse(), getWindow(), getSeqMajor())))
    return failure();
  if (getDy().getType() != getQ().getType() || getDq().getType() != getQ().getType() ||
      getDk().getType() != getK().getType() || getDv().getType() != getK().getType())
    return emitOpError("dy and dq must have q's type, dk and dv k's");
  return success();
}

// qkv [B, T, H + 2 kv_heads, D] holds result's [B, T, H, D] heads and the
// keys' and values'; lse [B, H, T].
static LogicalResult verifyAttentionQKV(Operation *op, Value qkv, Value result, Value lse, int64_t kvHeads,
                                        int64_t window) {
  auto x = cast<RankedTensorType>(qkv.getType()), r = cast<RankedTensorType>(result.getType()),
       l = cast<RankedTensorType>(lse.getType());
  if (x.getRank() != 4 || r.getRank() != 4)
    return op->emitOpError("qkv must be [B, T, H + 2 Hkv, D] and the result [B, T, H, D]");
  const int64_t B = r.getDimSize(0), T = r.getDimSize(1), H = r.getDimSize(2), D = r.getDimSize(3);
  if (kvHeads < 1 || H % kvHeads != 0)
    return op->emitOpError("kv_heads must divide the result's ") << H << " heads, got " << kvHeads;
  if (x.getDimSize(0) != B || x.getDimSize(1) != T || x.getDimSize(3) != D || x.getDimSize(2) != H + 2 * kvHeads)
    return op->emitOpError("qkv ") << x << " must hold the result's heads and twice " << kvHeads << " more";
  if (l.getShape() != ArrayRef<int64_t>{B, H, T})
    return op->emitOpError("lse must be [B, H, T], got ") << l;
  if (window < 0)
    return op->emitOpError("window must be 0 (causal) or positive, got ") << window;
  return success();
}

LogicalResult AttentionQKVOp::verify() {
  return verifyAttentionQKV(*this, getQkv(), getResult(), getLse(), getKvHeads(), getWindow());
}

LogicalResult AttentionQKVGradOp::verify() {
  if (failed(verifyAttentionQKV(*this, getQkv(), getResult(), getLse(), getKvHeads(), getWindow())))
    return failure();
  if (getDy().getType() != getResult().getType() || getDqkv().getType() != getQkv().getType())
    return emitOpError("dy must have the result's type, dqkv qkv's");
  return success();
}

LogicalResult GeluOp::verify() {
  if (getApproximate() != "none" && getApproximate() != "tanh")
    return emitOpError("approximate must be \"none\" or \"tanh\", got \"")
           << getApproximate() << "\"";
  return success();
}

// x's last dim is even and its dim seq_axis (not the last) indexes the
// rows of the [T, D] tables.
LogicalResult RopeOp::verify() {
  auto x = cast<RankedTensorType>(getInput().getType()), c = cast<RankedTensorType>(getCos().getType());
  const int64_t rank = x.getRank(), axis = getSeqAxis();
  if (rank < 2 || axis < 0 || axis >= rank - 1)
    return emitOpError("seq_axis must be a dim of the input other than its last, got ") << axis;
  const int64_t D = x.getDimSize(rank - 1);
  if (D % 2 != 0)
    return emitOpError("the input's last dim must be even (two halves), got ") << D;
  if (c.getRank() != 2 || c.getDimSize(0) != x.getDimSize(axis) || c.getDimSize(1) != D)
    return emitOpError("cos and sin must be [T, D] = [") << x.getDimSize(axis) << ", " << D << "], got " << c;
  return success();
}

// A bias along the last dim of `input`, and a known GELU form.
static LogicalResult verifyBiasGelu(Operation *op, Value input, Value bias, StringRef approximate) {
  if (approximate != "none" && approximate != "tanh")
    return op->emitOpError("approximate must be \"none\" or \"tanh\", got \"") << approximate << "\"";
  auto x = cast<RankedTensorType>(input.getType()), b = cast<RankedTensorType>(bias.getType());
  if (x.getRank() < 1 || b.getRank() != 1 || b.getDimSize(0) != x.getDimSize(x.getRank() - 1))
    return op->emitOpError("bias must be 1-D with the input's last dim, got ") << b << " for " << x;
  return success();
}

LogicalResult BiasGeluOp::verify() { return verifyBiasGelu(*this, getInput(), getBias(), getApproximate()); }
LogicalResult BiasGeluGradOp::verify() { return verifyBiasGelu(*this, getInput(), getBias(), getApproximate()); }

LogicalResult UnaryGradOp::verify() {
  bool known = llvm::StringSwitch<bool>(getFn())
                   .Cases("neg", "sqrt", "reciprocal", "exp", "tanh", true)
                   .Cases("erf", "sigmoid", "silu", "gelu", "gelu_tanh", true)
                   .Default(false);
  if (!known)
    return emitOpError("unknown elementwise function '") << getFn() << "'";
  return success();
}

//===----------------------------------------------------------------------===//
// Reductions, products, normalisations
//===----------------------------------------------------------------------===//

template <typename ReduceOp>
static LogicalResult verifyReduce(ReduceOp op) {
  int64_t rank = rankOf(op.getInput());
  llvm::SmallVector<bool> reduced(rank, false);
  for (int64_t a : op.getAxes()) {
    auto n = normAxis(op, a, rank);
    if (failed(n))
      return failure();
    reduced[*n] = true;
  }
  SmallVector<int64_t> want;
  for (int64_t i = 0; i < rank; ++i) {
    if (!reduced[i])
      want.push_back(shapeOf(op.getInput())[i]);
    else if (op.getKeepdims())
      want.push_back(1);
  }
  if (ArrayRef<int64_t>(want) != shapeOf(op.getResult()))
    return op.emitOpError("result shape does not match the reduction");
  return success();
}
LogicalResult ReduceSumOp::verify() { return verifyReduce(*this); }
LogicalResult ReduceMeanOp::verify() { return verifyReduce(*this); }

LogicalResult ReduceToOp::verify() {
  if (!broadcastsTo(shapeOf(getResult()), shapeOf(getInput())))
    return emitOpError("result shape does not broadcast to the input shape");
  return success();
}
OpFoldResult ReduceToOp::fold(FoldAdaptor) {
  return getInput().getType() == getType() ? getInput() : nullptr;
}

template <typename Op> static LogicalResult verifyMatMul(Op op) {
  ArrayRef<int64_t> a = shapeOf(op.getLhs()), b = shapeOf(op.getRhs());
  if (a.size() < 2 || b.size() < 2)
    return op.emitOpError("operands must have rank >= 2 (1-D operands are reshaped at import)");
  int64_t m = a[a.size() - 2], ka = a.back(), kb = b[b.size() - 2], n = b.back();
  if (op.getTransA())
    std::swap(m, ka);
  if (op.getTransB())
    std::swap(kb, n);
  if (ka != kb)
    return op.emitOpError("contraction dims differ: ") << ka << " vs " << kb;
  SmallVector<int64_t> batch;
  if (!OpTrait::util::getBroadcastedShape(a.drop_back(2), b.drop_back(2), batch))
    return op.emitOpError("batch dims do not broadcast");
  batch.push_back(m);
  batch.push_back(n);
  if (ArrayRef<int64_t>(batch) != shapeOf(op.getResult()))
    return op.emitOpError("result shape must be [") << batch << "]";
  return success();
}

LogicalResult MatMulOp::verify() { return verifyMatMul(*this); }

LogicalResult MatMulBiasOp::verify() {
  if (failed(verifyMatMul(*this)))
    return failure();
  ArrayRef<int64_t> bias = shapeOf(getBias());
  if (bias.size() != 1 || bias[0] != shapeOf(getResult()).back())
    return emitOpError("bias must be 1-D with the result's last dim, got [") << bias << "]";
  return success();
}

// Shape of per-row statistics: the input's shape with dims [axis, rank) set to 1.
static SmallVector<int64_t> statShape(ArrayRef<int64_t> in, int64_t axis) {
  SmallVector<int64_t> s(in.begin(), in.end());
  for (size_t i = axis; i < s.size(); ++i)
    s[i] = 1;
  return s;
}

static LogicalResult verifyNorm(Operation *op, Value in, Value scale, Value bias, int64_t axisAttr,
                                ArrayRef<Value> stats) {
  auto axis = normAxis(op, axisAttr, rankOf(in));
  if (failed(axis))
    return failure();
  ArrayRef<int64_t> normDims = shapeOf(in).drop_front(*axis);
  if (shapeOf(scale) != normDims || (bias && shapeOf(bias) != normDims))
    return op->emitOpError("scale and bias must have the normalised dims' shape");
  if (op->getResult(0).getType() != in.getType())
    return op->emitOpError("result type must equal the input type");
  SmallVector<int64_t> want = statShape(shapeOf(in), *axis);
  for (Value s : stats)
    if (shapeOf(s) != ArrayRef<int64_t>(want))
      return op->emitOpError("statistics must have shape [") << want << "]";
  return success();
}

LogicalResult LayerNormOp::verify() {
  return verifyNorm(*this, getInput(), getScale(), getBias(), getAxis(),
                    {getMean(), getInvStdDev()});
}
LogicalResult RMSNormOp::verify() {
  return verifyNorm(*this, getInput(), getScale(), nullptr, getAxis(), {getInvRms()});
}

LogicalResult SoftmaxCrossEntropyLossOp::verify() {
  ArrayRef<int64_t> s = shapeOf(getScores()), l = shapeOf(getLabels());
  if (s.size() < 2 || l.size() != s.size() - 1 || l[0] != s[0] ||
      l.drop_front() != s.drop_front(2))
    return emitOpError("labels must have the scores' shape without the class dim 1");
  if (getReduction() != "mean" && getReduction() != "sum")
    return emitOpError("reduction must be \"mean\" or \"sum\"");
  if (rankOf(getLoss()) != 0)
    return emitOpError("loss must be a scalar");
  if (getLogProb().getType() != getScores().getType())
    return emitOpError("log_prob must have the scores' type");
  return success();
}

LogicalResult LinearCrossEntropyOp::verify() {
  auto x = cast<RankedTensorType>(getX().getType()), w = cast<RankedTensorType>(getW().getType());
  if (x.getRank() < 2 || w.getRank() != 2 || w.getDimSize(1) != x.getDimSize(x.getRank() - 1))
    return emitOpError("x must be [..., D] and w [V, D], got ") << x << " and " << w;
  ArrayRef<int64_t> l = shapeOf(getLabels());
  if (l.size() != 1 || l[0] * x.getDimSize(x.getRank() - 1) != x.getNumElements())
    return emitOpError("labels must be [N], one for each of x's rows");
  if (getReduction() != "mean" && getReduction() != "sum")
    return emitOpError("reduction must be \"mean\" or \"sum\"");
  if (rankOf(getLoss()) != 0)
    return emitOpError("loss must be a scalar");
  if (getDx().getType() != x || getDw().getType() != w)
    return emitOpError("dx must have x's type and dw w's");
  return success();
}

//===----------------------------------------------------------------------===//
// Data movement
//===----------------------------------------------------------------------===//

LogicalResult ReshapeOp::verify() {
  auto in = cast<RankedTensorType>(getInput().getType());
  auto out = cast<RankedTensorType>(getType());
  if (in.getNumElements() != out.getNumElements() || in.getElementType() != out.getElementType())
    return emitOpError("must keep the element count and type");
  return success();
}
OpFoldResult ReshapeOp::fold(FoldAdaptor) {
  return getInput().getType() == getType() ? getInput() : nullptr;
}

LogicalResult TransposeOp::verify() {
  ArrayRef<int64_t> in = shapeOf(getInput());
  if (getPerm().size() != in.size())
    return emitOpError("perm must have one entry per dim");
  SmallVector<bool> seen(in.size(), false);
  SmallVector<int64_t> want;
  for (int64_t p : getPerm()) {
    if (p < 0 || p >= (int64_t)in.size() || seen[p])
      return emitOpError("perm is not a permutation");
    seen[p] = true;
    want.push_back(in[p]);
  }
  if (ArrayRef<int64_t>(want) != shapeOf(getResult()) || elemOf(getInput()) != elemOf(getResult()))
    return emitOpError("result type does not match the permutation");
  return success();
}
OpFoldResult TransposeOp::fold(FoldAdaptor) {
  bool composed = false;
  if (auto inner = getInput().getDefiningOp<TransposeOp>()) {
    // Result dim i is the inner result's dim perm[i]: the input's inner.perm[perm[i]].
    SmallVector<int64_t> perm;
    for (int64_t p : getPerm())
      perm.push_back(inner.getPerm()[p]);
    getInputMutable().assign(inner.getInput());
    setPerm(perm);
    composed = true;
  }
  for (auto [i, p] : llvm::enumerate(getPerm()))
    if (p != int64_t(i))
      return composed ? getResult() : nullptr;
  return getInput();  // the identity
}

LogicalResult ExpandOp::verify() {
  if (!broadcastsTo(shapeOf(getInput()), shapeOf(getResult())) ||
      elemOf(getInput()) != elemOf(getResult()))
    return emitOpError("input does not broadcast to the result type");
  return success();
}

// x [..., 2F] and the SwiGLU of its halves [..., F].
static LogicalResult verifyPacked(Operation *op, Value packed, Value half) {
  auto p = shapeOf(packed), h = shapeOf(half);
  if (p.size() != h.size() || p.empty() || elemOf(packed) != elemOf(half))
    return op->emitOpError("the packed input and its half need one rank and element type");
  for (size_t i = 0; i + 1 < p.size(); ++i)
    if (p[i] != h[i])
      return op->emitOpError("the packed input and its half differ outside the last dim");
  if (p.back() != 2 * h.back())
    return op->emitOpError("the packed input's last dim must be twice its half's, got ") << p.back() << " and "
                                                                                           << h.back();
  return success();
}

LogicalResult SwiGLUPackedOp::verify() { return verifyPacked(*this, getInput(), getResult()); }
LogicalResult SwiGLUPackedGradOp::verify() { return verifyPacked(*this, getInput(), getDy()); }

LogicalResult ConcatOp::verify() {
  if (getInputs().empty())
    return emitOpError("needs at least one input");
  int64_t rank = rankOf(getResult());
  auto axis = normAxis(*this, getAxis(), rank);
  if (failed(axis))
    return failure();
  int64_t total = 0;
  for (Value v : getInputs()) {
    if (rankOf(v) != rank || elemOf(v) != elemOf(getResult()))
      return emitOpError("inputs must match the result's rank and element type");
    for (int64_t i = 0; i < rank; ++i)
      if (i != *axis && shapeOf(v)[i] != shapeOf(getResult())[i])
        return emitOpError("inputs differ from the result outside the concat axis");
    total += shapeOf(v)[*axis];
  }
  if (total != shapeOf(getResult())[*axis])
    return emitOpError("concat axis sizes add to ") << total;
  return success();
}

static LogicalResult verifySlice(Operation *op, ArrayRef<int64_t> full, ArrayRef<int64_t> part,
                                 ArrayRef<int64_t> starts, ArrayRef<int64_t> steps) {
  if (full.size() != part.size() || starts.size() != full.size() || steps.size() != full.size())
    return op->emitOpError("starts and steps need one entry per dim");
  for (size_t i = 0; i < full.size(); ++i) {
    if (steps[i] <= 0)
      return op->emitOpError("steps must be positive");
    if (starts[i] < 0 || (part[i] > 0 && starts[i] + (part[i] - 1) * steps[i] >= full[i]))
      return op->emitOpError("slice runs out of dim ") << i;
  }
  return success();
}

LogicalResult SliceOp::verify() {
  if (elemOf(getInput()) != elemOf(getResult()))
    return emitOpError("must keep the element type");
  return verifySlice(*this, shapeOf(getInput()), shapeOf(getResult()), getStarts(), getSteps());
}
LogicalResult SliceGradOp::verify() {
  return verifySlice(*this, shapeOf(getDx()), shapeOf(getDy()), getStarts(), getSteps());
}

static LogicalResult verifyGather(Operation *op, Value table, Value idx, Value rows) {
  SmallVector<int64_t> want(shapeOf(idx));
  llvm::append_range(want, shapeOf(table).drop_front());
  if (rankOf(table) < 1 || ArrayRef<int64_t>(want) != shapeOf(rows))
    return op->emitOpError("gathered shape must be indices' shape + table shape[1:]");
  return success();
}
LogicalResult GatherOp::verify() {
  return verifyGather(*this, getTable(), getIndices(), getResult());
}
LogicalResult GatherGradOp::verify() {
  return verifyGather(*this, getDtable(), getIndices(), getDy());
}
LogicalResult GatherGradAddOp::verify() {
  if (getBase().getType() != getDtable().getType())
    return emitOpError("base must have the result's type");
  return verifyGather(*this, getDtable(), getIndices(), getDy());
}

namespace {
// add(t, gather_grad(dy, ids)) -> gather_grad_add(t, dy, ids): one pass over
// the table instead of a zero table and a sum, and the rows ids do not name
// stay t's exactly.
struct AddOfGatherGrad : OpRewritePattern<AddOp> {
  using OpRewritePattern::OpRewritePattern;
  LogicalResult matchAndRewrite(AddOp op, PatternRewriter &rw) const override {
    for (auto [scattered, base] : {std::pair(op.getRhs(), op.getLhs()), std::pair(op.getLhs(), op.getRhs())}) {
      auto gg = scattered.getDefiningOp<GatherGradOp>();
      if (!gg || !scattered.hasOneUse() || base.getType() != op.getType() || gg.getType() != op.getType())
        continue;
      rw.replaceOpWithNewOp<GatherGradAddOp>(op, op.getType(), base, gg.getDy(), gg.getIndices());
      rw.eraseOp(gg);
      return success();
    }
    return failure();
  }
};
} // namespace

void AddOp::getCanonicalizationPatterns(RewritePatternSet &results, MLIRContext *ctx) {
  results.add<AddOfGatherGrad>(ctx);
}

LogicalResult DropoutOp::verify() {
  float r = getRatio().convertToFloat();
  if (!(r >= 0.f && r < 1.f))
    return emitOpError("ratio must be in [0, 1)");
  if (shapeOf(getMask()) != shapeOf(getInput()) || getResult().getType() != getInput().getType())
    return emitOpError("result and mask must have the input's shape");
  return success();
}

#define GET_OP_CLASSES
#include "dialects/FyGraph/FyGraphOps.cpp.inc"
