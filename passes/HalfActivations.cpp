// fy-half-activations: activations and their gradients in 16 bits, as
// autocast keeps them (Passes.td says which buffers stay fp32, and why).
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "runtime/abi/sizes.h"
#include "llvm/ADT/DenseSet.h"

#include <limits>

namespace fuyou {
#define GEN_PASS_DEF_HALFACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

// Outputs a kernel writes in fp32 whatever the activations are.
bool keepsF32(StringRef kernel, unsigned out) {
  if (kernel == "layer_norm" || kernel == "layer_norm_nobias")
    return out == 1 || out == 2;  // mean, inv_std
  if (kernel == "rms_norm" || kernel == "attention" || kernel == "attention_qkv")
    return out == 1;  // inv_rms, lse
  if (kernel == "softmax_cross_entropy" || kernel == "loss_scale")
    return true;
  if (kernel == "linear_cross_entropy")
    return out == 0 || out == 3;  // the loss, the block of logits it works in (halfLogitsBlock)
  return false;
}

// Kernels that only move elements, which take 16-bit operands as they are
// when every float operand has one dtype.
bool movesOnly(StringRef kernel) {
  return kernel == "transpose" || kernel == "slice" || kernel == "slice_grad" || kernel == "concat" ||
         kernel == "broadcast_to" || kernel == "cast";
}

bool is16(Type t) {
  auto e = cast<fs::BufferType>(t).getElementType();
  return e.isBF16() || e.isF16();
}

// The buffer type t with elements of type `elem`.
fs::BufferType withElement(Type t, Type elem) {
  auto b = cast<fs::BufferType>(t);
  return fs::BufferType::get(b.getContext(), b.getSpace(), RankedTensorType::get(b.getShape(), elem));
}
fs::BufferType asF32(Type t) { return withElement(t, Float32Type::get(t.getContext())); }

// The kernels compute in fp32: a launch with 16-bit operands reads an fp32
// copy of each, made just before it, and writes an fp32 result narrowed
// just after ("cast" launches), so the memory plan counts the copies, alive
// for that launch alone, and the cost model their traffic.
void widenAround(fs::LaunchOp launch, ArrayRef<std::string> native) {
  SmallVector<Value> floats;
  for (Value v : launch->getOperands())
    if (auto b = dyn_cast<fs::BufferType>(v.getType()); b && isa<FloatType>(b.getElementType()))
      floats.push_back(v);
  if (llvm::none_of(floats, [](Value v) { return is16(v.getType()); }) ||
      llvm::is_contained(native, launch.getKernel().str()))
    return;
  auto elem = [](Value v) { return cast<fs::BufferType>(v.getType()).getElementType(); };
  if (movesOnly(launch.getKernel()) && llvm::all_of(floats, [&](Value v) { return elem(v) == elem(floats.front()); }))
    return;
  OpBuilder b(launch);
  Location loc = launch.getLoc();
  auto widen = [&](Value v) {
    Value wide = b.create<fs::AllocOp>(loc, asF32(v.getType()), IntegerAttr());
    b.create<fs::LaunchOp>(loc, "cast", ValueRange{v}, ValueRange{wide}, b.getArrayAttr({}));
    return wide;
  };
  DenseMap<Value, Value> widened;
  for (OpOperand &in : launch.getInsMutable())
    if (is16(in.get().getType())) {
      auto [it, fresh] = widened.try_emplace(in.get(), Value());
      if (fresh)
        it->second = widen(in.get());
      in.set(it->second);
    }
  b.setInsertionPointAfter(launch);
  for (OpOperand &out : launch.getOutsMutable())
    if (is16(out.get().getType())) {
      Value narrow = out.get();
      OpBuilder before(launch);
      Value wide = before.create<fs::AllocOp>(loc, asF32(narrow.getType()), IntegerAttr());
      out.set(wide);
      b.create<fs::LaunchOp>(loc, "cast", ValueRange{wide}, ValueRange{narrow}, b.getArrayAttr({}));
    }
}

// A buffer and the views of it.
struct Storage {
  SmallVector<Value> values;
};

bool isProduct(fs::LaunchOp l) { return l.getKernel() == "matmul" || l.getKernel() == "matmul_bias"; }

// Whether a product's fp32 operands (a and b) are rounded whole into the
// CUDA matmul's scratch: only then does a 16-bit copy in their place leave
// its path, and so its arithmetic, as it was.
bool roundsWhole(fs::LaunchOp product) {
  auto f32 = [&](unsigned i) -> size_t {
    auto t = cast<fs::BufferType>(product.getIns()[i].getType());
    return t.getElementType().isF32() ? size_t(t.getNumElements()) : 0;
  };
  return fy::cuda::matmul_copies_fit(f32(0), f32(1));
}

// An fp32 buffer that two or more products read one after another (an
// activation's gradient: the input's and the weight's products) as operands
// they round whole would be rounded to 16 bits by each in turn. One copy is
// what they read instead: the same values (both round to nearest even),
// read and narrowed once. A reduce_sum of the buffer that runs before the
// products (a bias's gradient) makes the copy as it reads it
// (reduce_sum_cast); else a cast right before the first product does. The
// copy lives from there to the last product; other readers (the residual's
// add) keep the fp32 buffer. Where the products are its only readers, it
// was kept fp32 only for going straight on (`narrowable`), and its writer
// stores 16 bits itself (a kernel in `native` narrows as it stores, to
// nearest even; not a product, whose algorithm may change with its
// result's format), the buffer itself becomes 16-bit instead: the same
// values again, without the fp32 store or the copy.
void copyForProducts(const Storage &s, Type half, ArrayRef<std::string> native, bool narrowable) {
  SmallVector<OpOperand *> reads;
  fs::LaunchOp writer, sum;
  bool others = false;
  for (Value v : s.values)
    for (OpOperand &use : v.getUses()) {
      auto launch = dyn_cast<fs::LaunchOp>(use.getOwner());
      if (!launch)
        continue;
      if (llvm::is_contained(launch.getOuts(), v)) {
        if (writer && writer != launch)
          return;  // written piece by piece: no one point where it is whole
        writer = launch;
      } else if (isProduct(launch) && use.getOperandNumber() < 2) {  // a or b, not matmul_bias's bias
        if (!roundsWhole(launch))
          return;
        reads.push_back(&use);
      } else if (launch.getKernel() == "reduce_sum" && launch.getIns().size() == 1 &&
                 (!sum || (launch->getBlock() == sum->getBlock() && launch->isBeforeInBlock(sum)))) {
        others |= bool(sum);
        sum = launch;
      } else {
        others = true;
      }
    }
  Value whole = s.values.front();
  Block *block = whole.getParentBlock();
  if (!writer || writer->getBlock() != block ||
      llvm::any_of(reads, [&](OpOperand *u) { return u->getOwner()->getBlock() != block; }))
    return;
  llvm::SmallPtrSet<Operation *, 4> products;
  for (OpOperand *u : reads)
    products.insert(u->getOwner());
  if (products.size() < 2)
    return;
  auto before = [](Operation *a, Operation *b) { return a->isBeforeInBlock(b); };
  Operation *first = *llvm::min_element(products, before), *last = *llvm::max_element(products, before);
  if (!writer->isBeforeInBlock(first))
    return;
  for (Operation *op = first; op != last; op = op->getNextNode())
    if (isa<fs::LaunchOp>(op) && !products.contains(op))
      return;
  if (narrowable && !sum && !others && !isProduct(writer) && llvm::is_contained(native, writer.getKernel().str())) {
    for (Value v : s.values)
      v.setType(withElement(v.getType(), half));
    return;
  }
  if (sum && (sum->getBlock() != block || !writer->isBeforeInBlock(sum) || !sum->isBeforeInBlock(first)))
    sum = nullptr;
  OpBuilder b(sum ? sum.getOperation() : first);
  Location loc = first->getLoc();
  Value source = sum ? sum.getIns()[0] : whole;
  Value copy = b.create<fs::AllocOp>(loc, withElement(source.getType(), half), IntegerAttr());
  if (sum) {
    b.create<fs::LaunchOp>(sum.getLoc(), "reduce_sum_cast", ValueRange{source},
                           ValueRange{sum.getOuts()[0], copy}, sum.getArgs());
    sum.erase();
  } else {
    b.create<fs::LaunchOp>(loc, "cast", ValueRange{source}, ValueRange{copy}, b.getArrayAttr({}));
  }
  b.setInsertionPoint(first);
  DenseMap<Type, Value> views{{copy.getType(), copy}};
  for (OpOperand *u : reads) {
    Type t = withElement(u->get().getType(), half);
    Value &c = views[t];
    if (!c)
      c = b.create<fs::ViewOp>(loc, t, copy);
    u->set(c);
  }
}

// A loss kernel of the target that takes its block of logits in 16 bits
// holds them as autocast's logits are (its statistics and loss stay fp32),
// and then their gradient in their place, which its products would round to
// 16 bits anyway: a block of 2-byte elements, with as many more rows as the
// same bytes hold.
void halfLogitsBlock(fs::LaunchOp lce, Type half) {
  auto alloc = lce.getOuts()[3].getDefiningOp<fs::AllocOp>();
  if (!alloc || !alloc->hasOneUse())
    return;
  auto w = cast<fs::BufferType>(lce.getIns()[1].getType()).getTensorType();
  const int64_t V = w.getDimSize(0);
  const int64_t N = cast<fs::BufferType>(lce.getIns()[2].getType()).getTensorType().getNumElements();
  auto t = cast<fs::BufferType>(alloc.getType());
  auto block = RankedTensorType::get({fy::linear_cross_entropy_rows(N, V, 2), V}, half);
  OpBuilder b(alloc);
  Value h = b.create<fs::AllocOp>(alloc.getLoc(), fs::BufferType::get(t.getContext(), t.getSpace(), block),
                                  alloc.getOffsetAttr());
  lce.getOutsMutable()[3].set(h);
  alloc.erase();
}

struct HalfActivations : fuyou::impl::HalfActivationsBase<HalfActivations> {
  using HalfActivationsBase::HalfActivationsBase;

