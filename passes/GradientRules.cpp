// Gradient rules, written in fygraph ops. Rules mirror ONNX Runtime's
// gradient builder: forward ops already return what backward needs
// (statistics, log-probabilities, masks), so each rule reads them directly.
#include "passes/GradientRules.h"

#include "dialects/FyGraph/FyGraphOps.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Matchers.h"
#include "llvm/ADT/StringMap.h"

using namespace mlir;
namespace fg = fuyou::fygraph;

namespace {

ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }
RankedTensorType f32(ArrayRef<int64_t> shape, OpBuilder &b) {
  return RankedTensorType::get(shape, b.getF32Type());
}

// Sums `g` over the dims it was broadcast along to reach `like`'s shape.
Value reduceTo(OpBuilder &b, Value g, Value like) {
  if (shapeOf(g) == shapeOf(like))
    return g;
  return b.create<fg::ReduceToOp>(g.getLoc(), f32(shapeOf(like), b), g);
}

Value scalar(OpBuilder &b, Location loc, float x) {
  auto t = f32({}, b);
  return b.create<fg::ConstantOp>(loc, DenseElementsAttr::get(t, ArrayRef<float>(x)));
}

template <typename OpT> Value binop(OpBuilder &b, Value x, Value y) {
  SmallVector<int64_t> s;
  OpTrait::util::getBroadcastedShape(shapeOf(x), shapeOf(y), s);
  return b.create<OpT>(x.getLoc(), f32(s, b), x, y);
}
Value mul(OpBuilder &b, Value x, Value y) { return binop<fg::MulOp>(b, x, y); }

// Result shape of fygraph.matmul for the given operands and flags.
Value matmul(OpBuilder &b, Value x, Value y, bool ta, bool tb) {
  ArrayRef<int64_t> sx = shapeOf(x), sy = shapeOf(y);
  int64_t m = ta ? sx.back() : sx[sx.size() - 2];
  int64_t n = tb ? sy[sy.size() - 2] : sy.back();
  SmallVector<int64_t> s;
  OpTrait::util::getBroadcastedShape(sx.drop_back(2), sy.drop_back(2), s);
  s.push_back(m);
  s.push_back(n);
  return b.create<fg::MatMulOp>(x.getLoc(), f32(s, b), x, y, ta, tb);
}

Value reshape(OpBuilder &b, Value x, ArrayRef<int64_t> shape) {
  if (shapeOf(x) == shape)
    return x;
  return b.create<fg::ReshapeOp>(x.getLoc(), f32(shape, b), x);
}

// Flattens the leading dims of a rank>2 operand: [..., m, k] -> [M, k].
Value flattenRows(OpBuilder &b, Value x) {
  ArrayRef<int64_t> s = shapeOf(x);
  int64_t rows = 1;
  for (int64_t d : s.drop_back())
    rows *= d;
  return reshape(b, x, {rows, s.back()});
}

//===----------------------------------------------------------------------===//
// Rules
//===----------------------------------------------------------------------===//

LogicalResult addRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  dx[0] = reduceTo(b, dy[0], op->getOperand(0));
  dx[1] = reduceTo(b, dy[0], op->getOperand(1));
  return success();
}

LogicalResult subRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  dx[0] = reduceTo(b, dy[0], op->getOperand(0));
  dx[1] = reduceTo(b, b.create<fg::NegOp>(op->getLoc(), dy[0]), op->getOperand(1));
  return success();
}

LogicalResult mulRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  Value a = op->getOperand(0), c = op->getOperand(1);
  dx[0] = reduceTo(b, mul(b, dy[0], c), a);
  dx[1] = reduceTo(b, mul(b, dy[0], a), c);
  return success();
}

LogicalResult divRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  // y = a / c: da = dy / c, dc = -dy * y / c.
  Value a = op->getOperand(0), c = op->getOperand(1), y = op->getResult(0);
  dx[0] = reduceTo(b, binop<fg::DivOp>(b, dy[0], c), a);
  Value t = binop<fg::DivOp>(b, mul(b, dy[0], y), c);
  dx[1] = reduceTo(b, b.create<fg::NegOp>(op->getLoc(), t), c);
  return success();
}

