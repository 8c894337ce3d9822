// fy-place-activations: where each value that backward needs waits between
// its last forward use and its first backward one. keep leaves it on the
// device; host copies it to host memory after its last forward use and back
// before its first backward use; ssd does the same through host memory to
// the SSD; recompute drops it and runs the forward
// launches that made it again in backward, from the nearest values that
// were kept; selective keeps the weight products' outputs and recomputes
// the rest from them. The policy is one for all, or one per forward segment (the ops
// from the first use of a layer group's parameters to the next group's).
// Values are the same bits under every policy: only where they wait, or
// whether they are made twice by the same kernels on the same inputs,
// changes.
#include "passes/Analysis/StepPhases.h"
#include "passes/AttrNames.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/IRMapping.h"
#include "llvm/ADT/STLExtras.h"

#include <functional>

namespace fuyou {
#define GEN_PASS_DEF_PLACEACTIVATIONS
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fs = fuyou::fysched;

namespace {

enum class Place { Keep, Host, Ssd, Recompute, Selective };

std::optional<Place> parsePlace(StringRef s) {
  if (s == "keep")
    return Place::Keep;
  if (s == "host")
    return Place::Host;
  if (s == "ssd")
    return Place::Ssd;
  if (s == "recompute")
    return Place::Recompute;
  if (s == "selective")
    return Place::Selective;
  return std::nullopt;
}

// One saved buffer: its last forward use and first backward one, through
// views of it included.
struct Saved {
  fs::AllocOp alloc;
  Operation *lastForward = nullptr, *firstBackward = nullptr;
};

// The buffers of a block that backward reads, found after every change.
SmallVector<Saved> findSaved(Block &body, const fuyou::StepPhases &phases, Value loss) {
  std::function<void(Value, Saved &)> walk = [&](Value v, Saved &s) {
    for (Operation *user : v.getUsers()) {
      if (isa<func::ReturnOp, fs::DeallocOp>(user))
        continue;
      if (phases.backward(user)) {
        if (!s.firstBackward || phases.position(user) < phases.position(s.firstBackward))
          s.firstBackward = user;
        continue;
      }
      if (!s.lastForward || phases.position(user) > phases.position(s.lastForward))
        s.lastForward = user;
      if (auto view = dyn_cast<fs::ViewOp>(user))
        walk(view.getResult(), s);
    }
  };
  SmallVector<Saved> saved;
  for (auto alloc : body.getOps<fs::AllocOp>()) {
    auto type = cast<fs::BufferType>(alloc.getType());
    if (phases.backward(alloc) || type.getSpace() != "device" || alloc.getResult() == loss)
      continue;
    Saved s{alloc, alloc, nullptr};
    walk(alloc.getResult(), s);
    if (s.firstBackward)
      saved.push_back(s);
  }
  return saved;
}

// In backward order: by first backward use.
void sortByFirstBackward(MutableArrayRef<Saved> saved, const fuyou::StepPhases &phases) {
  llvm::sort(saved, [&](const Saved &a, const Saved &b) {
    return phases.position(a.firstBackward) < phases.position(b.firstBackward);
  });
}

// `v` (the root buffer `from`, or a chain of views of it) made again on `to`.
Value reView(Value v, Value from, Value to, OpBuilder &b) {
  if (v == from)
    return to;
  auto view = v.getDefiningOp<fs::ViewOp>();
  return b.create<fs::ViewOp>(view.getLoc(), view.getType(), reView(view.getSource(), from, to, b));
}

struct PlaceActivations : fuyou::impl::PlaceActivationsBase<PlaceActivations> {
  using PlaceActivationsBase::PlaceActivationsBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    SmallVector<Place> &policies = policies_;
    StringRef chosen = policy;
    if (chosen == "auto") {
      auto plan = fuyou::fysched::PlanAttr::of(module);
      if (!plan || plan.getActivations().empty()) {
        module.emitError("fy-place-activations: policy=auto needs fy-choose-placement first (no fysched.plan)");
        return signalPassFailure();
      }
      chosen = plan.getActivations();
    }
    SmallVector<StringRef> names;
    chosen.split(names, ',');
    for (StringRef n : names) {
      auto p = parsePlace(n.trim());
      if (!p) {
        module.emitError("fy-place-activations: a policy is keep, host, ssd, recompute or selective, got '") << n << "'";
        return signalPassFailure();
      }
      policies.push_back(*p);
    }
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step || llvm::all_of(policies, [](Place p) { return p == Place::Keep; }))
      return;
    Block &body = step.getBody().front();
    fuyou::StepPhases phases(body);
    if (!phases.hasBackward())
      return;
    loss_ = fuyou::rootBuffer(cast<func::ReturnOp>(body.getTerminator()).getOperand(0));

