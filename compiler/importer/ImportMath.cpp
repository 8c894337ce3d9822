// The importer's handlers of ops that compute: products, elementwise and
// logic ops, casts, normalisations, softmax, dropout and the loss.
#include "compiler/importer/ImporterImpl.h"

namespace fuyou::import_detail {

LogicalResult Importer::matmul(const Node &n) {
  Value a = in(n, 0), c = in(n, 1);
  if (!a || !c)
    return failure();
  if (shapeOf(a).empty() || shapeOf(c).empty())
    return fail("operands must have rank 1 or more");
  if (!elemOf(a).isF32() || !elemOf(c).isF32())
    return fail("operands must be float32");
  // numpy rules for 1-D operands: promote, multiply, drop the added dim.
  bool vecA = shapeOf(a).size() == 1, vecC = shapeOf(c).size() == 1;
  if (vecA)
    a = reshape(a, {1, shapeOf(a)[0]});
  if (vecC)
    c = reshape(c, {shapeOf(c)[0], 1});
  ArrayRef<int64_t> sa = shapeOf(a), sc = shapeOf(c);
  if (sa.back() != sc[sc.size() - 2])
    return fail("contraction dims differ");
  auto batch = broadcast(sa.drop_back(2), sc.drop_back(2));
  if (failed(batch))
    return failure();
  SmallVector<int64_t> shape(*batch);
  shape.push_back(sa[sa.size() - 2]);
  shape.push_back(sc.back());
  Value r = b.create<fg::MatMulOp>(loc, tensorType(shape, b.getF32Type()), a, c, false, false);
  SmallVector<int64_t> want(*batch);
  if (!vecA)
    want.push_back(sa[sa.size() - 2]);
  if (!vecC)
    want.push_back(sc.back());
  set(n, 0, reshape(r, want));
  return success();
}

LogicalResult Importer::gemm(const Node &n) {
  Value a = in(n, 0), c = in(n, 1);
  if (!a || !c)
    return failure();
  if (shapeOf(a).size() != 2 || shapeOf(c).size() != 2 || !elemOf(a).isF32() || !elemOf(c).isF32())
    return fail("operands must be float32 matrices");
  bool ta = n.intAttr("transA", 0), tb = n.intAttr("transB", 0);
  if (shapeOf(a)[ta ? 0 : 1] != shapeOf(c)[tb ? 1 : 0])
    return fail("contraction dims differ");
  int64_t m = shapeOf(a)[ta ? 1 : 0], nn = shapeOf(c)[tb ? 0 : 1];
  Value r = b.create<fg::MatMulOp>(loc, tensorType({m, nn}, b.getF32Type()), a, c, ta, tb);
  if (float alpha = n.floatAttr("alpha", 1.f); alpha != 1.f)
    r = b.create<fg::MulOp>(loc, r.getType(), r, scalarF32(alpha));
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    Value bias = get(n.inputs[2]);
    if (!bias)
      return failure();
    if (float beta = n.floatAttr("beta", 1.f); beta != 1.f)
      bias = b.create<fg::MulOp>(loc, bias.getType(), bias, scalarF32(beta));
    r = b.create<fg::AddOp>(loc, r.getType(), r, bias);
  }
  set(n, 0, r);
  return success();
}

LogicalResult Importer::isNaN(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  if (!elemOf(x).isF32())
    return fail("expects a float32 input");
  negations[n.outputs[0]] = b.create<fg::EqualOp>(loc, tensorType(shapeOf(x), b.getI1Type()), x, x);
  return success();
}

LogicalResult Importer::notOp(const Node &n) {
  if (n.inputs.empty())
    return fail("missing input 0");
  if (auto it = negations.find(n.inputs[0]); it != negations.end()) {
    set(n, 0, it->second);
    return success();
  }
  Value x = in(n, 0);
  if (!x)
    return failure();
  if (!elemOf(x).isInteger(1))
    return fail("expects a bool input");
  negations[n.outputs[0]] = x;
  return success();
}

LogicalResult Importer::where(const Node &n) {
  if (n.inputs.size() == 3)
    if (auto it = negations.find(n.inputs[0]); it != negations.end()) {
      Node swapped = n;
      std::swap(swapped.inputs[1], swapped.inputs[2]);
      swapped.inputs[0] = n.inputs[0] + "\x01not";  // a name no ONNX file can hold
      values[swapped.inputs[0]] = it->second;
      return where(swapped);
    }
  Value c = in(n, 0), l = in(n, 1), r = in(n, 2);
  if (!c || !l || !r)
    return failure();
  if (!elemOf(c).isInteger(1) || elemOf(l) != elemOf(r))
    return fail("needs a bool condition and two inputs of one element type");
  auto s1 = broadcast(shapeOf(c), shapeOf(l));
  if (failed(s1))
    return failure();
  auto s2 = broadcast(*s1, shapeOf(r));
  if (failed(s2))
    return failure();
  set(n, 0, b.create<fg::WhereOp>(loc, tensorType(*s2, elemOf(l)), c, l, r));
  return success();
}