LogicalResult powRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  // y = a^e: da = dy * e * a^(e-1). The exponent gets no gradient (it is a
  // constant in every exported model; a learned exponent would need log).
  Value a = op->getOperand(0), e = op->getOperand(1);
  if (!e.getDefiningOp<fg::ConstantOp>())
    return op->emitError("gradient of pow needs a constant exponent");
  Value em1 = binop<fg::SubOp>(b, e, scalar(b, op->getLoc(), 1.f));
  Value t = mul(b, mul(b, dy[0], e), binop<fg::PowOp>(b, a, em1));
  dx[0] = reduceTo(b, t, a);
  return success();
}

LogicalResult negRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  dx[0] = b.create<fg::NegOp>(op->getLoc(), dy[0]);
  return success();
}

// Elementwise f with dx = dy * f'(x) from fygraph.unary_grad.
template <const char *fn>
LogicalResult unaryRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  dx[0] = b.create<fg::UnaryGradOp>(op->getLoc(), dy[0].getType(), b.getStringAttr(fn),
                                    op->getOperand(0), op->getResult(0), dy[0]);
  return success();
}
constexpr char kSqrt[] = "sqrt", kReciprocal[] = "reciprocal", kExp[] = "exp", kTanh[] = "tanh",
               kErf[] = "erf", kSigmoid[] = "sigmoid", kSilu[] = "silu";

LogicalResult geluRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto g = cast<fg::GeluOp>(op);
  StringRef fn = g.getApproximate() == "tanh" ? "gelu_tanh" : "gelu";
  dx[0] = b.create<fg::UnaryGradOp>(op->getLoc(), dy[0].getType(), b.getStringAttr(fn),
                                    g.getInput(), g.getResult(), dy[0]);
  return success();
}

// dx = dy * gelu'(x + b); the bias's gradient sums it over the other dims.
LogicalResult biasGeluRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto g = cast<fg::BiasGeluOp>(op);
  dx[0] = b.create<fg::BiasGeluGradOp>(op->getLoc(), dy[0].getType(), g.getInput(), g.getBias(), g.getResult(),
                                       dy[0], g.getApproximate());
  dx[1] = reduceTo(b, dx[0], g.getBias());
  return success();
}

LogicalResult swigluRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto s = cast<fg::SwiGLUOp>(op);
  auto g = b.create<fg::SwiGLUGradOp>(op->getLoc(), s.getGate(), s.getUp(), dy[0]);
  dx[0] = g.getDgate();
  dx[1] = g.getDup();
  return success();
}

LogicalResult swigluPackedRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto s = cast<fg::SwiGLUPackedOp>(op);
  dx[0] = b.create<fg::SwiGLUPackedGradOp>(op->getLoc(), s.getInput().getType(), s.getInput(), dy[0]);
  return success();
}

LogicalResult matmulRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto mm = cast<fg::MatMulOp>(op);
  Value a = mm.getLhs(), c = mm.getRhs(), g = dy[0];
  bool ta = mm.getTransA(), tb = mm.getTransB();
  // A weight shared across a batch ([.., m, k] x [k, n]): fold the batch into
  // rows so its gradient is one GEMM instead of a batched GEMM and a sum.
  if (shapeOf(c).size() == 2 && shapeOf(a).size() > 2 && !ta) {
    Value a2 = flattenRows(b, a), g2 = flattenRows(b, g);
    dx[0] = reshape(b, matmul(b, g2, c, false, !tb), shapeOf(a));
    dx[1] = tb ? matmul(b, g2, a2, true, false) : matmul(b, a2, g2, true, false);
    return success();
  }
  Value da, dc;
  if (!ta && !tb) {
    da = matmul(b, g, c, false, true);
    dc = matmul(b, a, g, true, false);
  } else if (!ta && tb) {
    da = matmul(b, g, c, false, false);
    dc = matmul(b, g, a, true, false);
  } else if (ta && !tb) {
    da = matmul(b, c, g, false, true);
    dc = matmul(b, a, g, false, false);
  } else {
    da = matmul(b, c, g, true, true);
    dc = matmul(b, g, a, true, true);
  }
  dx[0] = reduceTo(b, da, a);
  dx[1] = reduceTo(b, dc, c);
  return success();
}

LogicalResult transposeRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                            MutableArrayRef<Value> dx) {
  auto t = cast<fg::TransposeOp>(op);
  ArrayRef<int64_t> perm = t.getPerm();
  SmallVector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i)
    inv[perm[i]] = i;
  dx[0] = b.create<fg::TransposeOp>(op->getLoc(), t.getInput().getType(), dy[0], inv);
  return success();
}