    fuyou::ForwardSegments seg = fuyou::findForwardSegments(module, body, phases);
    segment_ = std::move(seg.segmentOf);
    checkpoint_ = std::move(seg.checkpoints);
    segments_ = seg.count;
    if (policies.size() != 1 && int64_t(policies.size()) != segments_) {
      module.emitError("fy-place-activations: ")
          << policies.size() << " policies given for " << segments_
          << " forward segments (one policy, or one per segment in forward order)";
      return signalPassFailure();
    }

    recompute(body, phases);
    fuyou::StepPhases after(body);
    SmallVector<Saved> moved = findSaved(body, after, loss_);
    llvm::erase_if(moved, [&](Saved &s) {
      Place p = placeOf(s.alloc.getResult());
      return p != Place::Host && p != Place::Ssd;
    });
    if (readAhead < 1) {
      module.emitError("fy-place-activations: read-ahead must be at least 1, got ") << int64_t(readAhead);
      return signalPassFailure();
    }
    if (ahead < 0) {
      module.emitError("fy-place-activations: ahead must be at least 0, got ") << int64_t(ahead);
      return signalPassFailure();
    }
    // A read from SSD starts when the value read readAhead before it is
    // first needed, so it runs while that many values' ops compute: one
    // ahead leaves a small read's whole latency in the way.
    sortByFirstBackward(moved, after);
    SmallVector<Operation *> ssdUses;  // first backward uses of the SSD values so far
    for (Saved &s : moved) {
      bool ssd = placeOf(s.alloc.getResult()) == Place::Ssd;
      Operation *readAt = int64_t(ssdUses.size()) >= readAhead ? ssdUses[ssdUses.size() - readAhead]
                                                                 : moved.front().firstBackward;
      moveOut(s, after, ssd, readAt);
      if (ssd)
        ssdUses.push_back(s.firstBackward);
    }
  }

