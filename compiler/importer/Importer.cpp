// ONNX → fygraph. One handler per ONNX op type, in a table; constant shape
// arithmetic is evaluated here (ConstantFolding) so every shape is static.
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

namespace {

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

OwningOpRef<ModuleOp> Importer::run(std::string &error) {
  OwningOpRef<ModuleOp> owned = ModuleOp::create(loc);
  module = *owned;
  moduleBody = module.getBody();
  for (const auto &t : model.initializers)
    inits[t.name] = &t;

  // The contract: (token ids, target ids), int64 [B, T]; a scalar float loss.
  if (model.inputs.size() != 2) {
    error = "the model must have 2 inputs (token ids, target ids), it has " +
            std::to_string(model.inputs.size());
    return nullptr;
  }
  SmallVector<Type> argTypes;
  for (const auto &vi : model.inputs) {
    if (vi.dtype != DType::I64 || vi.shape.size() != 2 || vi.shape[0] <= 0 || vi.shape[1] <= 0) {
      error = "input '" + vi.name + "' must be int64 [B, T]";
      return nullptr;
    }
    argTypes.push_back(tensorType(vi.shape, b.getI64Type()));
  }
  if (model.inputs[0].shape != model.inputs[1].shape) {
    error = "inputs '" + model.inputs[0].name + "' and '" + model.inputs[1].name +
            "' must have the same shape [B, T]";
    return nullptr;
  }
  const fuyou::onnx_in::ValueInfo *loss = nullptr;
  for (const auto &vi : model.outputs)
    if (vi.dtype == DType::F32 && vi.hasShape && vi.shape.empty()) {
      loss = &vi;
      break;
    }
  if (!loss) {
    error = "the model has no scalar float output to use as the loss";
    return nullptr;
  }
  auto lossType = tensorType({}, b.getF32Type());

  b.setInsertionPointToEnd(moduleBody);
  func = b.create<func::FuncOp>(loc, "forward", b.getFunctionType(argTypes, {lossType}));
  Block *entry = func.addEntryBlock();
  for (size_t i = 0; i < 2; ++i)
    values[model.inputs[i].name] = entry->getArgument(i);
  b.setInsertionPointToEnd(entry);

  for (const Node &n : model.nodes) {
    cur = &n;
    loc = NameLoc::get(b.getStringAttr(n.name.empty() ? n.outputs[0] : n.name));
    if (failed(importNode(n))) {
      error = err.empty() ? n.describe() + ": import failed" : err;
      return nullptr;
    }
  }
  cur = nullptr;
  Value lossValue = get(loss->name);
  if (!lossValue || shapeOf(lossValue).size() != 0) {
    error = err.empty() ? "loss '" + loss->name + "' is not a scalar" : err;
    return nullptr;
  }
  b.create<func::ReturnOp>(loc, lossValue);

  // Drop what the loss does not need (e.g. unused Dropout masks, shape-only
  // values), then the parameters nothing reads.
  IRRewriter rewriter(&ctx);
  (void)runRegionDCE(rewriter, func.getBody());
  llvm::StringSet<> used;
  func.walk([&](fg::GetParamOp op) { used.insert(op.getName()); });
  for (auto &kv : params)
    if (!used.contains(kv.getKey()))
      kv.getValue().erase();
  return owned;
}

LogicalResult Importer::tryFold(const Node &n, bool &folded) {
  folded = false;
  if (n.opType == "Shape") {
    Value v = get(n.inputs[0]);
    if (!v)
      return failure();
    std::vector<int64_t> s(shapeOf(v).begin(), shapeOf(v).end());
    int64_t r = s.size();
    int64_t start = n.intAttr("start", 0), end = n.intAttr("end", r);
    start = std::clamp<int64_t>(start < 0 ? start + r : start, 0, r);
    end = std::clamp<int64_t>(end < 0 ? end + r : end, 0, r);
    std::vector<int64_t> part(s.begin() + start, s.begin() + std::max(start, end));
    consts[n.outputs[0]] = fuyou::onnx_in::makeInts(part, {(int64_t)part.size()});
    folded = true;
    return success();
  }
  if (!fuyou::onnx_in::isFoldable(n.opType))
    return success();
  std::vector<const Tensor *> ins;
  for (const auto &name : n.inputs) {
    if (name.empty()) {
      ins.push_back(nullptr);
      continue;
    }
    const Tensor *t = getConst(name);
    if (!t)
      return success();
    ins.push_back(t);
  }
  const std::string key = foldKey(n);
  if (auto memo = foldMemo.find(key); !key.empty() && memo != foldMemo.end()) {
    for (size_t i = 0; i < n.outputs.size() && i < memo->second.size(); ++i)
      if (!n.outputs[i].empty() && !memo->second[i].empty())
        constAlias[n.outputs[i]] = memo->second[i];
    folded = true;
    return success();
  }
  std::vector<Tensor> outs;
  if (std::string why = fuyou::onnx_in::foldNode(n, ins, outs); !why.empty()) {
    if (handlers().count(n.opType))
      return success();  // leave it to the op's own handler
    return fail(why);
  }
  for (size_t i = 0; i < outs.size() && i < n.outputs.size(); ++i)
    if (!n.outputs[i].empty())
      consts[n.outputs[i]] = std::move(outs[i]);
  if (!key.empty())
    foldMemo[key] = n.outputs;
  folded = true;
  return success();
}

// The op, its attributes and its inputs (as the values they alias): equal
// keys fold to equal values. "" where a key would cost more than it saves
// (a Constant of more than 64 elements).
std::string Importer::foldKey(const Node &n) const {
  std::string key = n.opType;
  for (const auto &[name, a] : n.attrs) {  // (std::map: in name order)
    key += '\x1f' + name + '=' + std::to_string(a.kind) + ':';
    switch (a.kind) {
    case fuyou::onnx_in::Attr::Int: key += std::to_string(a.i); break;
    case fuyou::onnx_in::Attr::Float: key += std::to_string(a.f); break;
    case fuyou::onnx_in::Attr::String: key += a.s; break;
    case fuyou::onnx_in::Attr::Ints: for (int64_t v : a.ints) key += std::to_string(v) + ','; break;
    case fuyou::onnx_in::Attr::Floats: for (float v : a.floats) key += std::to_string(v) + ','; break;
    case fuyou::onnx_in::Attr::TensorValue:
      if (a.t.numel() > 64)
        return "";
      key += std::to_string(a.t.onnxType) + '[';
      for (int64_t d : a.t.shape) key += std::to_string(d) + ',';
      key += ']' + std::string(a.t.bytes.begin(), a.t.bytes.end());
      break;
    default: return "";
    }
  }
  for (const auto &in : n.inputs)
    key += '\x1e' + resolve(in);
  return key;
}

LogicalResult Importer::importNode(const Node &n) {
  if (!n.domain.empty() && n.domain != "ai.onnx")
    return fail("ops of domain '" + n.domain + "' are not supported; supported ops: " +
                fuyou::supportedOnnxOps());
  bool folded;
  if (failed(tryFold(n, folded)))
    return failure();
  if (folded)
    return success();
  auto it = handlers().find(n.opType);
  if (it == handlers().end() && fuyou::onnx_in::isFoldable(n.opType))
    return fail("'" + n.opType + "' is supported on constants only, and an input here is computed");
  if (it == handlers().end())
    return fail("unsupported op type '" + n.opType + "'; supported ops: " +
                fuyou::supportedOnnxOps());
  Block *body = b.getInsertionBlock();
  Operation *last = body->empty() ? nullptr : &body->back();
  if (failed((this->*(it->second))(n)))
    return failure();
  // A node ONNX accepts with operands our op refuses (its verifier says why)
  // is this model's, not a compiler bug: one line naming the node.
  std::string why;
  ScopedDiagnosticHandler capture(&ctx, [&](Diagnostic &d) {
    if (why.empty())
      why = d.str();
    return success();
  });
  for (Operation *op = last ? last->getNextNode() : (body->empty() ? nullptr : &body->front()); op;
       op = op->getNextNode()) {
    // Shapes computed from the model's values (Reshape, Expand, Split
    // sizes) must come out static and non-negative.
    for (Type t : op->getResultTypes())
      if (auto r = dyn_cast<RankedTensorType>(t); r && llvm::any_of(r.getShape(), [](int64_t d) { return d < 0; }))
        return fail("its result would have a negative dim");
    if (failed(mlir::verify(op, /*verifyRecursively=*/false)))
      return fail("not supported with these operands: " + why);
  }
  return success();
}

//===----------------------------------------------------------------------===//
// Handlers
//===----------------------------------------------------------------------===//

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

LogicalResult Importer::gather(const Node &n) {
  Value table = in(n, 0), idx = in(n, 1);
  if (!table || !idx)
    return failure();
  if (!elemOf(table).isF32() || !elemOf(idx).isInteger(64) || shapeOf(table).empty())
    return fail("only float tables with int64 indices are supported");
  const int64_t rank = shapeOf(table).size();
  auto ax = axis(n.intAttr("axis", 0), rank);
  if (failed(ax))
    return failure();
  if (const Tensor *c = getConst(n.inputs[1])) {
    // Constant indices: ONNX counts negative ones from the end; check them now.
    int64_t rows = shapeOf(table)[*ax];
    std::vector<int64_t> v = c->asInts();
    for (int64_t &k : v) {
      if (k < -rows || k >= rows)
        return fail("index " + std::to_string(k) + " is out of range for a dim of " + std::to_string(rows));
      if (k < 0)
        k += rows;
    }
    idx = materialize(fuyou::onnx_in::makeInts(v, c->shape));
  }
  // Another axis than 0 (an activation's): the axis moved to the front, a
  // lookup of rows, and the index dims moved back where the axis was; the
  // gradient follows from those of transpose and gather.
  SmallVector<int64_t> toFront{*ax};
  for (int64_t i = 0; i < rank; ++i)
    if (i != *ax)
      toFront.push_back(i);
  if (*ax != 0) {
    SmallVector<int64_t> shape;
    for (int64_t p : toFront)
      shape.push_back(shapeOf(table)[p]);
    table = b.create<fg::TransposeOp>(loc, tensorType(shape, elemOf(table)), table, toFront);
  }
  SmallVector<int64_t> shape(shapeOf(idx));
  llvm::append_range(shape, shapeOf(table).drop_front());
  Value r = b.create<fg::GatherOp>(loc, tensorType(shape, b.getF32Type()), table, idx);
  const int64_t q = shapeOf(idx).size();
  if (*ax != 0 && q > 0) {
    // [idx dims, dims before the axis, dims after] -> [before, idx, after]
    SmallVector<int64_t> perm, out;
    for (int64_t i = 0; i < *ax; ++i)
      perm.push_back(q + i);
    for (int64_t i = 0; i < q; ++i)
      perm.push_back(i);
    for (int64_t i = q + *ax; i < int64_t(shape.size()); ++i)
      perm.push_back(i);
    for (int64_t p : perm)
      out.push_back(shape[p]);
    r = b.create<fg::TransposeOp>(loc, tensorType(out, b.getF32Type()), r, perm);
  }
  set(n, 0, r);
  return success();
}

// GatherND with constant indices on an activation (torch 2.x writes x[:, idx]
// so, between transposes): the first k dims flattened into rows, each index
// tuple one row number, a gather of rows.
LogicalResult Importer::gatherND(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  const Tensor *ind = n.inputs.size() > 1 ? getConst(n.inputs[1]) : nullptr;
  if (!ind)
    return fail("the indices must be a constant (indices computed at run time are not supported)");
  if (n.intAttr("batch_dims", 0) != 0)
    return fail("batch_dims other than 0 is not supported");
  if (!elemOf(x).isF32())
    return fail("only float data is supported");
  ArrayRef<int64_t> s = shapeOf(x);
  if (ind->shape.empty() || ind->shape.back() < 1 || ind->shape.back() > int64_t(s.size()))
    return fail("index tuples must have 1 to rank(data) entries");
  const int64_t k = ind->shape.back();
  std::vector<int64_t> v = ind->asInts(), rows(v.size() / k);
  int64_t numRows = 1;
  for (int64_t j = 0; j < k; ++j)
    numRows *= s[j];
  for (size_t t = 0; t < rows.size(); ++t) {
    int64_t r = 0;
    for (int64_t j = 0; j < k; ++j) {
      int64_t i = v[t * k + j];
      if (i < -s[j] || i >= s[j])
        return fail("index " + std::to_string(i) + " is out of range for a dim of " + std::to_string(s[j]));
      r = r * s[j] + (i < 0 ? i + s[j] : i);
    }
    rows[t] = r;
  }
  SmallVector<int64_t> tableShape{numRows};
  tableShape.append(s.begin() + k, s.end());
  Value table = reshape(x, tableShape);
  std::vector<int64_t> idxShape(ind->shape.begin(), ind->shape.end() - 1);
  Value idx = materialize(fuyou::onnx_in::makeInts(rows, idxShape));
  SmallVector<int64_t> outShape(idxShape.begin(), idxShape.end());
  outShape.append(s.begin() + k, s.end());
  set(n, 0, b.create<fg::GatherOp>(loc, tensorType(outShape, b.getF32Type()), table, idx));
  return success();
}

LogicalResult Importer::reshapeLike(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  SmallVector<int64_t> s(shapeOf(x));
  int64_t numel = 1;
  for (int64_t d : s)
    numel *= d;
  SmallVector<int64_t> out;
  if (n.opType == "Reshape") {
    auto want = constInts(n, 1, "the shape input");
    if (failed(want))
      return failure();
    bool allowZero = n.intAttr("allowzero", 0);
    int64_t known = 1, infer = -1;
    for (size_t i = 0; i < want->size(); ++i) {
      int64_t d = (*want)[i];
      if (d == 0 && !allowZero) {
        if (i >= s.size())
          return fail("shape entry 0 has no input dim to copy");
        d = s[i];
      }
      if (d == -1) {
        if (infer >= 0)
          return fail("more than one -1 in the shape");
        infer = i;
      } else if (d < 0) {
        return fail("shape entry " + std::to_string(d) + " is negative");
      } else {
        known *= d;
      }
      out.push_back(d);
    }
    if (infer >= 0) {
      if (known == 0 || numel % known)
        return fail("cannot infer the -1 dim");
      out[infer] = numel / known;
    }
  } else if (n.opType == "Flatten") {
    const int64_t rank = s.size(), given = n.intAttr("axis", 1);  // from -rank to rank
    if (given < -rank || given > rank)
      return fail("axis " + std::to_string(given) + " out of range for rank " + std::to_string(rank));
    int64_t a = given < 0 ? given + rank : given, outer = 1, inner = 1;
    for (int64_t i = 0; i < rank; ++i)
      (i < a ? outer : inner) *= s[i];
    out = {outer, inner};
  } else {
    std::vector<int64_t> axes;
    if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
      auto c = constInts(n, 1, "the axes input");
      if (failed(c))
        return failure();
      axes = *c;
    } else if (const auto *a = n.attr("axes")) {
      axes = a->ints;
    }
    if (n.opType == "Unsqueeze") {
      int64_t r = s.size() + axes.size();
      SmallVector<bool> isNew(r, false);
      for (int64_t a : axes) {
        auto na = axis(a, r);
        if (failed(na))
          return failure();
        if (isNew[*na])
          return fail("axis " + std::to_string(a) + " is repeated");
        isNew[*na] = true;
      }
      size_t k = 0;
      for (int64_t i = 0; i < r; ++i)
        out.push_back(isNew[i] ? 1 : s[k++]);
    } else {
      SmallVector<bool> drop(s.size(), axes.empty());
      if (axes.empty())
        for (size_t i = 0; i < s.size(); ++i)
          drop[i] = s[i] == 1;
      for (int64_t a : axes) {
        auto na = axis(a, s.size());
        if (failed(na))
          return failure();
        if (s[*na] != 1)
          return fail("cannot squeeze a dim of size " + std::to_string(s[*na]));
        drop[*na] = true;
      }
      for (size_t i = 0; i < s.size(); ++i)
        if (!drop[i])
          out.push_back(s[i]);
    }
  }
  int64_t outNumel = 1;
  for (int64_t d : out)
    outNumel *= d;
  if (outNumel != numel)
    return fail("reshape changes the element count");
  set(n, 0, reshape(x, out));
  return success();
}

