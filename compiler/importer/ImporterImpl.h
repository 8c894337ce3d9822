// The importer's own declarations, shared by its files (Importer.cpp: the
// walk over the graph and the handler table; ImportShapes.cpp and
// ImportMath.cpp: the handlers). Not for use outside compiler/importer.
#ifndef FUYOU_COMPILER_IMPORTER_IMPORTERIMPL_H
#define FUYOU_COMPILER_IMPORTER_IMPORTERIMPL_H

#include "compiler/importer/Importer.h"

#include "compiler/importer/ConstantFolding.h"
#include "dialects/FyGraph/FyGraphOps.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/Traits.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinAttributes.h"
#include "mlir/IR/PatternMatch.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Transforms/RegionUtils.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <map>

using namespace mlir;
namespace fg = fuyou::fygraph;
using fuyou::onnx_in::DType;
using fuyou::onnx_in::Node;
using fuyou::onnx_in::Tensor;

namespace fuyou::import_detail {

class Importer;
using Handler = LogicalResult (Importer::*)(const Node &);
const llvm::StringMap<Handler> &handlers();

class Importer {
public:
  Importer(MLIRContext &ctx, const fuyou::onnx_in::Model &model)
      : ctx(ctx), model(model), b(&ctx), loc(UnknownLoc::get(&ctx)) {}

  OwningOpRef<ModuleOp> run(std::string &error);

  // Handlers, one per ONNX op (or family).
  template <typename OpT, bool isCompare = false> LogicalResult binary(const Node &n);
  template <typename OpT> LogicalResult unary(const Node &n);
  LogicalResult matmul(const Node &n);
  LogicalResult gemm(const Node &n);
  LogicalResult gather(const Node &n);
  LogicalResult reshapeLike(const Node &n);
  LogicalResult transpose(const Node &n);
  LogicalResult concat(const Node &n);
  LogicalResult slice(const Node &n);
  LogicalResult split(const Node &n);
  // `x` cut along `axis` into pieces of `sizes`, which must add up to the dim.
  FailureOr<SmallVector<Value>> pieces(Value x, int64_t axis, ArrayRef<int64_t> sizes);
  LogicalResult expand(const Node &n);
  LogicalResult where(const Node &n);
  LogicalResult castOp(const Node &n);
  LogicalResult castLike(const Node &n);
  LogicalResult pow(const Node &n);
  LogicalResult isNaN(const Node &n);
  LogicalResult pad(const Node &n);
  LogicalResult gatherND(const Node &n);
  LogicalResult notOp(const Node &n);
  LogicalResult gelu(const Node &n);
  LogicalResult splitToSequence(const Node &n);
  LogicalResult sequenceConstruct(const Node &n);
  LogicalResult sequenceAt(const Node &n);
  LogicalResult concatFromSequence(const Node &n);
  template <typename OpT> LogicalResult reduce(const Node &n);
  LogicalResult layerNorm(const Node &n);
  LogicalResult softmax(const Node &n);
  LogicalResult dropout(const Node &n);
  LogicalResult sceLoss(const Node &n);
  LogicalResult identity(const Node &n);

private:
  MLIRContext &ctx;
  const fuyou::onnx_in::Model &model;
  OpBuilder b;
  Location loc;
  ModuleOp module;
  Block *moduleBody = nullptr;
  func::FuncOp func;
  llvm::StringMap<Value> values;
  std::map<std::string, Tensor> consts;
  // A folded value equal to an earlier one (the same op on the same inputs:
  // an exporter repeats a layer's mask arithmetic in every layer) names it,
  // instead of holding another copy.
  std::map<std::string, std::string> constAlias;
  std::map<std::string, std::vector<std::string>> foldMemo;  // foldKey -> its outputs
  const std::string &resolve(const std::string &name) const {
    auto it = constAlias.find(name);
    return it == constAlias.end() ? name : it->second;
  }
  std::string foldKey(const Node &n) const;
  std::map<std::string, const Tensor *> inits;
  llvm::StringMap<fg::ParamOp> params;
  // ONNX sequences (of tensors with static shapes): their elements, in order.
  llvm::StringMap<SmallVector<Value>> sequences;
  // Bool values known as the negation of another (IsNaN(x) is not
  // Equal(x, x)): a Where on one swaps its branches, a Not takes it back.
  llvm::StringMap<Value> negations;
  const Node *cur = nullptr;
  std::string err;

