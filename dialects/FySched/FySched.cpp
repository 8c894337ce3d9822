#include "dialects/FySched/FySchedOps.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "mlir/IR/OpImplementation.h"
#include "llvm/ADT/DenseSet.h"
#include "llvm/ADT/TypeSwitch.h"

#include <cmath>

using namespace mlir;
using namespace fuyou::fysched;

#include "dialects/FySched/FySchedDialect.cpp.inc"

#define GET_TYPEDEF_CLASSES
#include "dialects/FySched/FySchedTypes.cpp.inc"

#define GET_ATTRDEF_CLASSES
#include "dialects/FySched/FySchedAttrs.cpp.inc"

void FySchedDialect::initialize() {
  addTypes<
#define GET_TYPEDEF_LIST
#include "dialects/FySched/FySchedTypes.cpp.inc"
      >();
  addAttributes<
#define GET_ATTRDEF_LIST
#include "dialects/FySched/FySchedAttrs.cpp.inc"
      >();
  addOperations<
#define GET_OP_LIST
#include "dialects/FySched/FySchedOps.cpp.inc"
      >();
}

// The plan's name on the module.
static constexpr llvm::StringLiteral kPlanName = "fysched.plan";

static FloatAttr f64OrNull(MLIRContext *ctx, double v) {
  return std::isnan(v) ? FloatAttr() : FloatAttr::get(Float64Type::get(ctx), v);
}

PlanAttr PlanAttr::decided(MLIRContext *ctx, StringRef activations, StringRef params, StringRef earlyRows,
                           StringRef earlyChunks, int64_t gradLanding, int64_t writeBehind, bool given) {
  return get(ctx, activations, params, earlyRows, earlyChunks, gradLanding, writeBehind, given, 0, FloatAttr(), "",
             FloatAttr(), FloatAttr(), "", "", -1, FloatAttr(), FloatAttr());
}

PlanAttr PlanAttr::withFigures(int64_t evaluated, double predictedStepS, StringRef uniform, double uniformStepS,
                               double lowerBoundS, StringRef profile, StringRef state) const {
  MLIRContext *ctx = getContext();
  return get(ctx, getActivations(), getParams(), getEarlyRows(), getEarlyChunks(), getGradLanding(), getWriteBehind(),
             getGiven(), evaluated, f64OrNull(ctx, predictedStepS), uniform, f64OrNull(ctx, uniformStepS),
             f64OrNull(ctx, lowerBoundS), profile, state, getDeviceGroups(), getDeviceStepS(), getDeviceNoneStepS());
}

PlanAttr PlanAttr::withDevice(int64_t groups, double stepS, double noneStepS) const {
  MLIRContext *ctx = getContext();
  return get(ctx, getActivations(), getParams(), getEarlyRows(), getEarlyChunks(), getGradLanding(), getWriteBehind(),
             getGiven(), getEvaluated(), getPredictedStepS(), getUniform(), getUniformStepS(), getLowerBoundS(),
             getProfile(), getState(), groups, f64OrNull(ctx, stepS), f64OrNull(ctx, noneStepS));
}

PlanAttr PlanAttr::withEarly(StringRef earlyRows, StringRef earlyChunks) const {
  return get(getContext(), getActivations(), getParams(), earlyRows, earlyChunks, getGradLanding(), getWriteBehind(),
             getGiven(), getEvaluated(), getPredictedStepS(), getUniform(), getUniformStepS(), getLowerBoundS(),
             getProfile(), getState(), getDeviceGroups(), getDeviceStepS(), getDeviceNoneStepS());
}

PlanAttr PlanAttr::of(Operation *module) { return module->getAttrOfType<PlanAttr>(kPlanName); }

void PlanAttr::setOn(Operation *module) const { module->setAttr(kPlanName, *this); }

void PlanAttr::removeFrom(Operation *module) { module->removeAttr(kPlanName); }

static bool isSpace(StringRef s) { return s == "device" || s == "host" || s == "ssd"; }