LogicalResult Importer::transpose(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  SmallVector<int64_t> perm;
  if (const auto *a = n.attr("perm"))
    perm.assign(a->ints.begin(), a->ints.end());
  else
    for (int64_t i = s.size() - 1; i >= 0; --i)
      perm.push_back(i);
  if (perm.size() != s.size())
    return fail("perm has the wrong length");
  SmallVector<int64_t> shape;
  for (int64_t p : perm) {
    if (p < 0 || p >= (int64_t)s.size())
      return fail("perm entry out of range");
    shape.push_back(s[p]);
  }
  set(n, 0, b.create<fg::TransposeOp>(loc, tensorType(shape, elemOf(x)), x, perm));
  return success();
}

LogicalResult Importer::concat(const Node &n) {
  SmallVector<Value> ins;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Value v = in(n, i);
    if (!v)
      return failure();
    ins.push_back(v);
  }
  auto ax = axis(n.intAttr("axis", 0), shapeOf(ins[0]).size());
  if (failed(ax))
    return failure();
  SmallVector<int64_t> shape(shapeOf(ins[0]));
  shape[*ax] = 0;
  for (Value v : ins) {
    if (shapeOf(v).size() != shape.size() || elemOf(v) != elemOf(ins[0]))
      return fail("inputs differ in rank or element type");
    shape[*ax] += shapeOf(v)[*ax];
  }
  set(n, 0, b.create<fg::ConcatOp>(loc, tensorType(shape, elemOf(ins[0])), ins, *ax));
  return success();
}

