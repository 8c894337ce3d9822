// ONNX → fygraph. One handler per ONNX op type, in a table; constant shape
// arithmetic is evaluated here (ConstantFolding) so every shape is static.
#include "compiler/importer/ImporterImpl.h"

namespace fuyou::import_detail {

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

} // namespace fuyou::import_detail

using fuyou::import_detail::handlers;
using fuyou::import_detail::Importer;

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
  // model's buffers (torch.export's, and the "fuyou.frozen" list: OnnxModel).
  llvm::StringSet<> frozen;
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