  LogicalResult fail(const std::string &msg) {
    if (err.empty())
      err = (cur ? cur->describe() + ": " : std::string()) + msg;
    return failure();
  }

  Type elemType(DType t) {
    switch (t) {
    case DType::F32: return b.getF32Type();
    case DType::I64: return b.getI64Type();
    case DType::Bool: return b.getI1Type();
    default: return nullptr;
    }
  }
  RankedTensorType tensorType(ArrayRef<int64_t> shape, Type elem) {
    return RankedTensorType::get(shape, elem);
  }
  static ArrayRef<int64_t> shapeOf(Value v) { return cast<RankedTensorType>(v.getType()).getShape(); }
  static Type elemOf(Value v) { return cast<RankedTensorType>(v.getType()).getElementType(); }

  const Tensor *getConst(const std::string &alias) {
    const std::string &name = resolve(alias);
    if (auto it = consts.find(name); it != consts.end())
      return &it->second;
    if (auto it = inits.find(name); it != inits.end() && isFoldableInit(*it->second))
      return it->second;
    return nullptr;
  }
  // Initializers that are values of the graph rather than weights: small
  // int64 ones (shape arithmetic), and the buffers torch.export recorded
  // (masks, RoPE frequencies, positions) up to a size worth folding.
  bool isFoldableInit(const Tensor &t) {
    if (!t.loaded)
      return false;
    if (t.dtype == DType::I64 && t.numel() <= 8)
      return true;
    return t.dtype != DType::Unsupported && t.numel() <= (int64_t(1) << 24) &&
           model.isTorchBuffer(t.name);
  }

  Value materialize(const Tensor &t) {
    Type elem = elemType(t.dtype);
    auto type = tensorType(t.shape, elem);
    DenseElementsAttr attr;
    if (t.dtype == DType::F32) {
      std::vector<float> v(t.numel());
      std::memcpy(v.data(), t.bytes.data(), v.size() * 4);
      attr = DenseElementsAttr::get(type, ArrayRef<float>(v));
    } else if (t.dtype == DType::I64) {
      std::vector<int64_t> v = t.asInts();
      attr = DenseElementsAttr::get(type, ArrayRef<int64_t>(v));
    } else {
      std::vector<int64_t> iv = t.asInts();
      SmallVector<bool> v(iv.begin(), iv.end());
      attr = DenseElementsAttr::get(type, ArrayRef<bool>(v));
    }
    return b.create<fg::ConstantOp>(loc, attr);
  }