LogicalResult Importer::slice(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  auto starts = constInts(n, 1, "starts"), ends = constInts(n, 2, "ends");
  auto axesIn = constInts(n, 3, "axes"), stepsIn = constInts(n, 4, "steps");
  if (failed(starts) || failed(ends) || failed(axesIn) || failed(stepsIn))
    return failure();
  SmallVector<int64_t> st(s.size(), 0), sp(s.size(), 1), shape(s);
  for (size_t k = 0; k < starts->size(); ++k) {
    int64_t a = axesIn->empty() ? (int64_t)k : (*axesIn)[k];
    auto na = axis(a, s.size());
    if (failed(na))
      return failure();
    int64_t step = stepsIn->empty() ? 1 : (*stepsIn)[k];
    if (step <= 0)
      return fail("only positive Slice steps are supported");
    int64_t dim = s[*na], lo = (*starts)[k], hi = (*ends)[k];
    // ONNX clamps out-of-range bounds (torch writes INT64_MAX for "to the end").
    if (lo < 0) lo += dim;
    if (hi < 0) hi += dim;
    lo = std::clamp<int64_t>(lo, 0, dim);
    hi = std::clamp<int64_t>(hi, 0, dim);
    st[*na] = lo;
    sp[*na] = step;
    shape[*na] = hi > lo ? (hi - lo + step - 1) / step : 0;
  }
  if (ArrayRef<int64_t>(shape) == s) {
    set(n, 0, x);
    return success();
  }
  set(n, 0, b.create<fg::SliceOp>(loc, tensorType(shape, elemOf(x)), x, st, sp));
  return success();
}