LogicalResult Importer::castOp(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  int64_t to = n.intAttr("to", 0);
  DType t = to == 1 ? DType::F32 : to == 7 ? DType::I64 : to == 9 ? DType::Bool : DType::Unsupported;
  if (t == DType::Unsupported)
    return fail("cast to ONNX type " + std::to_string(to) + " is not supported");
  Type elem = elemType(t);
  if (elem == elemOf(x)) {
    set(n, 0, x);
    return success();
  }
  set(n, 0, b.create<fg::CastOp>(loc, tensorType(shapeOf(x), elem), x));
  return success();
}

LogicalResult Importer::castLike(const Node &n) {
  if (n.inputs.size() < 2 || n.inputs[1].empty())
    return fail("missing input 1");
  // The target type: the like-input's ONNX type where it is a constant (an
  // int32 one wraps), else its element type here.
  int to;
  if (const Tensor *likeConst = getConst(n.inputs[1])) {
    to = likeConst->onnxType;
  } else {
    Value like = in(n, 1);
    if (!like)
      return failure();
    to = elemOf(like).isF32() ? 1 : elemOf(like).isInteger(64) ? 7 : 9;
  }
  if (const Tensor *c = getConst(n.inputs[0])) {  // a constant stays one, cast exactly
    Node cast = n;
    cast.opType = "Cast";
    cast.inputs.resize(1);
    cast.attrs["to"].kind = fuyou::onnx_in::Attr::Int;
    cast.attrs["to"].i = to;
    std::vector<Tensor> outs;
    if (std::string why = fuyou::onnx_in::foldNode(cast, {c}, outs); !why.empty())
      return fail(why);
    consts[n.outputs[0]] = std::move(outs[0]);
    return success();
  }
  Value x = in(n, 0);
  if (!x)
    return failure();
  Type elem = elemType(fuyou::onnx_in::dtypeOf(to));
  if (!elem)
    return fail("cast to ONNX type " + std::to_string(to) + " is not supported");
  set(n, 0, elemOf(x) == elem ? x : b.create<fg::CastOp>(loc, tensorType(shapeOf(x), elem), x).getResult());
  return success();
}

// The exponent of a Pow is a constant of the graph (its gradient needs one),
// whether the exporter wrote it as a Constant, a scalar initializer or an
// integer.
LogicalResult Importer::pow(const Node &n) {
  if (n.inputs.size() > 1 && !values.count(n.inputs[1])) {
    const Tensor *e = getConst(n.inputs[1]);
    if (auto it = inits.find(n.inputs[1]); !e && it != inits.end() && it->second->numel() == 1 && it->second->loaded)
      e = it->second;
    if (e && e->dtype != DType::Unsupported) {
      // This node's own constant: another reader of the initializer keeps it.
      std::vector<double> v = e->asDoubles();
      std::vector<float> f(v.begin(), v.end());
      auto type = tensorType(e->shape, b.getF32Type());
      Node withConst = n;
      withConst.inputs[1] = n.inputs[1] + "\x01pow";  // a name no ONNX file can hold
      values[withConst.inputs[1]] = b.create<fg::ConstantOp>(loc, DenseElementsAttr::get(type, ArrayRef<float>(f)));
      return binary<fg::PowOp>(withConst);
    }
  }
  return binary<fg::PowOp>(n);
}

LogicalResult Importer::gelu(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  if (!elemOf(x).isF32())
    return fail("expects a float32 input");
  std::string approx = n.strAttr("approximate", "none");
  if (approx != "none" && approx != "tanh")
    return fail("approximate '" + approx + "' is not supported (none, tanh)");
  set(n, 0, b.create<fg::GeluOp>(loc, x, b.getStringAttr(approx)));
  return success();
}