  // The SSA value of an ONNX name: computed, a folded constant, or a parameter.
  Value get(const std::string &name) {
    if (auto it = values.find(name); it != values.end())
      return it->second;
    if (auto it = constAlias.find(name); it != constAlias.end()) {
      Value v = get(it->second);
      return v ? values[name] = v : v;
    }
    if (const Tensor *t = getConst(name))
      return values[name] = materialize(*t);
    if (auto it = inits.find(name); it != inits.end()) {
      const Tensor &t = *it->second;
      Type elem = elemType(t.dtype);
      if (!elem)
        return fail("initializer '" + name + "' has unsupported element type " +
                    fuyou::onnx_in::onnxTypeName(t.onnxType)),
               Value();
      auto type = tensorType(t.shape, elem);
      if (!params.count(name)) {
        OpBuilder::InsertionGuard g(b);
        b.setInsertionPoint(func);
        params[name] = b.create<fg::ParamOp>(loc, name, type, /*trainable=*/false);
      }
      return values[name] = b.create<fg::GetParamOp>(loc, type, FlatSymbolRefAttr::get(&ctx, name));
    }
    if (negations.count(name))
      fail("input '" + name + "' (an IsNaN or Not) is supported only as a Where condition or under Not");
    else
      fail("input '" + name + "' is not produced by any earlier node");
    return Value();
  }
  Value in(const Node &n, size_t i) {
    if (i >= n.inputs.size() || n.inputs[i].empty())
      return fail("missing input " + std::to_string(i)), Value();
    return get(n.inputs[i]);
  }
  void set(const Node &n, size_t i, Value v) {
    if (i < n.outputs.size() && !n.outputs[i].empty())
      values[n.outputs[i]] = v;
  }
  FailureOr<std::vector<int64_t>> constInts(const Node &n, size_t i, const char *what) {
    if (i >= n.inputs.size() || n.inputs[i].empty())
      return std::vector<int64_t>();
    const Tensor *t = getConst(n.inputs[i]);
    if (!t) {
      fail(std::string(what) + " must be a constant (every shape is static)");
      return failure();
    }
    return t->asInts();
  }
  FailureOr<int64_t> axis(int64_t a, int64_t rank) {
    int64_t x = a < 0 ? a + rank : a;
    if (x < 0 || x >= rank) {
      fail("axis " + std::to_string(a) + " out of range for rank " + std::to_string(rank));
      return failure();
    }
    return x;
  }
  Value reshape(Value v, ArrayRef<int64_t> shape) {
    if (shapeOf(v) == shape)
      return v;
    return b.create<fg::ReshapeOp>(loc, tensorType(shape, elemOf(v)), v);
  }
  Value scalarF32(float x) {
    auto type = tensorType({}, b.getF32Type());
    return b.create<fg::ConstantOp>(loc, DenseElementsAttr::get(type, ArrayRef<float>(x)));
  }
  FailureOr<SmallVector<int64_t>> broadcast(ArrayRef<int64_t> a, ArrayRef<int64_t> c) {
    SmallVector<int64_t> out;
    if (!OpTrait::util::getBroadcastedShape(a, c, out)) {
      fail("shapes do not broadcast");
      return failure();
    }
    return out;
  }
  LogicalResult importNode(const Node &n);
  LogicalResult tryFold(const Node &n, bool &folded);
};

template <typename OpT, bool isCompare>
LogicalResult Importer::binary(const Node &n) {
  Value l = in(n, 0), r = in(n, 1);
  if (!l || !r)
    return failure();
  if (elemOf(l) != elemOf(r))
    return fail("operand element types differ");
  if (!isCompare && !elemOf(l).isF32())
    return fail("only float32 arithmetic is supported at run time");
  auto shape = broadcast(shapeOf(l), shapeOf(r));
  if (failed(shape))
    return failure();
  Type elem = isCompare ? b.getI1Type() : elemOf(l);
  set(n, 0, b.create<OpT>(loc, tensorType(*shape, elem), l, r));
  return success();
}

template <typename OpT> LogicalResult Importer::unary(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  if (!elemOf(x).isF32())
    return fail("expects a float32 input");
  set(n, 0, b.create<OpT>(loc, x));
  return success();
}

template <typename OpT> LogicalResult Importer::reduce(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  std::vector<int64_t> axes;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto c = constInts(n, 1, "the axes input");
    if (failed(c))
      return failure();
    axes = *c;
  } else if (const auto *a = n.attr("axes")) {
    axes = a->ints;
  }
  int64_t rank = shapeOf(x).size();
  if (axes.empty()) {
    if (n.intAttr("noop_with_empty_axes", 0)) {
      set(n, 0, x);
      return success();
    }
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  }
  bool keep = n.intAttr("keepdims", 1);
  SmallVector<bool> red(rank, false);
  for (int64_t a : axes) {
    auto na = axis(a, rank);
    if (failed(na))
      return failure();
    red[*na] = true;
  }
  SmallVector<int64_t> shape;
  for (int64_t i = 0; i < rank; ++i)
    if (!red[i])
      shape.push_back(shapeOf(x)[i]);
    else if (keep)
      shape.push_back(1);
  set(n, 0, b.create<OpT>(loc, tensorType(shape, elemOf(x)), x, axes, keep));
  return success();
}

} // namespace fuyou::import_detail

#endif