LogicalResult Importer::split(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  auto ax = axis(n.intAttr("axis", 0), s.size());
  if (failed(ax))
    return failure();
  std::vector<int64_t> sizes;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    auto c = constInts(n, 1, "the split input");
    if (failed(c))
      return failure();
    sizes = *c;
  } else if (const auto *a = n.attr("split")) {
    sizes = a->ints;
  } else {
    // Before opset 18 the outputs split the dim evenly; from 18 on
    // `num_outputs` gives each ceil(dim / k), the last one what is left.
    int64_t k = n.outputs.size(), dim = s[*ax];
    if (n.attr("num_outputs") && n.intAttr("num_outputs", 0) != k)
      return fail("num_outputs differs from the number of outputs");
    if (model.opset < 18 && dim % k)
      return fail("dim does not split evenly");
    int64_t each = (dim + k - 1) / k;
    for (int64_t i = 0; i < k; ++i)
      sizes.push_back(std::max<int64_t>(0, std::min(each, dim - i * each)));
  }
  if (sizes.size() != n.outputs.size())
    return fail("split sizes and outputs differ in number");
  auto parts = pieces(x, *ax, sizes);
  if (failed(parts))
    return failure();
  for (size_t i = 0; i < parts->size(); ++i)
    set(n, i, (*parts)[i]);
  return success();
}