LogicalResult BufferType::verify(function_ref<InFlightDiagnostic()> emitError, StringRef space,
                                 RankedTensorType type) {
  if (!isSpace(space))
    return emitError() << "unknown memory space '" << space << "' (device, host, ssd)";
  if (!type || !type.hasStaticShape())
    return emitError() << "buffers hold statically shaped tensors";
  return success();
}

// !fysched.buffer<space, tensor<...>>
Type BufferType::parse(AsmParser &p) {
  std::string space;
  RankedTensorType type;
  if (p.parseLess() || p.parseKeywordOrString(&space) || p.parseComma() || p.parseType(type) ||
      p.parseGreater())
    return {};
  return getChecked([&] { return p.emitError(p.getNameLoc()); }, p.getContext(), space, type);
}

void BufferType::print(AsmPrinter &p) const {
  p << "<" << getSpace() << ", " << getTensorType() << ">";
}

LogicalResult ConstantOp::verify() {
  auto t = cast<BufferType>(getType());
  if (getValue().getType() != t.getTensorType())
    return emitOpError("value type differs from the buffer's tensor type");
  return success();
}

LogicalResult ViewOp::verify() {
  auto s = cast<BufferType>(getSource().getType()), r = cast<BufferType>(getType());
  if (s.getSpace() != r.getSpace() || s.getElementType() != r.getElementType() ||
      s.getNumElements() != r.getNumElements())
    return emitOpError("a view keeps the memory space, element type and element count");
  return success();
}

LogicalResult LaunchOp::verify() {
  if (getOuts().empty())
    return emitOpError("a kernel writes at least one buffer");
  for (Value v : getOuts())
    if (llvm::is_contained(getIns(), v))
      return emitOpError("a buffer is both read and written; kernels do not work in place");
  return success();
}

LogicalResult CopyOp::verify() {
  auto s = cast<BufferType>(getSource().getType()), t = cast<BufferType>(getTarget().getType());
  if (s.getNumElements() != t.getNumElements() || s.getElementType() != t.getElementType())
    return emitOpError("source and target differ in element count or type");
  if (getToken()) {
    bool hd = (s.getSpace() == "host" && t.getSpace() == "device") || (s.getSpace() == "device" && t.getSpace() == "host");
    if (!hd && !(s.getSpace() == "host" && t.getSpace() == "ssd"))
      return emitOpError("only a copy between host and device, or from host to SSD, runs asynchronously, not ")
             << s.getSpace() << " to " << t.getSpace();
    if (!getToken().hasOneUse() || !isa<WaitOp>(*getToken().getUsers().begin()))
      return emitOpError("an asynchronous copy's token has one use, a fysched.wait");
  }
  return success();
}

LogicalResult GroupOp::verify() {
  if (getParams().empty())
    return emitOpError("a group holds at least one parameter");
  llvm::SmallDenseSet<Attribute> seen;
  for (Attribute a : getParams()) {
    if (!isa<FlatSymbolRefAttr>(a))
      return emitOpError("params must be symbol references");
    if (!seen.insert(a).second)
      return emitOpError("names parameter ") << a << " twice";
  }
  if (getBytes() <= 0)
    return emitOpError("bytes must be positive");
  return success();
}

// A group_adamw follows its group's gradients out and its state in: one
// grad_offload and at most one state_read of the same group (none when the
// program leaves the read to the update).
LogicalResult GroupAdamWOp::verify() {
  int offloads = 0, reads = 0;
  for (Value dep : getDeps()) {
    Operation *def = dep.getDefiningOp();
    auto offload = dyn_cast_or_null<GradOffloadOp>(def);
    auto read = dyn_cast_or_null<StateReadOp>(def);
    if (!offload && !read)
      return emitOpError("depends only on a grad_offload and a state_read");
    StringRef group = offload ? offload.getGroup() : read.getGroup();
    if (group != getGroup())
      return emitOpError("of @") << getGroup() << " depends on an op of @" << group;
    (offload ? offloads : reads) += 1;
  }
  if (offloads != 1 || reads > 1)
    return emitOpError("needs one grad_offload and at most one state_read, got ")
           << offloads << " and " << reads;
  return success();
}