LogicalResult reshapeRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                          MutableArrayRef<Value> dx) {
  dx[0] = reshape(b, dy[0], shapeOf(op->getOperand(0)));
  return success();
}

LogicalResult expandRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  dx[0] = reduceTo(b, dy[0], op->getOperand(0));
  return success();
}

// Broadcasts `g` (a reduction's result) back over `like`'s shape.
Value broadcastBack(OpBuilder &b, Value g, Value like, ArrayRef<int64_t> keepShape) {
  Value r = reshape(b, g, keepShape);
  if (shapeOf(r) == shapeOf(like))
    return r;
  return b.create<fg::ExpandOp>(g.getLoc(), f32(shapeOf(like), b), r);
}

template <typename ReduceOp, bool isMean>
LogicalResult reduceRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto r = cast<ReduceOp>(op);
  Value x = r.getInput();
  SmallVector<int64_t> keep(shapeOf(x));
  int64_t count = 1;
  for (int64_t a : r.getAxes()) {
    int64_t na = a < 0 ? a + keep.size() : a;
    count *= keep[na];
    keep[na] = 1;
  }
  Value g = dy[0];
  if (isMean)
    g = mul(b, g, scalar(b, op->getLoc(), 1.f / float(count)));
  dx[0] = broadcastBack(b, g, x, keep);
  return success();
}

LogicalResult reduceToRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                           MutableArrayRef<Value> dx) {
  Value x = op->getOperand(0);
  SmallVector<int64_t> keep(shapeOf(x).size() - shapeOf(dy[0]).size(), 1);
  llvm::append_range(keep, shapeOf(dy[0]));
  dx[0] = broadcastBack(b, dy[0], x, keep);
  return success();
}

LogicalResult concatRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto c = cast<fg::ConcatOp>(op);
  int64_t rank = shapeOf(c.getResult()).size();
  int64_t axis = static_cast<int64_t>(c.getAxis());
  if (axis < 0)
    axis += rank;
  int64_t off = 0;
  for (auto [i, v] : llvm::enumerate(c.getInputs())) {
    SmallVector<int64_t> starts(rank, 0), steps(rank, 1);
    starts[axis] = off;
    off += shapeOf(v)[axis];
    dx[i] = b.create<fg::SliceOp>(op->getLoc(), v.getType(), dy[0], starts, steps);
  }
  return success();
}

LogicalResult sliceRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto s = cast<fg::SliceOp>(op);
  dx[0] = b.create<fg::SliceGradOp>(op->getLoc(), s.getInput().getType(), dy[0], s.getStarts(),
                                    s.getSteps());
  return success();
}

LogicalResult gatherRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto g = cast<fg::GatherOp>(op);
  dx[0] = b.create<fg::GatherGradOp>(op->getLoc(), g.getTable().getType(), dy[0], g.getIndices());
  return success();
}

LogicalResult whereRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto w = cast<fg::WhereOp>(op);
  Value zero = scalar(b, op->getLoc(), 0.f);
  Type t = dy[0].getType();
  dx[1] = reduceTo(b, b.create<fg::WhereOp>(op->getLoc(), t, w.getCondition(), dy[0], zero), w.getLhs());
  dx[2] = reduceTo(b, b.create<fg::WhereOp>(op->getLoc(), t, w.getCondition(), zero, dy[0]), w.getRhs());
  return success();
}

LogicalResult castRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto c = cast<fg::CastOp>(op);
  auto inType = cast<RankedTensorType>(c.getInput().getType());
  if (inType.getElementType().isF32())
    dx[0] = b.create<fg::CastOp>(op->getLoc(), inType, dy[0]);
  return success();
}

LogicalResult layerNormRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                            MutableArrayRef<Value> dx) {
  auto ln = cast<fg::LayerNormOp>(op);
  if (dy[1] || dy[2])
    return op->emitError("gradient through layer_norm statistics is not supported");
  Type scaleT = ln.getScale().getType();
  auto g = b.create<fg::LayerNormGradOp>(op->getLoc(),
                                         TypeRange{ln.getInput().getType(), scaleT, scaleT}, dy[0],
                                         ln.getInput(), ln.getScale(), ln.getMean(),
                                         ln.getInvStdDev(), /*addend=*/Value(), ln.getAxisAttr());
  dx[0] = g.getDinput();
  dx[1] = g.getDscale();
  if (ln.getBias())
    dx[2] = g.getDbias();
  return success();
}