FailureOr<SmallVector<Value>> Importer::pieces(Value x, int64_t ax, ArrayRef<int64_t> sizes) {
  ArrayRef<int64_t> s = shapeOf(x);
  SmallVector<Value> parts;
  int64_t off = 0;
  for (int64_t size : sizes) {
    if (size < 0 || off + size > s[ax])
      return fail("split sizes do not add up to the dim"), failure();
    SmallVector<int64_t> st(s.size(), 0), sp(s.size(), 1), shape(s);
    st[ax] = off;
    shape[ax] = size;
    off += size;
    parts.push_back(b.create<fg::SliceOp>(loc, tensorType(shape, elemOf(x)), x, st, sp));
  }
  if (off != s[ax])
    return fail("split sizes do not add up to the dim"), failure();
  return parts;
}

LogicalResult Importer::expand(const Node &n) {
  Value x = in(n, 0);
  auto want = constInts(n, 1, "the shape input");
  if (!x || failed(want))
    return failure();
  auto shape = broadcast(shapeOf(x), *want);
  if (failed(shape))
    return failure();
  if (ArrayRef<int64_t>(*shape) == shapeOf(x)) {
    set(n, 0, x);
    return success();
  }
  set(n, 0, b.create<fg::ExpandOp>(loc, tensorType(*shape, elemOf(x)), x));
  return success();
}