LogicalResult Importer::layerNorm(const Node &n) {
  Value x = in(n, 0), scale = in(n, 1);
  if (!x || !scale)
    return failure();
  Value bias;
  if (n.inputs.size() > 2 && !n.inputs[2].empty() && !(bias = get(n.inputs[2])))
    return failure();
  int64_t rank = shapeOf(x).size();
  auto ax = axis(n.intAttr("axis", -1), rank);
  if (failed(ax))
    return failure();
  // ONNX lets scale and bias broadcast to the normalised dims; ours take them whole.
  ArrayRef<int64_t> normDims = shapeOf(x).drop_front(*ax);
  if (shapeOf(scale) != normDims || (bias && shapeOf(bias) != normDims)) {
    std::string dims;
    for (int64_t d : normDims)
      dims += (dims.empty() ? "" : ",") + std::to_string(d);
    return fail("scale and bias must have the normalised dims' shape [" + dims +
                "] (broadcast ones are not supported)");
  }
  SmallVector<int64_t> stat(shapeOf(x));
  for (int64_t i = *ax; i < rank; ++i)
    stat[i] = 1;
  auto statType = tensorType(stat, b.getF32Type());
  auto op = b.create<fg::LayerNormOp>(loc, TypeRange{x.getType(), statType, statType}, x, scale,
                                      bias, b.getI64IntegerAttr(*ax),
                                      b.getF32FloatAttr(n.floatAttr("epsilon", 1e-5f)));
  for (int i = 0; i < 3; ++i)
    set(n, i, op->getResult(i));
  return success();
}

LogicalResult Importer::softmax(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  int64_t rank = shapeOf(x).size();
  // Before opset 13 Softmax flattens the input to 2-D at `axis` (default 1):
  // the same as ours only when that leaves the last dim alone.
  if (model.opset < 13) {
    int64_t a = n.intAttr("axis", 1);
    if ((a < 0 ? a + rank : a) != rank - 1)
      return fail("Softmax before opset 13 over more than the last dim is not supported; "
                  "export with opset >= 13");
  }
  auto ax = axis(n.intAttr("axis", -1), rank);
  if (failed(ax))
    return failure();
  set(n, 0, b.create<fg::SoftmaxOp>(loc, x, *ax));
  return success();
}

LogicalResult Importer::dropout(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  double ratio = 0.5;
  bool training = false;
  // Scalars that some exporters store as initializers rather than Constants.
  auto scalar = [&](const std::string &name) -> const Tensor * {
    if (const Tensor *t = getConst(name))
      return t;
    auto it = inits.find(name);
    return it != inits.end() && it->second->numel() == 1 && it->second->loaded &&
                   it->second->dtype != DType::Unsupported
               ? it->second
               : nullptr;
  };
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor *t = scalar(n.inputs[1]);
    if (!t)
      return fail("the ratio must be a constant");
    ratio = t->asDoubles().at(0);
  }
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor *t = scalar(n.inputs[2]);
    if (!t)
      return fail("training_mode must be a constant");
    training = t->asInts().at(0) != 0;
  }
  auto maskType = tensorType(shapeOf(x), b.getI1Type());
  if (!training || ratio == 0.0) {
    // Identity; a requested mask keeps everything.
    set(n, 0, x);
    if (n.outputs.size() > 1 && !n.outputs[1].empty())
      set(n, 1, b.create<fg::ConstantOp>(loc, DenseElementsAttr::get(maskType, true)));
    return success();
  }
  int64_t seed = std::hash<std::string>()(n.outputs[0]) & 0x7fffffff;
  auto op = b.create<fg::DropoutOp>(loc, TypeRange{x.getType(), maskType}, x,
                                    b.getF32FloatAttr(ratio), b.getI64IntegerAttr(seed));
  set(n, 0, op.getResult());
  set(n, 1, op.getMask());
  return success();
}

LogicalResult Importer::sceLoss(const Node &n) {
  Value scores = in(n, 0), labels = in(n, 1);
  if (!scores || !labels)
    return failure();
  if (n.inputs.size() > 2 && !n.inputs[2].empty())
    return fail("class weights are not supported");
  std::string red = n.strAttr("reduction", "mean");
  if (red != "mean" && red != "sum")
    return fail("reduction '" + red + "' is not supported (mean, sum)");
  IntegerAttr ignore;
  if (n.attr("ignore_index"))
    ignore = b.getI64IntegerAttr(n.intAttr("ignore_index", -100));
  auto op = b.create<fg::SoftmaxCrossEntropyLossOp>(
      loc, TypeRange{tensorType({}, b.getF32Type()), scores.getType()}, scores, labels,
      b.getStringAttr(red), ignore);
  set(n, 0, op.getLoss());
  set(n, 1, op.getLogProb());
  return success();
}

LogicalResult Importer::identity(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  set(n, 0, x);
  return success();
}

} // namespace fuyou::import_detail