LogicalResult rmsNormRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                          MutableArrayRef<Value> dx) {
  auto rn = cast<fg::RMSNormOp>(op);
  if (dy[1])
    return op->emitError("gradient through rms_norm statistics is not supported");
  auto g = b.create<fg::RMSNormGradOp>(
      op->getLoc(), TypeRange{rn.getInput().getType(), rn.getScale().getType()}, dy[0],
      rn.getInput(), rn.getScale(), rn.getInvRms(), /*addend=*/Value(), rn.getAxisAttr());
  dx[0] = g.getDinput();
  dx[1] = g.getDscale();
  return success();
}

LogicalResult softmaxRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                          MutableArrayRef<Value> dx) {
  auto s = cast<fg::SoftmaxOp>(op);
  dx[0] = b.create<fg::SoftmaxGradOp>(op->getLoc(), dy[0], s.getResult(), s.getAxisAttr(), b.getF32FloatAttr(1.f));
  return success();
}

// The mask takes no gradient; masked scores have y = 0, so dx = 0 there.
LogicalResult maskedSoftmaxRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                                MutableArrayRef<Value> dx) {
  auto s = cast<fg::MaskedSoftmaxOp>(op);
  int64_t last = cast<RankedTensorType>(s.getType()).getRank() - 1;
  dx[0] = b.create<fg::SoftmaxGradOp>(op->getLoc(), dy[0], s.getResult(), b.getI64IntegerAttr(last),
                                      s.getScaleAttr());
  return success();
}

LogicalResult attentionRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto a = cast<fg::AttentionOp>(op);
  if (dy[1])
    return op->emitError("gradient through attention's log-sum-exps is not supported");
  auto g = b.create<fg::AttentionGradOp>(op->getLoc(), a.getQ().getType(), a.getK().getType(), a.getV().getType(),
                                         a.getQ(), a.getK(), a.getV(), a.getResult(), a.getLse(), dy[0],
                                         a.getScaleAttr(), a.getWindowAttr(), a.getSeqMajorAttr());
  dx[0] = g.getDq();
  dx[1] = g.getDk();
  dx[2] = g.getDv();
  return success();
}

LogicalResult attentionQKVRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto a = cast<fg::AttentionQKVOp>(op);
  if (dy[1])
    return op->emitError("gradient through attention's log-sum-exps is not supported");
  dx[0] = b.create<fg::AttentionQKVGradOp>(op->getLoc(), a.getQkv().getType(), a.getQkv(), a.getResult(), a.getLse(),
                                           dy[0], a.getKvHeadsAttr(), a.getScaleAttr(), a.getWindowAttr());
  return success();
}

LogicalResult sceRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto s = cast<fg::SoftmaxCrossEntropyLossOp>(op);
  if (dy[1])
    return op->emitError("gradient through log-probabilities is not supported");
  dx[0] = b.create<fg::SoftmaxCrossEntropyLossGradOp>(
      op->getLoc(), s.getScores().getType(), dy[0], s.getLogProb(), s.getLabels(),
      s.getReductionAttr(), s.getIgnoreIndexAttr());
  return success();
}

// linear_cross_entropy made its gradients in the forward for a gradient of
// 1 on the loss: they are scaled by the loss's gradient, unless it is that
// constant 1 (training without loss scaling).
LogicalResult linearCrossEntropyRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto l = cast<fg::LinearCrossEntropyOp>(op);
  if (dy[1] || dy[2])
    return op->emitError("gradient through linear_cross_entropy's gradients is not supported");
  DenseElementsAttr one;
  const bool unit = matchPattern(dy[0], m_Constant(&one)) && one.isSplat() &&
                    one.getElementType().isF32() && one.getSplatValue<float>() == 1.f;
  dx[0] = unit ? l.getDx() : mul(b, l.getDx(), dy[0]);
  dx[1] = unit ? l.getDw() : mul(b, l.getDw(), dy[0]);
  return success();
}