// Pad in constant mode with non-negative constant pads: the input between
// constant blocks (HF's labels= loss pads the labels with ignore_index).
LogicalResult Importer::pad(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  std::string mode = n.strAttr("mode", "constant");
  if (mode != "constant")
    return fail("mode '" + mode + "' is not supported (constant)");
  const int64_t rank = shapeOf(x).size();
  auto pads = constInts(n, 1, "the pads input");
  auto axesIn = constInts(n, 3, "the axes input");
  if (failed(pads) || failed(axesIn))
    return failure();
  std::vector<int64_t> axes = *axesIn;
  if (axes.empty())
    for (int64_t i = 0; i < rank; ++i)
      axes.push_back(i);
  if (pads->size() != 2 * axes.size())
    return fail("pads has " + std::to_string(pads->size()) + " entries, expected " +
                std::to_string(2 * axes.size()));
  double value = 0;
  if (n.inputs.size() > 2 && !n.inputs[2].empty()) {
    const Tensor *v = getConst(n.inputs[2]);
    if (!v || v->numel() != 1)
      return fail("the pad value must be a constant scalar");
    if (v->dtype == DType::I64)
      value = double(v->asInts()[0]);
    else
      value = v->asDoubles()[0];
  }
  for (size_t k = 0; k < axes.size(); ++k) {
    auto ax = axis(axes[k], rank);
    if (failed(ax))
      return failure();
    const int64_t before = (*pads)[k], after = (*pads)[k + axes.size()];
    if (before < 0 || after < 0)
      return fail("negative pads (cropping) are not supported");
    SmallVector<Value> parts;
    for (int64_t width : {before, int64_t(-1), after}) {
      if (width == -1) {
        parts.push_back(x);
        continue;
      }
      if (width == 0)
        continue;
      SmallVector<int64_t> shape(shapeOf(x));
      shape[*ax] = width;
      auto type = tensorType(shape, elemOf(x));
      DenseElementsAttr attr =
          elemOf(x).isF32() ? DenseElementsAttr::get(type, float(value))
          : elemOf(x).isInteger(64) ? DenseElementsAttr::get(type, int64_t(value))
                                    : DenseElementsAttr::get(type, value != 0);
      parts.push_back(b.create<fg::ConstantOp>(loc, attr));
    }
    if (parts.size() > 1) {
      SmallVector<int64_t> shape(shapeOf(x));
      shape[*ax] += before + after;
      x = b.create<fg::ConcatOp>(loc, tensorType(shape, elemOf(x)), parts, *ax);
    }
  }
  set(n, 0, x);
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

// Sequences are lists of values while importing: nothing of them reaches
// the graph but the tensors read out of them.
LogicalResult Importer::splitToSequence(const Node &n) {
  Value x = in(n, 0);
  if (!x)
    return failure();
  ArrayRef<int64_t> s = shapeOf(x);
  auto ax = axis(n.intAttr("axis", 0), s.size());
  if (failed(ax))
    return failure();
  std::vector<int64_t> sizes;
  bool keep = n.intAttr("keepdims", 1) != 0;
  if (n.inputs.size() > 1 && !n.inputs[1].empty()) {
    const Tensor *c = getConst(n.inputs[1]);
    if (!c)
      return fail("the split input must be a constant (every shape is static)");
    std::vector<int64_t> v = c->asInts();
    if (c->shape.empty()) {  // a scalar: pieces of that size, the last one smaller
      if (v[0] <= 0)
        return fail("split size " + std::to_string(v[0]) + " is not positive");
      for (int64_t at = 0; at < s[*ax]; at += v[0])
        sizes.push_back(std::min(v[0], s[*ax] - at));
    } else {
      sizes = v;
    }
    keep = true;  // keepdims applies only without a split input
  } else {
    sizes.assign(s[*ax], 1);
  }
  auto parts = pieces(x, *ax, sizes);
  if (failed(parts))
    return failure();
  if (!keep)
    for (Value &part : *parts) {
      SmallVector<int64_t> shape(shapeOf(part));
      shape.erase(shape.begin() + *ax);
      part = reshape(part, shape);
    }
  sequences[n.outputs[0]] = std::move(*parts);
  return success();
}

LogicalResult Importer::sequenceConstruct(const Node &n) {
  SmallVector<Value> parts;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    Value v = in(n, i);
    if (!v)
      return failure();
    parts.push_back(v);
  }
  sequences[n.outputs[0]] = std::move(parts);
  return success();
}

