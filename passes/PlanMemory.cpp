// fy-plan-memory: the program's device memory, decided before it runs. Every
// temporary gets an offset in one arena such that no two buffers alive at
// the same time overlap; the arena's size, with the parameters, is what the
// executable checks --gpu-mem against at start-up, and the runtime asserts
// every placement as it runs.
#include "passes/Passes.h"
#include "passes/AttrNames.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <algorithm>

namespace fuyou {
#define GEN_PASS_DEF_PLANMEMORY
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;
namespace fg = fuyou::fygraph;
namespace fs = fuyou::fysched;

namespace {

int64_t bytesOf(RankedTensorType t) {
  return t.getNumElements() * ((t.getElementTypeBitWidth() + 7) / 8);
}
// The runtime's allocator hands out 64-byte granules, at least one. Buffers
// that move to or from SSD take whole 4096-byte pages (O_DIRECT I/O).
int64_t granules(int64_t bytes, int64_t granule = 64) {
  return std::max<int64_t>(granule, (bytes + granule - 1) / granule * granule);
}

// A temporary's lifetime in program order, [start, end), and its place.
struct Temp {
  Operation *def;
  int64_t start, end, bytes;
  int64_t offset = -1;
};

// Greedy by size: the largest buffers are placed first, each at the lowest
// offset where it overlaps no placed buffer whose lifetime meets its own.
// Ties go in program order, so the plan is deterministic. The placed ones
// are kept in offset order, so a buffer's gap is found in one scan that
// stops at the first gap wide enough.
int64_t placeAll(MutableArrayRef<Temp> temps) {
  SmallVector<Temp *> order;
  for (Temp &t : temps)
    order.push_back(&t);
  std::stable_sort(order.begin(), order.end(), [](Temp *a, Temp *b) { return a->bytes > b->bytes; });
  SmallVector<Temp *> placed;  // by offset
  int64_t arena = 0;
  for (Temp *t : order) {
    int64_t offset = 0;
    for (Temp *p : placed) {
      if (!(p->start < t->end && t->start < p->end))
        continue;
      if (p->offset >= offset + t->bytes)
        break;  // t fits in the gap before p
      offset = std::max(offset, p->offset + p->bytes);
    }
    t->offset = offset;
    arena = std::max(arena, offset + t->bytes);
    placed.insert(llvm::upper_bound(placed, offset, [](int64_t o, Temp *p) { return o < p->offset; }), t);
  }
  return arena;
}

struct PlanMemory : fuyou::impl::PlanMemoryBase<PlanMemory> {
  void runOnOperation() override {
    ModuleOp module = getOperation();
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return;
    int64_t params = 0;
    for (auto p : module.getOps<fg::ParamOp>())
      params += granules(bytesOf(cast<RankedTensorType>(p.getType())));

    // Lifetimes from each alloc or constant to its dealloc (to the end of
    // the step for one never deallocated), and the peak of those alive, per
    // memory space: the device's arena and the host's (activations waiting
    // there for backward).
    struct Space {
      int64_t granule = 64;
      SmallVector<Temp> temps;
      int64_t live = 0, peak = 0;
    };
    Space device, host, ssd{4096};
    Block &body = step.getBody().front();
    for (auto alloc : body.getOps<fs::AllocOp>())
      if (cast<fs::BufferType>(alloc.getType()).getSpace() == "ssd")
        host.granule = 4096;
    DenseMap<Value, std::pair<Space *, size_t>> index;
    int64_t pos = 0;
    for (Operation &op : body) {
      ++pos;
      if (isa<fs::AllocOp, fs::ConstantOp>(op)) {
        auto type = cast<fs::BufferType>(op.getResult(0).getType());
        StringRef space = type.getSpace();
        Space *sp = space == "device" ? &device : space == "host" ? &host : &ssd;
        int64_t n = granules(type.getSizeInBytes(), sp->granule);
        index[op.getResult(0)] = {sp, sp->temps.size()};
        sp->temps.push_back(Temp{&op, pos, INT64_MAX, n});
        sp->live += n;
        sp->peak = std::max(sp->peak, sp->live);
      } else if (auto d = dyn_cast<fs::DeallocOp>(op)) {
        auto it = index.find(d.getBuffer());
        if (it == index.end())
          continue;
        auto [sp, i] = it->second;
        sp->temps[i].end = pos;
        sp->live -= sp->temps[i].bytes;
      }
    }
    Builder b(module.getContext());
    int64_t arena = placeAll(device.temps), hostArena = placeAll(host.temps), ssdArena = placeAll(ssd.temps);
    for (Space *sp : {&device, &host, &ssd})
      for (Temp &t : sp->temps)
        t.def->setAttr("offset", b.getI64IntegerAttr(t.offset));
    step->setAttr(fuyou::attr::kParamBytes, b.getI64IntegerAttr(params));
    step->setAttr(fuyou::attr::kPeakTempBytes, b.getI64IntegerAttr(device.peak));
    step->setAttr(fuyou::attr::kArenaBytes, b.getI64IntegerAttr(arena));
    if (!host.temps.empty())
      step->setAttr(fuyou::attr::kHostArenaBytes, b.getI64IntegerAttr(hostArena));
    if (!ssd.temps.empty())
      step->setAttr(fuyou::attr::kSsdArenaBytes, b.getI64IntegerAttr(ssdArena));
  }
};

} // namespace