LogicalResult StateWriteOp::verify() {
  auto update = getUpdate().getDefiningOp<GroupAdamWOp>();
  if (!update)
    return emitOpError("writes back after a group_adamw");
  if (update.getGroup() != getGroup())
    return emitOpError("of @") << getGroup() << " follows the group_adamw of @" << update.getGroup();
  return success();
}

// A parameter named by a wait must be one of its group's.
// Checked with the module's symbol table (SymbolUserOpInterface), built once
// for all of them rather than searched again for each.
static LogicalResult verifyMember(SymbolTableCollection &symbols, Operation *op, FlatSymbolRefAttr groupRef,
                                  StringRef param) {
  auto group = symbols.lookupNearestSymbolFrom<GroupOp>(op, groupRef);
  if (!group)
    return success();  // a lone op (tests of the op itself); the passes look it up
  for (Attribute p : group.getParams())
    if (cast<FlatSymbolRefAttr>(p).getValue() == param)
      return success();
  return op->emitOpError("@") << param << " is not a parameter of " << groupRef;
}

LogicalResult GroupWaitOp::verifySymbolUses(SymbolTableCollection &symbols) {
  if (!getParam())
    return success();
  return verifyMember(symbols, *this, getGroupAttr(), *getParam());
}

LogicalResult GroupWaitRowsOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyMember(symbols, *this, getGroupAttr(), getParam());
}

LogicalResult GradOffloadEarlyOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyMember(symbols, *this, getGroupAttr(), getParam());
}

LogicalResult EarlyReleaseOp::verifySymbolUses(SymbolTableCollection &symbols) {
  return verifyMember(symbols, *this, getGroupAttr(), getParam());
}

LogicalResult GroupWaitRowsOp::verify() {
  if (!cast<BufferType>(getIds().getType()).getTensorType().getElementType().isInteger(64))
    return emitOpError("ids must be i64");
  return success();
}

LogicalResult GradOffloadEarlyOp::verify() {
  if (!cast<BufferType>(getIds().getType()).getTensorType().getElementType().isInteger(64))
    return emitOpError("ids must be i64");
  auto grad = cast<BufferType>(getGrad().getType()).getTensorType();
  if (grad.getRank() != 2 || !grad.getElementType().isF32())
    return emitOpError("grad must be a 2-D f32 table");
  // A held table is written only after its release: without one, never.
  if (getHeld() && !llvm::any_of(getOperation()->getBlock()->getOps<EarlyReleaseOp>(), [&](EarlyReleaseOp r) {
        return r.getGroup() == getGroup() && r.getParam() == getParam() && (*this)->isBeforeInBlock(r);
      }))
    return emitOpError("is held, but no fysched.early_release of @") << getParam() << " follows it";
  return success();
}

LogicalResult EarlyReleaseOp::verify() {
  if (!llvm::any_of(getOperation()->getBlock()->getOps<GradOffloadEarlyOp>(), [&](GradOffloadEarlyOp e) {
        return e.getHeld() && e.getGroup() == getGroup() && e.getParam() == getParam() && e->isBeforeInBlock(*this);
      }))
    return emitOpError("releases @") << getParam() << ", which no held fysched.grad_offload_early before it hands over";
  return success();
}

LogicalResult GradLandedOp::verify() {
  auto off = getToken().getDefiningOp<GradOffloadOp>();
  if (!off || off.getGroup() != getGroup())
    return emitOpError("takes a token of @") << getGroup() << "'s fysched.grad_offload";
  if (off->getBlock() != getOperation()->getBlock() || !off->isBeforeInBlock(*this))
    return emitOpError("must follow its grad_offload in the same block");
  if (llvm::any_of(getToken().getUsers(),
                   [&](Operation *u) {
                     return isa<GradLandedOp>(u) && u->getBlock() == getOperation()->getBlock() &&
                            u->isBeforeInBlock(getOperation());
                   }))
    return emitOpError("frees @") << getGroup() << "'s gradients twice: one fysched.grad_landed a grad_offload";
  return success();
}

#define GET_OP_CLASSES
#include "dialects/FySched/FySchedOps.cpp.inc"