LogicalResult Importer::sequenceAt(const Node &n) {
  auto seq = sequences.find(n.inputs.empty() ? "" : n.inputs[0]);
  if (seq == sequences.end())
    return fail("input 0 is not a sequence made by an earlier node");
  auto pos = constInts(n, 1, "the position");
  if (failed(pos))
    return failure();
  const int64_t size = seq->second.size();
  if (pos->size() != 1 || (*pos)[0] < -size || (*pos)[0] >= size)
    return fail("position out of range for a sequence of " + std::to_string(size));
  set(n, 0, seq->second[(*pos)[0] < 0 ? (*pos)[0] + size : (*pos)[0]]);
  return success();
}

LogicalResult Importer::concatFromSequence(const Node &n) {
  auto seq = sequences.find(n.inputs.empty() ? "" : n.inputs[0]);
  if (seq == sequences.end())
    return fail("input 0 is not a sequence made by an earlier node");
  if (seq->second.empty())
    return fail("the sequence is empty");
  SmallVector<Value> parts(seq->second);
  const int64_t rank = shapeOf(parts[0]).size();
  const bool newAxis = n.intAttr("new_axis", 0) != 0;
  auto ax = axis(n.intAttr("axis", 0), rank + (newAxis ? 1 : 0));
  if (failed(ax))
    return failure();
  SmallVector<int64_t> shape(shapeOf(parts[0]));
  if (newAxis) {
    shape.insert(shape.begin() + *ax, 1);
    for (Value &p : parts) {
      if (shapeOf(p).size() != size_t(rank))
        return fail("sequence elements differ in rank");
      SmallVector<int64_t> ps(shapeOf(p));
      ps.insert(ps.begin() + *ax, 1);
      p = reshape(p, ps);
    }
  }
  shape[*ax] = 0;
  for (Value p : parts) {
    if (shapeOf(p).size() != shape.size() || elemOf(p) != elemOf(parts[0]))
      return fail("sequence elements differ in rank or element type");
    for (size_t d = 0; d < shape.size(); ++d)
      if (int64_t(d) != *ax && shapeOf(p)[d] != shapeOf(parts[0])[d])
        return fail("sequence elements differ in a dim other than the axis");
    shape[*ax] += shapeOf(p)[*ax];
  }
  set(n, 0, parts.size() == 1 ? parts[0]
                              : b.create<fg::ConcatOp>(loc, tensorType(shape, elemOf(parts[0])), parts, *ax)
                                    .getResult());
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

const llvm::StringMap<Handler> &handlers() {
  static const llvm::StringMap<Handler> table = {
      {"Add", &Importer::binary<fg::AddOp>},
      {"Sub", &Importer::binary<fg::SubOp>},
      {"Mul", &Importer::binary<fg::MulOp>},
      {"Div", &Importer::binary<fg::DivOp>},
      {"Pow", &Importer::pow},
      {"Equal", &Importer::binary<fg::EqualOp, true>},
      {"Neg", &Importer::unary<fg::NegOp>},
      {"Sqrt", &Importer::unary<fg::SqrtOp>},
      {"Reciprocal", &Importer::unary<fg::ReciprocalOp>},
      {"Exp", &Importer::unary<fg::ExpOp>},
      {"Tanh", &Importer::unary<fg::TanhOp>},
      {"Erf", &Importer::unary<fg::ErfOp>},
      {"Sigmoid", &Importer::unary<fg::SigmoidOp>},
      {"MatMul", &Importer::matmul},
      {"Gemm", &Importer::gemm},
      {"Gather", &Importer::gather},
      {"Reshape", &Importer::reshapeLike},
      {"Unsqueeze", &Importer::reshapeLike},
      {"Squeeze", &Importer::reshapeLike},
      {"Flatten", &Importer::reshapeLike},
      {"Transpose", &Importer::transpose},
      {"Concat", &Importer::concat},
      {"Slice", &Importer::slice},
      {"Split", &Importer::split},
      {"Expand", &Importer::expand},
      {"Where", &Importer::where},
      {"Cast", &Importer::castOp},
      {"IsNaN", &Importer::isNaN},
      {"Pad", &Importer::pad},
      {"GatherND", &Importer::gatherND},
      {"Not", &Importer::notOp},
      {"CastLike", &Importer::castLike},
      {"Gelu", &Importer::gelu},
      {"SplitToSequence", &Importer::splitToSequence},
      {"SequenceConstruct", &Importer::sequenceConstruct},
      {"SequenceAt", &Importer::sequenceAt},
      {"ConcatFromSequence", &Importer::concatFromSequence},
      {"ReduceSum", &Importer::reduce<fg::ReduceSumOp>},
      {"ReduceMean", &Importer::reduce<fg::ReduceMeanOp>},
      {"LayerNormalization", &Importer::layerNorm},
      {"Softmax", &Importer::softmax},
      {"Dropout", &Importer::dropout},
      {"SoftmaxCrossEntropyLoss", &Importer::sceLoss},
      {"Identity", &Importer::identity},
  };
  return table;
}

} // namespace