  // Drops every saved buffer placed `recompute`: before its first backward
  // use, the forward launches that made it (and the unsaved buffers they
  // read) run again from kept buffers, parameters and inputs. A buffer that
  // cannot be made again so (more than one writer, a parameter updated
  // before that point) stays on the device.
  void recompute(Block &body, const fuyou::StepPhases &phases) {
    DenseMap<Value, SmallVector<Operation *, 1>> writers;
    DenseMap<StringRef, int64_t> updatedAt;  // sync optimizer: param -> cpu_adamw position
    for (Operation &op : body) {
      if (auto launch = dyn_cast<fs::LaunchOp>(op))
        for (Value out : launch.getOuts())
          writers[fuyou::rootBuffer(out)].push_back(&op);
      else if (auto copy = dyn_cast<fs::CopyOp>(op))
        writers[fuyou::rootBuffer(copy.getTarget())].push_back(&op);
      else if (auto update = dyn_cast<fs::CpuAdamWOp>(op))
        updatedAt.try_emplace(update.getParam(), phases.position(&op));
    }
    DenseMap<Value, Value> remade;  // forward buffer -> its backward twin
    int64_t at = 0;                 // position of the op the twins go before
    // Whether a buffer read by a launch made again may be read as it is.
    auto stable = [&](Value root) {
      if (auto gp = root.getDefiningOp<fs::GetParamOp>())
        return !updatedAt.count(gp.getName()) || updatedAt.lookup(gp.getName()) > at;
      return writers.lookup(root).size() <= 1;
    };
    std::function<Value(Value, OpBuilder &)> remake = [&](Value root, OpBuilder &b) -> Value {
      if (Value twin = remade.lookup(root))
        return twin;
      auto ws = writers.lookup(root);
      auto launch = ws.size() == 1 ? dyn_cast<fs::LaunchOp>(ws[0]) : nullptr;
      if (!launch || phases.backward(launch))
        return {};
      IRMapping map;
      for (Value in : launch.getIns()) {
        Value r = fuyou::rootBuffer(in), src = r;
        auto alloc = r.getDefiningOp<fs::AllocOp>();
        bool kept = !alloc || phases.backward(alloc) || checkpoint_.contains(r) ||
                    (savedSet_.contains(r) && placeOf(r) != Place::Recompute);
        if (!kept && !(src = remake(r, b)))
          return {};
        if (kept && !stable(r))
          return {};
        map.map(in, reView(in, r, src, b));
      }
      SmallVector<std::pair<Value, Value>> outs;
      for (Value out : launch.getOuts()) {
        Value r = fuyou::rootBuffer(out);
        if (!r.getDefiningOp<fs::AllocOp>() || writers.lookup(r).size() != 1)
          return {};
        Value twin = b.create<fs::AllocOp>(r.getLoc(), r.getType(), /*offset=*/IntegerAttr());
        map.map(out, reView(out, r, twin, b));
        outs.push_back({r, twin});
      }
      b.clone(*launch, map);
      for (auto [r, twin] : outs)
        remade[r] = twin;
      return remade.lookup(root);
    };

    SmallVector<Saved> saved = findSaved(body, phases, loss_);
    for (Saved &s : saved)
      savedSet_.insert(s.alloc.getResult());
    findCheap(writers, phases);
    sortByFirstBackward(saved, phases);
    // Per segment, the saved bytes made again (for --emit=plan).
    SmallVector<int64_t> remadeBytes(segments_, 0);
    for (Saved &s : saved) {
      Value root = s.alloc.getResult();
      if (placeOf(root) != Place::Recompute)
        continue;
      at = phases.position(s.firstBackward);
      OpBuilder b(s.firstBackward);
      if (Value twin = remake(root, b)) {
        phases.rebaseBackward(root, twin, b);
        remadeBytes[segment_.lookup(root)] += fuyou::bufferBytes(root.getType());
      }
    }
    if (llvm::any_of(remadeBytes, [](int64_t n) { return n > 0; }))
      getOperation()->setAttr(fuyou::attr::kRecomputedBytes, DenseI64ArrayAttr::get(&getContext(), remadeBytes));
  }