  void runOnOperation() override {
    MLIRContext *ctx = &getContext();
    Type half;
    if (dtype == "bf16")
      half = BFloat16Type::get(ctx);
    else if (dtype == "fp16")
      half = Float16Type::get(ctx);
    else {
      getOperation().emitError() << "fy-half-activations: dtype must be bf16 or fp16, got '" << dtype << "'";
      return signalPassFailure();
    }
    getOperation().walk([&](func::FuncOp f) { run(f, half); });
  }

  void run(func::FuncOp f, Type half) {
    if (llvm::is_contained(native, std::string("linear_cross_entropy"))) {
      SmallVector<fs::LaunchOp> losses;
      f.walk([&](fs::LaunchOp l) {
        if (l.getKernel() == "linear_cross_entropy" && l.getIns().size() == 3 && l.getOuts().size() == 4)
          losses.push_back(l);
      });
      for (fs::LaunchOp l : losses)
        halfLogitsBlock(l, half);
    }
    std::vector<Storage> storages;
    DenseMap<Value, size_t> storageOf;
    f.walk([&](fs::AllocOp a) {
      auto t = cast<fs::BufferType>(a.getType());
      if (!t.getElementType().isF32() || t.getNumElements() <= 1)
        return;
      Storage s{{a.getResult()}};
      for (size_t i = 0; i < s.values.size(); ++i)
        for (Operation *user : s.values[i].getUsers())
          if (auto v = dyn_cast<fs::ViewOp>(user))
            s.values.push_back(v.getResult());
      for (Value v : s.values)
        storageOf[v] = storages.size();
      storages.push_back(std::move(s));
    });

    DenseMap<Operation *, int64_t> position;
    f.walk([&](fs::LaunchOp l) { position[l] = int64_t(position.size()); });

    // Kept fp32: by the kernel that writes it, read outside a launch, or
    // handed straight from one launch to the next (no launch that leaves it
    // alone runs while it lives): stored in 16 bits it would only add its
    // fp32 copies to the peak.
    std::vector<bool> keep(storages.size(), false);
    std::vector<bool> mustF32(storages.size(), false);  // kept for a reason other than going straight on
    SmallVector<size_t> leaves;
    for (auto [i, s] : llvm::enumerate(storages)) {
      llvm::SmallDenseSet<Operation *, 8> touching;
      for (Value v : s.values)
        for (OpOperand &use : v.getUses()) {
          Operation *user = use.getOwner();
          if (isa<fs::ViewOp>(user))
            continue;
          auto launch = dyn_cast<fs::LaunchOp>(user);
          if (!launch) {
            if (!keep[i])
              leaves.push_back(i);
            keep[i] = mustF32[i] = true;
            continue;
          }
          touching.insert(launch);
          for (auto [k, out] : llvm::enumerate(launch.getOuts()))
            if (out == v && keepsF32(launch.getKernel(), unsigned(k)))
              keep[i] = mustF32[i] = true;
        }
      int64_t first = std::numeric_limits<int64_t>::max(), last = -1;
      for (Operation *l : touching) {
        first = std::min(first, position.lookup(l));
        last = std::max(last, position.lookup(l));
      }
      if (last - first + 1 <= int64_t(touching.size()))
        keep[i] = true;
    }
    // What leaves (a parameter's gradient) is summed from fp32 parts: a
    // tied weight's two uses (add), a table's rows onto its other
    // gradient (gather_grad_add), which fy-early-offload hands over alone;
    // and so on up the residual stream, whose gradient a norm's gradient
    // may sum (the addend, its last input).
    while (!leaves.empty()) {
      size_t i = leaves.pop_back_val();
      for (Value v : storages[i].values)
        for (Operation *user : v.getUsers()) {
          auto launch = dyn_cast<fs::LaunchOp>(user);
          if (!launch || !llvm::is_contained(launch.getOuts(), v))
            continue;
          StringRef k = launch.getKernel();
          ValueRange parts = launch.getIns();
          if (k == "layer_norm_grad_add" || k == "rms_norm_grad_add")
            parts = v == launch.getOuts()[0] ? parts.take_back() : ValueRange{};  // dx, not dscale or dbias
          else if (k != "add" && k != "gather_grad_add")
            continue;
          for (Value in : parts)
            if (auto it = storageOf.find(in); it != storageOf.end()) {
              mustF32[it->second] = true;
              if (!keep[it->second]) {
                keep[it->second] = true;
                leaves.push_back(it->second);
              }
            }
        }
    }

    for (auto [i, s] : llvm::enumerate(storages)) {
      if (keep[i])
        continue;
      for (Value v : s.values)
        v.setType(withElement(v.getType(), half));
    }
    SmallVector<fs::LaunchOp> launches;
    f.walk([&](fs::LaunchOp l) { launches.push_back(l); });
    for (fs::LaunchOp l : launches)
      widenAround(l, native);
    if (productCopies)
      for (auto [i, s] : llvm::enumerate(storages))
        if (keep[i])
          copyForProducts(s, half, native, /*narrowable=*/!mustF32[i]);
  }
};

} // namespace