namespace fuyou {

std::string supportedOnnxOps() {
  std::vector<std::string> names;
  for (const auto &kv : handlers())
    names.push_back(kv.getKey().str());
  for (const char *extra : {"Constant", "ConstantOfShape", "Range", "Shape"})
    names.push_back(extra);
  for (const char *constantsOnly : {"Greater", "GreaterOrEqual", "Less", "LessOrEqual"})
    names.push_back(std::string(constantsOnly) + " (of constants)");
  llvm::sort(names);
  std::string s;
  for (const auto &n : names)
    s += (s.empty() ? "" : ", ") + n;
  return s;
}

OwningOpRef<ModuleOp> importModel(MLIRContext &ctx, const onnx_in::Model &model,
                                  const onnx_in::NameFilter &freeze, ImportStats &stats,
                                  std::string &error) {
  ctx.loadDialect<fygraph::FyGraphDialect, func::FuncDialect>();
  Importer imp(ctx, model);
  OwningOpRef<ModuleOp> module = imp.run(error);
  if (!module)
    return nullptr;

  // Trainable: float initializers the loss reads, minus --freeze and the
  // model's own "fuyou.frozen" list.
  llvm::StringSet<> frozen;
  if (auto it = model.metadata.find("fuyou.frozen"); it != model.metadata.end()) {
    llvm::SmallVector<llvm::StringRef> names;
    llvm::StringRef(it->second).split(names, ',', -1, false);
    for (auto nm : names)
      frozen.insert(nm.trim());
  }
  for (const auto &name : model.torchBuffers)
    frozen.insert(name);

  for (auto p : module->getOps<fygraph::ParamOp>()) {
    auto type = cast<RankedTensorType>(p.getType());
    // (Every pattern sees every name: one that matches none is refused.)
    const bool byFlag = freeze.matches(p.getSymName().str());
    bool trainable = type.getElementType().isF32() && !frozen.contains(p.getSymName()) && !byFlag;
    p.setTrainable(trainable);
    if (trainable) {
      stats.trainableParams += type.getNumElements();
      stats.trainableTensors++;
    } else {
      stats.frozenTensors++;
    }
  }
  // A graph optimizer that merges initializers with equal bytes (the dynamo
  // exporter's default) leaves one norm weight read by every layer: it
  // would train as one tensor. A shared 1-D parameter is seldom meant.
  std::map<std::string, std::vector<std::string>> readers;
  for (const auto &n : model.nodes)
    for (const auto &i : n.inputs)
      readers[i].push_back(n.name.empty() ? n.opType : n.name);
  // And a file torch.export recorded whose trained initializers are not all
  // its parameters went through such an optimizer (it folds transposes of
  // weights into new constants, too).
  const llvm::StringSet<> torchParams(model.torchParams);
  std::vector<std::string> unrecorded;
  for (auto p : module->getOps<fygraph::ParamOp>())
    if (!torchParams.empty() && p.getTrainable() && !torchParams.contains(p.getSymName()))
      unrecorded.push_back(p.getSymName().str());
  if (!unrecorded.empty())
    stats.warnings.push_back(std::to_string(unrecorded.size()) + " trained initializers ('" + unrecorded[0] +
                             "', ...) are not parameters torch.export recorded: a graph optimizer rewrote the "
                             "weights; export with optimize=False to train the model's own parameters");
  for (auto p : module->getOps<fygraph::ParamOp>()) {
    auto type = cast<RankedTensorType>(p.getType());
    const auto &r = readers[p.getSymName().str()];
    if (p.getTrainable() && type.getRank() == 1 && r.size() > 1)
      stats.warnings.push_back("parameter '" + p.getSymName().str() + "' (" + std::to_string(type.getNumElements()) +
                               " elements) is read by " + std::to_string(r.size()) + " nodes ('" + r[0] + "', '" +
                               r[1] + "', ...) and trains as one tensor; if an exporter merged equal initializers "
                               "(torch.onnx.export's default optimize=True), export with optimize=False");
  }
  return module;
}

} // namespace fuyou