  // The saved buffers of selective segments that are made again without a
  // weight product: the launches that remake them from what stays (the
  // segment's weight products' outputs, the other segments' kept buffers,
  // checkpoints, parameters and inputs) are norms, activation functions and
  // attention's products of activations, which cost little next to the
  // bytes they free (an attention's scores are T x T a head).
  void findCheap(const DenseMap<Value, SmallVector<Operation *, 1>> &writers, const fuyou::StepPhases &phases) {
    // Whether a buffer holds weights: a parameter, or made from parameters
    // (and constants) alone, as a transpose or a scaled copy is.
    enum class Origin { Weights, Constant, Other };
    DenseMap<Value, Origin> origins;
    std::function<Origin(Value)> origin = [&](Value root) {
      if (auto it = origins.find(root); it != origins.end())
        return it->second;
      origins[root] = Origin::Other;  // a launch reading what it writes
      Origin o = Origin::Other;
      if (root.getDefiningOp<fs::GetParamOp>())
        o = Origin::Weights;
      else if (root.getDefiningOp<fs::ConstantOp>())
        o = Origin::Constant;
      else if (auto ws = writers.lookup(root); ws.size() == 1)
        if (auto l = dyn_cast<fs::LaunchOp>(ws[0]); l && !l.getIns().empty()) {
          o = Origin::Constant;
          for (Value in : l.getIns())
            if (Origin i = origin(fuyou::rootBuffer(in)); i == Origin::Other)
              o = Origin::Other;
            else if (i == Origin::Weights && o == Origin::Constant)
              o = Origin::Weights;
        }
      return origins[root] = o;
    };
    // The model's weight products, where its FLOPs are; an attention's
    // products of two activations are not.
    auto readsWeights = [&](fs::LaunchOp product) {
      return llvm::any_of(product.getIns(), [&](Value in) { return origin(fuyou::rootBuffer(in)) == Origin::Weights; });
    };
    DenseMap<Value, bool> memo;  // root -> remade without a weight product
    std::function<bool(Value)> cheap = [&](Value root) -> bool {
      if (auto it = memo.find(root); it != memo.end())
        return it->second;
      memo[root] = false;  // a cycle (none in a step) stays put
      auto ws = writers.lookup(root);
      auto launch = ws.size() == 1 ? dyn_cast<fs::LaunchOp>(ws[0]) : nullptr;
      const bool product = launch && (launch.getKernel() == "matmul" || launch.getKernel() == "matmul_bias");
      if (!launch || phases.backward(launch) || (product && readsWeights(launch)))
        return false;
      for (Value in : launch.getIns()) {
        Value r = fuyou::rootBuffer(in);
        auto alloc = r.getDefiningOp<fs::AllocOp>();
        if (!alloc || phases.backward(alloc) || checkpoint_.contains(r))
          continue;
        if (savedSet_.contains(r)) {
          Place p = segmentPolicy(r);
          if (p == Place::Keep || p == Place::Host || p == Place::Ssd)
            continue;
          if (p == Place::Selective && !cheap(r))
            continue;  // a product's output: it stays
        }
        if (!cheap(r))
          return false;
      }
      return memo[root] = true;
    };
    for (Value root : savedSet_)
      if (segmentPolicy(root) == Place::Selective && !checkpoint_.contains(root) && cheap(root))
        cheap_.insert(root);
  }

  // Out after the last forward use, back in `ahead` launches before the
  // first backward one (within backward, after the copies placed before);
  // to SSD and back through host buffers, the read from SSD at `readAt`.
  void moveOut(Saved &s, const fuyou::StepPhases &phases, bool ssd, Operation *readAt) {
    auto type = cast<fs::BufferType>(s.alloc.getType());
    auto in = [&](StringRef space) { return fs::BufferType::get(type.getContext(), space, type.getTensorType()); };
    Location loc = s.alloc.getLoc();
    OpBuilder b(s.lastForward->getContext());
    auto copyTo = [&](Value from, Type to) {
      Value v = b.create<fs::AllocOp>(loc, to, /*offset=*/IntegerAttr());
      b.create<fs::CopyOp>(loc, from, v);
      return v;
    };
    b.setInsertionPointAfter(s.lastForward);
    Value away = copyTo(s.alloc.getResult(), in("host"));
    if (ssd) {
      away = copyTo(away, in("ssd"));
      b.setInsertionPoint(readAt);
      away = copyTo(away, in("host"));
    }
    // Ops made here (the copies back placed before) are not in `phases`.
    Operation *issue = fuyou::issuePoint(s.firstBackward, ahead,
                                        [&](Operation *op) { return !phases.contains(op) || !phases.backward(op); });
    b.setInsertionPoint(issue);
    Value back = copyTo(away, type);
    // Views backward reads are made again at the first use, not the copy.
    b.setInsertionPoint(s.firstBackward);
    phases.rebaseBackward(s.alloc.getResult(), back, b);
  }

  Place segmentPolicy(Value root) const {
    return policies_.size() == 1 ? policies_[0] : policies_[segment_.lookup(root)];
  }

  // Where a forward buffer waits.
  Place placeOf(Value root) const {
    Place p = segmentPolicy(root);
    if (p == Place::Selective)
      return cheap_.contains(root) ? Place::Recompute : Place::Keep;
    // A segment's outputs stay: the recomputation of the next one starts there.
    return p == Place::Recompute && checkpoint_.contains(root) ? Place::Keep : p;
  }

  SmallVector<Place> policies_;  // one, or one per segment
  int64_t segments_ = 1;
  Value loss_;
  DenseMap<Value, int64_t> segment_;  // forward buffer -> its segment
  DenseSet<Value> checkpoint_, savedSet_, cheap_;
};

} // namespace