LogicalResult dropoutRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy,
                          MutableArrayRef<Value> dx) {
  auto d = cast<fg::DropoutOp>(op);
  if (dy[1])
    return op->emitError("gradient through a dropout mask is not supported");
  dx[0] = b.create<fg::DropoutGradOp>(op->getLoc(), dy[0].getType(), dy[0], d.getMask(),
                                      d.getRatioAttr());
  return success();
}

// rope's gradient is dy rotated by the transposed rotation; cos and sin get
// none (fy-recompose forms rope only where they need none).
LogicalResult ropeRule(OpBuilder &b, Operation *op, ArrayRef<Value> dy, MutableArrayRef<Value> dx) {
  auto r = cast<fg::RopeOp>(op);
  dx[0] = b.create<fg::RopeOp>(op->getLoc(), r.getType(), dy[0], r.getCos(), r.getSin(), r.getSeqAxisAttr(),
                               r.getTransposed() ? UnitAttr() : b.getUnitAttr());
  return success();
}

LogicalResult noGradient(OpBuilder &, Operation *, ArrayRef<Value>, MutableArrayRef<Value>) {
  return success();
}

const llvm::StringMap<fuyou::GradientRule> &registry() {
  static const llvm::StringMap<fuyou::GradientRule> rules = {
      {fg::AddOp::getOperationName(), addRule},
      {fg::SubOp::getOperationName(), subRule},
      {fg::MulOp::getOperationName(), mulRule},
      {fg::DivOp::getOperationName(), divRule},
      {fg::PowOp::getOperationName(), powRule},
      {fg::NegOp::getOperationName(), negRule},
      {fg::SqrtOp::getOperationName(), unaryRule<kSqrt>},
      {fg::ReciprocalOp::getOperationName(), unaryRule<kReciprocal>},
      {fg::ExpOp::getOperationName(), unaryRule<kExp>},
      {fg::TanhOp::getOperationName(), unaryRule<kTanh>},
      {fg::ErfOp::getOperationName(), unaryRule<kErf>},
      {fg::SigmoidOp::getOperationName(), unaryRule<kSigmoid>},
      {fg::SiluOp::getOperationName(), unaryRule<kSilu>},
      {fg::GeluOp::getOperationName(), geluRule},
      {fg::BiasGeluOp::getOperationName(), biasGeluRule},
      {fg::SwiGLUOp::getOperationName(), swigluRule},
      {fg::SwiGLUPackedOp::getOperationName(), swigluPackedRule},
      {fg::RopeOp::getOperationName(), ropeRule},
      {fg::MatMulOp::getOperationName(), matmulRule},
      {fg::TransposeOp::getOperationName(), transposeRule},
      {fg::ReshapeOp::getOperationName(), reshapeRule},
      {fg::ExpandOp::getOperationName(), expandRule},
      {fg::ReduceSumOp::getOperationName(), reduceRule<fg::ReduceSumOp, false>},
      {fg::ReduceMeanOp::getOperationName(), reduceRule<fg::ReduceMeanOp, true>},
      {fg::ReduceToOp::getOperationName(), reduceToRule},
      {fg::ConcatOp::getOperationName(), concatRule},
      {fg::SliceOp::getOperationName(), sliceRule},
      {fg::GatherOp::getOperationName(), gatherRule},
      {fg::WhereOp::getOperationName(), whereRule},
      {fg::CastOp::getOperationName(), castRule},
      {fg::LayerNormOp::getOperationName(), layerNormRule},
      {fg::RMSNormOp::getOperationName(), rmsNormRule},
      {fg::SoftmaxOp::getOperationName(), softmaxRule},
      {fg::MaskedSoftmaxOp::getOperationName(), maskedSoftmaxRule},
      {fg::AttentionOp::getOperationName(), attentionRule},
      {fg::AttentionQKVOp::getOperationName(), attentionQKVRule},
      {fg::SoftmaxCrossEntropyLossOp::getOperationName(), sceRule},
      {fg::LinearCrossEntropyOp::getOperationName(), linearCrossEntropyRule},
      {fg::DropoutOp::getOperationName(), dropoutRule},
      {fg::EqualOp::getOperationName(), noGradient},
      {fg::ConstantOp::getOperationName(), noGradient},
      {fg::GetParamOp::getOperationName(), noGradient},
  };
  return rules;
}

} // namespace

fuyou::GradientRule fuyou::lookupGradientRule(Operation *op) {
  auto it = registry().find(op->getName().getStringRef());
  return it == registry().end() ? nullptr : it->second;
}
