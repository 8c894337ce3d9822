#include "passes/Analysis/CostModel.h"
#include "passes/Analysis/LaunchCost.h"
#include "passes/AttrNames.h"
#include "passes/Analysis/StepPhases.h"
#include "dialects/FyGraph/FyGraphOps.h"
#include "dialects/FySched/FySchedOps.h"
#include "runtime/abi/queue_rules.h"
#include "runtime/abi/sizes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/StringSet.h"

#include <algorithm>
#include <limits>
#include <cmath>

using namespace mlir;
namespace fs = fuyou::fysched;
namespace fg = fuyou::fygraph;

namespace fuyou {

const char *streamName(Stream s) {
  static const char *names[] = {"compute", "host-to-device", "device-to-host", "ssd", "optimizer"};
  return names[s];
}

namespace {

// The replay: each stream runs its ops in program order; an op starts when
// its stream is free, the op that issued it has been reached, and what it
// reads is ready.
class Replay {
public:
  Replay(ModuleOp module, const Profile &p, bool stateOnSsd, bool timeline)
      : module_(module), p_(p), stateOnSsd_(stateOnSsd), timeline_(timeline) {
    cuda_ = p.target == "cuda";
    if (auto prec = module->getAttrOfType<StringAttr>(fuyou::attr::kPrecision))
      operands16_ = cuda_ && (prec.getValue() == "bf16" || prec.getValue() == "fp16");
    if (auto opt = module->getAttrOfType<StringAttr>(fuyou::attr::kOptimizer))
      eightBit_ = opt.getValue() == "adamw8bit";
    // At most one row per token: the bound, as the batch's ids are not known here.
    SmallVector<fs::GroupWaitRowsOp> rowWaits;
    module.walk([&](fs::GroupWaitRowsOp w) { rowWaits.push_back(w); });
    if (!rowWaits.empty()) {
      llvm::StringMap<Type> tables;
      module.walk([&](fs::GetParamOp gp) { tables[gp.getName()] = gp.getType(); });
      for (fs::GroupWaitRowsOp w : rowWaits)
        if (Type t = tables.lookup(w.getParam())) {
          auto table = cast<fs::BufferType>(t).getTensorType();
          int64_t ids = cast<fs::BufferType>(w.getIds().getType()).getTensorType().getNumElements();
          const int64_t rows = std::min(table.getDimSize(0), ids);
          rowsFirst_[w.getGroup()] = double(rows * table.getDimSize(1));
          // The runtime hands a table over early only if a batch's ids fit its rows.
          if (ids > table.getDimSize(0))
            noEarly_.insert(w.getGroup());
          // On a GPU the runtime sends these rows of the gradient down
          // first when they are at most half the table, unless the updates
          // wait for every gradient: loss scaling's verdict (clipping, a
          // run flag, is not known here).
          if (cuda_ && !module->hasAttr(fuyou::attr::kLossScale) && 2 * rows <= table.getDimSize(0))
            rowsGradFirst_.insert(w.getGroup());
        }
    }
    holds_ = module->hasAttr(fuyou::attr::kLossScale);
    for (auto p : module.getOps<fg::ParamOp>())
      paramElems_[p.getSymName()] = double(cast<RankedTensorType>(p.getType()).getNumElements());
    for (auto w : rowWaits)
      rowsTable_[w.getGroup()] = w.getParam();
    for (auto g : module.getOps<fs::GroupOp>()) {
      // The runtime's order: a table read rows first ahead of the others.
      StringRef table = rowsTable_.lookup(g.getSymName());
      SmallVector<StringRef> &order = updateOrder_[g.getSymName()];
      if (!table.empty())
        order.push_back(table);
      for (Attribute a : g.getParams())
        if (cast<FlatSymbolRefAttr>(a).getValue() != table)
          order.push_back(cast<FlatSymbolRefAttr>(a).getValue());
      groupIndex_[g.getSymName()] = int64_t(groupIndex_.size());
      int64_t params = g.getBytes() / 4;
      groupParams_[g.getSymName()] = params;
      // fp32 m and v, or 8-bit codes with a float absmax per 256 (small tensors
      // keep fp32: this is the bound for the large ones that dominate).
      momentBytes_[g.getSymName()] = eightBit_ ? params * 2 + params / 256 * 8 : params * 8;
    }
  }

  Prediction run() {
    Prediction out;
    auto step = module_.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return out;
    Block &body = step.getBody().front();
    StepPhases phases(body);
    updatesPerStep_ = llvm::range_size(body.getOps<fs::GroupAdamWOp>());
    // Two steps: the second sees the first's background work still going.
    double end1 = replayStep(body, phases, nullptr);
    double end2 = replayStep(body, phases, &out);
    for (Prediction::Slice &s : out.timeline)  // from the step's start
      s.start -= end1, s.end -= end1;
    // In steady state no stream does more than one step's work per step: a
    // background stream slower than compute stretches the step (two replayed
    // steps are too few for its backlog to reach the compute stream).
    out.stepS = end2 - end1;
    for (double busy : out.busyS)
      out.stepS = std::max(out.stepS, busy);
    // On the CPU target the kernels and the optimizer's pool each use every
    // core (the profile measured each so): beside each other they share
    // them, so a step holds both one after the other.
    if (!cuda_)
      out.stepS = std::max(out.stepS, out.busyS[Compute] + out.busyS[Optimizer]);
    auto attr = [&](StringRef name) {
      auto a = step->getAttrOfType<IntegerAttr>(name);
      return a ? a.getInt() : int64_t(0);
    };
    // The runtime's own scratch (fysched.reserved_device_bytes) counts too.
    auto reserved = module_->getAttrOfType<IntegerAttr>(fuyou::attr::kReservedDeviceBytes);
    out.deviceBytes = (module_->hasAttr(fuyou::attr::kStreamedParams) ? 0 : attr(fuyou::attr::kParamBytes)) +
                      attr(fuyou::attr::kArenaBytes) + (reserved ? reserved.getInt() : 0);
    // On a GPU the moments of the groups updated there (fy-device-optimizer).
    if (cuda_)
      for (auto g : module_.getOps<fs::GroupOp>())
        if (g.getOnDevice())
          out.deviceBytes += 2 * g.getBytes();
    out.hostBytes = attr(fuyou::attr::kHostArenaBytes);
    // On a GPU, gather_up's rows wait in one page-locked buffer on their way up.
    if (cuda_)
      out.hostBytes += gatherUpBytes(module_);
    return out;
  }

private:
  // The optimizer's queue, as the runtime runs it (AsyncOptimizer). While
  // backward runs, updates go in the order their gradients land (program
  // order); once the last group's gradient is offloaded, those still queued
  // are reordered for the next forward (first layer first) and the worker
  // takes the first that has landed, else the one that lands first. A table
  // read rows first whose rows of the gradient have their own copy updates
  // those rows, then (in memory) goes to the back of the queue for the rest.
  struct Pending {
    StringRef group;
    Value token;
    double ready;               // its gradient has landed and its state is read
    double rowsReady;           // its rows' own gradient copy has landed; < 0: none
    bool rowsDone = false;      // the rows part has run
    double writeIssued = -1;    // the program reached its state_write
    bool early = false;         // a table's rows the batch does not read (grad_offload_early)
  };

  double landedAt(const Pending &p) const { return p.rowsReady >= 0 && !p.rowsDone ? p.rowsReady : p.ready; }

  // Before the release: runs queued updates in order while the worker would
  // start them before `t`, when the program queues the next.
  void runUntil(double t, Prediction *out) {
    if (holds_)
      return;  // the updates wait for every gradient's norm
    for (;;) {
      // (A table's part held for its release waits; the worker takes the next.)
      auto next = llvm::find_if(pending_, [&](const Pending &p) { return !unreleased(p.group, p.early); });
      if (next == pending_.end() || std::max(free_[Optimizer], landedAt(*next)) >= t)
        break;
      fill(landedAt(*next), out);
      runPending(size_t(next - pending_.begin()), out);
    }
    fill(t, out);
  }

  // A held table's early part whose early_release the replay has not reached.
  // (On a GPU the program's thread releases it long before the GPU gets
  // there; the replay, on the GPU's clock, holds it until the release is
  // replayed, which in a compiled program comes right after the table's last
  // read, with no other update queued between.)
  bool unreleased(StringRef g, bool early = true) const {
    return early && releasedAt_.lookup(g) == std::numeric_limits<double>::infinity();
  }

  // A table's early pieces run only when the worker has nothing else: while
  // it would be idle before `until`, when the update it picked lands.
  void fill(double until, Prediction *out) {
    while (!fillers_.empty()) {
      Filler &f = fillers_.front();
      if ((f.done >= int64_t(f.chunks.size()) && f.chunksLeft > 0) || unreleased(f.group))
        return;  // its chunk of the gradient has not been sent for yet, or it is held
      double start = std::max(free_[Optimizer], f.ready);
      if (f.done < int64_t(f.chunks.size()))
        start = std::max(start, f.chunks[f.done]);
      // The runtime's rule (runtime/abi/queue_rules.h): at `start` the piece's
      // chunk is there; the picked update's gradient is by `until`.
      if (!fy::queue::piece_first(/*picked_landed=*/start >= until, /*piece_landed=*/true))
        return;
      double piece = f.elems / double(f.pieces - f.done);
      double end = onStream(Optimizer, start, piece / p_.adamwParams, out, [&] { return "adamw " + f.group.str() + " early piece " + std::to_string(f.done); });
      // Up goes the piece's whole range of the table, as the runtime sends it.
      if (cuda_ && !module_->hasAttr(fuyou::attr::kStreamedParams))
        end = onStream(ToDevice, std::max(end, releasedAt_.lookup(f.group)), f.chunkElems(f.done) * 4.0 / p_.h2dBytes, out, [&] { return "up " + f.group.str() + " early piece " + std::to_string(f.done); });
      f.elems -= piece;
      if (++f.done == f.pieces) {
        StringRef g = f.group;
        fillers_.erase(fillers_.begin());
        earlyDone_[g] = end;
        tableDone(g, end);
      }
    }
  }

  // On a GPU a table's early gradient goes down in chunks of a piece each,
  // behind the blocks' gradients: one after each other group's, the rest
  // after the table's own rows (`all`). Returns when the last one issued lands.
  void sendChunks(double ready, bool all, Prediction *out) {
    for (Filler &f : fillers_)
      for (int64_t n = all ? f.chunksLeft : std::min<int64_t>(1, f.chunksLeft); n > 0; --n, --f.chunksLeft) {
        f.chunks.push_back(onStream(ToHost, ready, f.chunkElems(f.pieces - f.chunksLeft) * 4.0 / p_.d2hBytes, out,
                                    [&] { return "down " + f.group.str() + " early chunk " + std::to_string(f.pieces - f.chunksLeft); }));
        chunksLanded_[f.group] = f.chunks.back();
      }
  }

  // The GPU's stream waits until `t` for a gradient copy to land before the
  // kernels after it reuse the copied memory.
  void copyWait(double t, Prediction *out) {
    if (out && t > free_[Compute])
      out->copyWaitS += t - free_[Compute];
    free_[Compute] = std::max(free_[Compute], t);
  }

  // A table handed over early is whole once its early pieces (done at
  // `end`) and the group's update are both done.
  void tableDone(StringRef g, double end) {
    updated_[g] = std::max(updated_.lookup(g), end);
    updateEnd_[g] = std::max(updateEnd_.lookup(g), end);
    StringRef table = earlyTable_.lookup(g);
    paramUpdated_[table] = std::max(paramUpdated_.lookup(table), end);
  }

  void runReleased(Prediction *out) {
    if (holds_) {
      double all = 0;
      for (const Pending &p : pending_)
        all = std::max(all, p.ready);
      for (Pending &p : pending_)
        p.ready = std::max(p.ready, all);
    }
    std::stable_sort(pending_.begin(), pending_.end(), [&](const Pending &a, const Pending &b) {
      return groupIndex_.lookup(a.group) > groupIndex_.lookup(b.group);
    });
    while (!pending_.empty()) {
      // The runtime's rule (runtime/abi/queue_rules.h): the first landed, else the one landing first.
      size_t pick = fy::queue::next_update(
                        pending_.size(), [&](size_t i) { return landedAt(pending_[i]) <= free_[Optimizer]; },
                        [&](size_t a, size_t b) { return landedAt(pending_[a]) < landedAt(pending_[b]); })
                        .index;
      fill(landedAt(pending_[pick]), out);
      runPending(pick, out);
    }
    fill(std::numeric_limits<double>::infinity(), out);
  }

  // The first part of `g`'s table handed over early: the next batch's rows
  // among its early ones (at most as many as a batch's, and no more than
  // the table holds besides the step's), scattered up on a GPU; the rest
  // becomes the table's early pieces.
  void runEarly(const Pending &p, Prediction *out) {
    double table = paramElems_.lookup(earlyTable_.lookup(p.group)), rows = rowsFirst_.lookup(p.group);
    double first = std::min(rows, table - rows);
    double end = onStream(Optimizer, p.ready, first / p_.adamwParams, out, [&] { return "adamw " + p.group.str() + " early rows"; });
    earlyRows_[p.group] = cuda_ && !module_->hasAttr(fuyou::attr::kStreamedParams)
                              ? onStream(ToDevice, std::max(end, releasedAt_.lookup(p.group)), first * 4.0 / p_.h2dBytes + p_.launchS, out,
                                         [&] { return "up " + p.group.str() + " early rows"; })
                              : end;
    // The device's scatter reads the rows from the optimizer's buffer: the
    // worker waits until they are up (behind the table's last read, if held).
    free_[Optimizer] = std::max(free_[Optimizer], earlyRows_[p.group]);
    end = earlyRows_[p.group];
    // Its pieces were set out when the part was handed over (its chunks go
    // down from there); they follow these rows.
    for (Filler &f : fillers_)
      if (f.group == p.group)
        f.ready = end;
  }

  // The upload of an update of `dur` ending at `end`: it starts after the
  // first piece (kUpdatePieceElems) and ends a piece's copy after the
  // update, if the link keeps up. Returns its end.
  double uploadPieces(double end, double dur, Prediction *out, StringRef group) {
    double part = dur * p_.adamwParams;
    double piece = std::min(part, double(fy::kUpdatePieceElems)), copy = part * 4.0 / p_.h2dBytes;
    double start = std::max(end - dur + piece / p_.adamwParams, end + piece * 4.0 / p_.h2dBytes - copy);
    return onStream(ToDevice, start, copy, out, [&] { return "up " + group.str(); });
  }

  // Runs pending_[i] (or its rows part) on the optimizer stream.
  void runPending(size_t i, Prediction *out) {
    Pending p = pending_[i];
    pending_.erase(pending_.begin() + i);
    if (p.early)
      return runEarly(p, out);
    StringRef g = p.group;
    // After its early rows, a table has only the batch's left.
    const bool early = earlyTaken_.contains(g);
    double params = groupParams_.lookup(g), dur = params / p_.adamwParams;
    if (early)
      dur -= (paramElems_.lookup(earlyTable_.lookup(g)) - rowsFirst_.lookup(g)) / p_.adamwParams;
    bool upload = cuda_ && !module_->hasAttr(fuyou::attr::kStreamedParams);
    auto rows = rowsFirst_.find(g);
    double rowsDur = rows != rowsFirst_.end() ? rows->second / p_.adamwParams : 0;
    // The next batch's rows: the step's (here) and, after an early part, its
    // others. (The runtime then sends the step's rows the next batch also
    // names up first and the rest after; how many that is depends on the
    // data, so the model keeps the wait for all of them: an upper bound.)
    auto rowsUpdated = [&](double done) {
      rowsUpdated_[g] = upload ? onStream(ToDevice, done, rows->second * 4.0 / p_.h2dBytes + p_.launchS, out,
                                          [&] { return "up " + g.str() + " rows"; })
                               : done;
      if (early)
        rowsUpdated_[g] = std::max(rowsUpdated_[g], earlyRows_.lookup(g));
    };
    double end;
    if (p.rowsReady >= 0 && !p.rowsDone) {
      rowsUpdated(onStream(Optimizer, p.rowsReady, rowsDur, out, [&] { return "adamw " + g.str() + " rows"; }));
      p.rowsDone = true;
      if (!stateOnSsd_) {
        pending_.push_back(p);
        return;
      }
      // Out of core it keeps its staging buffer and waits for the rest in place.
      end = onStream(Optimizer, p.ready, dur -= rowsDur, out, [&] { return "adamw " + g.str(); });
    } else {
      if (p.rowsDone)
        dur -= rowsDur;
      end = onStream(Optimizer, p.ready, dur, out, [&] { return "adamw " + g.str(); });
      if (rows != rowsFirst_.end() && !p.rowsDone)
        rowsUpdated(end - dur + rowsDur);
    }
    tokens_[p.token] = end;
    updateEnd_[g] = end;
    // On a GPU the updated weights go back up before the next use, unless
    // they are streamed: then the program's own copies bring them. The
    // runtime uploads each piece (kUpdatePieceElems) as it is done, so the
    // upload starts after the first piece and ends a piece's copy after the
    // update, if the link keeps up.
    double linkFree = upload ? free_[ToDevice] : -1;
    updated_[g] = upload ? uploadPieces(end, dur, out, g) : end;
    paramsUpdated(g, end - dur, rows != rowsFirst_.end() && !p.rowsDone, early, linkFree);
    if (early) {
      earlyTaken_.erase(g);
      // Its early pieces done before: the table is whole when both are
      // (else the last piece makes it so, in fill).
      auto done = earlyDone_.find(g);
      if (done != earlyDone_.end())
        tableDone(g, done->second);
    }
    if (p.writeIssued >= 0)
      writeState(g, std::max(p.writeIssued, end), out);
  }

  // When each parameter of `g` is usable (group_wait with a parameter): the
  // update from `start` does them in the group's order, a table read rows
  // first ahead of the others (its rows before all when `rowsFirst`). On a
  // GPU each goes up piece by piece as they are done, on a link free from
  // `linkFree` (< 0: no upload), as a group's whole upload does above: its
  // copy starts with its first piece done and the link free, and ends no
  // sooner than its last piece's copy after its update.
  void paramsUpdated(StringRef g, double start, bool rowsFirst, bool early, double linkFree) {
    StringRef table = rowsTable_.lookup(g);
    double done = rowsFirst ? rowsFirst_.lookup(g) : 0;
    auto order = updateOrder_.find(g);
    if (order == updateOrder_.end())
      return;
    for (StringRef name : order->second) {
      // The table's rest is done (early rows) or comes now.
      double elems = name != table ? paramElems_.lookup(name) : early ? 0 : paramElems_.lookup(name) - rowsFirst_.lookup(g);
      done += elems;
      double t = start + done / p_.adamwParams;
      if (linkFree >= 0) {
        double piece = std::min(elems, double(fy::kUpdatePieceElems));
        double from = std::max(linkFree, t - (elems - piece) / p_.adamwParams);
        t = linkFree = std::max(from + elems * 4.0 / p_.h2dBytes, t + piece * 4.0 / p_.h2dBytes);
      }
      paramUpdated_[name] = t;
    }
  }

  void writeState(StringRef g, double ready, Prediction *out) {
    onStream(Ssd, ready, momentBytes_.lookup(g) / p_.ssdWriteBytes, out, [&] { return "state write " + g.str(); });
  }

  // The program waits until `t` for an update of `group`; waits for its
  // parameters one after another count as one.
  void waitFor(double t, StringRef group, StringRef what, Prediction *out) {
    if (out && t > free_[Compute]) {
      std::string name = ("@" + group + what).str();
      if (!out->updateWaits.empty() && out->updateWaits.back().what == name && what == " parameters")
        out->updateWaits.back().s += t - free_[Compute];
      else
        out->updateWaits.push_back({name, t - free_[Compute]});
    }
    free_[Compute] = std::max(free_[Compute], t);
  }

  // Runs `dur` on stream `s` once `ready`; returns the end.
  // Runs `dur` of work on stream `s` once it is free and `ready`; returns
  // its end. With a timeline asked for, the replayed step's slices go into
  // it, named by `what` (called only then).
  double onStream(Stream s, double ready, double dur, Prediction *out, llvm::function_ref<std::string()> what,
                  int64_t bytes = -1) {
    double start = std::max(free_[s], ready);
    free_[s] = start + dur;
    if (out) {
      out->busyS[s] += dur;
      if (timeline_)
        out->timeline.push_back({s, what(), start, start + dur, bytes});
    }
    return free_[s];
  }

  double readyOf(Value v) { return ready_.lookup(rootBuffer(v)); }

  // Replays one step from the streams' state; returns the compute stream's end.
  double replayStep(Block &body, const StepPhases &phases, Prediction *out) {
    ready_.clear();
    tokens_.clear();
    lastLanded_ = 0;
    int64_t updatesIssued = 0;
    for (Operation &op : body) {
      double issue = free_[Compute];  // the program's thread reaches op
      if (auto launch = dyn_cast<fs::LaunchOp>(op)) {
        double ready = issue;
        for (Value v : launch.getIns())
          ready = std::max(ready, readyOf(v));
        bool timed = false;
        double cost = launchCost(launch, p_, cuda_, operands16_, timed);
        double end = onStream(Compute, ready, cost, out, [&] { return launch.getKernel().str(); }, launchBytes(launch));
        if (out) {
          ++out->launches;
          out->launchesTimed += timed;
          (phases.backward(&op) ? out->backwardS : out->forwardS) += cost;
          out->kernelS[launch.getKernel()] += cost;
        }
        for (Value v : launch.getOuts())
          ready_[rootBuffer(v)] = end;
      } else if (auto copy = dyn_cast<fs::CopyOp>(op)) {
        copyOp(copy, issue, out);
      } else if (auto early = dyn_cast<fs::GradOffloadEarlyOp>(op)) {
        // As the runtime: in memory, without loss scaling, for a table read
        // rows first (on a GPU, one whose rows of the gradient come down on
        // their own at the group's grad_offload).
        StringRef g = early.getGroup();
        if (stateOnSsd_ || holds_ || eightBit_ || noEarly_.contains(g) || rowsTable_.lookup(g) != early.getParam() ||
            (cuda_ && !rowsGradFirst_.contains(g)))
          continue;
        runUntil(issue, out);
        waitFor(updateEnd_.lookup(g), g, " before its early rows go down", out);
        double ready = std::max(free_[Compute], readyOf(early.getGrad()));
        double table = paramElems_.lookup(early.getParam()), rows = rowsFirst_.lookup(g);
        Filler f{g, std::numeric_limits<double>::infinity(), table - rows - std::min(rows, table - rows)};
        f.tableElems = table;
        f.pieces = int64_t(std::ceil(table / double(fy::kUpdatePieceElems)));
        double landed;
        if (cuda_) {
          // The next batch's rows among them gathered down first; then the
          // chunks, the first now.
          landed = onStream(ToHost, ready, std::min(rows, table - rows) * 4.0 / p_.d2hBytes + p_.launchS, out,
                            [&] { return "down " + g.str() + " early rows"; });
          f.chunksLeft = f.pieces;
        } else {
          landed = onStream(Compute, ready, bufferBytes(early.getGrad().getType()) / p_.d2hBytes, out,
                            [&] { return "grad_offload_early " + g.str(); });
        }
        fillers_.push_back(f);
        if (cuda_)
          sendChunks(ready, early.getAllChunks(), out);
        earlyTable_[g] = early.getParam();
        earlyTaken_.insert(g);
        if (early.getHeld())
          releasedAt_[g] = std::numeric_limits<double>::infinity();  // until its early_release
        else
          releasedAt_.erase(g);
        earlyDone_.erase(g);
        Pending p{g, Value(), landed, -1};
        p.early = true;
        pending_.push_back(p);
      } else if (auto release = dyn_cast<fs::EarlyReleaseOp>(op)) {
        // The table's last read is done when the kernels before are: its
        // rows go up after that on a GPU, whose program thread releases the
        // part right away; on the CPU target the part waits for it.
        StringRef g = release.getGroup();
        if (!earlyTaken_.contains(g))
          continue;
        releasedAt_[g] = issue;
        if (!cuda_)
          for (Pending &p : pending_)
            if (p.early && p.group == g)
              p.ready = std::max(p.ready, issue);
      } else if (auto off = dyn_cast<fs::GradOffloadOp>(op)) {
        runUntil(issue, out);
        // The runtime updates a group once at a time: the program waits here
        // for the step before's update (what a group without a group_wait in
        // the step, an untied table read rows first, waits for); after its
        // early rows, there.
        const bool early = earlyTaken_.contains(off.getGroup());
        if (!early)
          waitFor(updateEnd_.lookup(off.getGroup()), off.getGroup(), " before its gradient goes down", out);
        double ready = free_[Compute], bytes = 0;
        for (Value g : off.getGrads())
          ready = std::max(ready, readyOf(g)), bytes += bufferBytes(g.getType());
        // The early table's batch rows come down with the rows' own copy.
        if (early)
          bytes -= paramElems_.lookup(earlyTable_.lookup(off.getGroup())) * 4.0;
        // On a GPU a table read rows first sends the next batch's rows of its
        // gradient down ahead of the whole one (gathered by a kernel).
        if (rowsGradFirst_.contains(off.getGroup()))
          rowsLanded_[off.getGroup()] =
              onStream(ToHost, ready, rowsFirst_.lookup(off.getGroup()) * 4.0 / p_.d2hBytes + p_.launchS, out,
                       [&] { return "down " + off.getGroup().str() + " rows"; });
        tokens_[off.getToken()] = onStream(cuda_ ? ToHost : Compute, ready, bytes / p_.d2hBytes, out,
                                           [&] { return "grad_offload " + off.getGroup().str(); }, int64_t(bytes));
        if (cuda_) {
          // A table's early chunks follow: one behind another group's
          // gradient, all that are left behind its own.
          sendChunks(ready, early, out);
          lastLanded_ = tokens_[off.getToken()];
          // The kernels after an early table's own grad_offload wait for
          // what the link has taken so far: its chunks and its own copy. A
          // group's gradients are waited for where their memory is freed
          // (grad_landed), else at the step's end.
          if (early)
            copyWait(std::max(lastLanded_, chunksLanded_.lookup(off.getGroup())), out);
        }
      } else if (auto landed = dyn_cast<fs::GradLandedOp>(op)) {
        if (cuda_)
          copyWait(tokens_.lookup(landed.getToken()), out);
      } else if (auto read = dyn_cast<fs::StateReadOp>(op)) {
        double bytes = momentBytes_.lookup(read.getGroup());
        tokens_[read.getToken()] =
            stateOnSsd_ ? onStream(Ssd, issue, bytes / p_.ssdReadBytes, out,
                                   [&] { return "state read " + read.getGroup().str(); }, int64_t(bytes))
                        : issue;
      } else if (auto update = dyn_cast<fs::GroupAdamWOp>(op)) {
        // A table whose rows of the gradient went down first: its rows can
        // start once that copy has landed (and any state read).
        StringRef g = update.getGroup();
        auto rowsLanded = rowsLanded_.find(g);
        double state = issue, grads = issue;
        for (Value d : update.getDeps()) {
          double &t = isa_and_nonnull<fs::GradOffloadOp>(d.getDefiningOp()) ? grads : state;
          t = std::max(t, tokens_.lookup(d));
        }
        pending_.push_back({g, update.getToken(), std::max(state, grads),
                            rowsLanded != rowsLanded_.end() ? std::max(state, rowsLanded->second) : -1});
        if (++updatesIssued == updatesPerStep_)
          runReleased(out);
      } else if (auto write = dyn_cast<fs::StateWriteOp>(op)) {
        // Written once its update is done: now if it was placed, else then.
        if (stateOnSsd_) {
          Pending *p = llvm::find_if(pending_, [&](const Pending &q) { return q.token == write.getUpdate(); });
          if (p != pending_.end())
            p->writeIssued = issue;
          else
            writeState(write.getGroup(), std::max(issue, tokens_.lookup(write.getUpdate())), out);
        }
      } else if (auto wait = dyn_cast<fs::WaitOp>(op)) {
        free_[Compute] = std::max(free_[Compute], tokens_.lookup(wait.getToken()));
      } else if (auto wait = dyn_cast<fs::GroupWaitOp>(op)) {
        if (auto param = wait.getParam())
          waitFor(paramUpdated_.lookup(*param), wait.getGroup(), " parameters", out);
        else
          waitFor(updated_.lookup(wait.getGroup()), wait.getGroup(), "", out);
      } else if (auto wait = dyn_cast<fs::GroupWaitRowsOp>(op)) {
        waitFor(rowsUpdated_.lookup(wait.getGroup()), wait.getGroup(), " rows", out);
      } else if (auto adamw = dyn_cast<fs::CpuAdamWOp>(op)) {
        double ready = std::max(issue, readyOf(adamw.getGrad()));
        double bytes = bufferBytes(adamw.getGrad().getType());
        // On a GPU's stream (fy-device-optimizer): p, m and v read and
        // written, g read, 28 bytes a parameter; else on the CPU, inline.
        auto name = [&] { return "adamw " + adamw.getParam().str(); };
        if (cuda_ && adamw.getOnDevice())
          onStream(Compute, ready, 7 * bytes / p_.memBytes + p_.launchS, out, name);
        else
          onStream(Compute, ready, bytes / 4.0 / p_.adamwParams, out, name);
      }
    }
    // And the step's end for the last group's copy.
    copyWait(lastLanded_, out);
    return free_[Compute];
  }

  void copyOp(fs::CopyOp copy, double issue, Prediction *out) {
    StringRef from = spaceOf(copy.getSource()), to = spaceOf(copy.getTarget());
    double bytes = bufferBytes(copy.getSource().getType()), ready = std::max(issue, readyOf(copy.getSource()));
    double end;
    auto name = [&] { return ("copy " + from + " to " + to).str(); };
    const int64_t b = int64_t(bytes);
    if (to == "ssd")
      end = onStream(Ssd, ready, std::ceil(bytes / 4096) * 4096 / p_.ssdWriteBytes, out, name, b);
    else if (from == "ssd")
      end = onStream(Ssd, ready, std::ceil(bytes / 4096) * 4096 / p_.ssdReadBytes, out, name, b);
    else if (from == "device" && to == "host")
      end = onStream(copyStream(copy, ToHost), ready, bytes / p_.d2hBytes, out, name, b);
    else if (from == "host" && to == "device")
      end = onStream(copyStream(copy, ToDevice), ready, bytes / p_.h2dBytes, out, name, b);
    else
      end = onStream(Compute, ready, 2 * bytes / p_.memBytes + p_.launchS, out, name, b);
    ready_[rootBuffer(copy.getTarget())] = end;
    if (copy.getToken())
      tokens_[copy.getToken()] = end;
  }

  // A started copy runs on its direction's stream on a GPU, while the
  // kernels after it run; the CPU target does every copy as it comes, as
  // does a GPU a copy without a token (on the compute stream).
  Stream copyStream(fs::CopyOp copy, Stream s) const { return cuda_ && copy.getToken() ? s : Compute; }

  ModuleOp module_;
  const Profile &p_;
  bool stateOnSsd_, timeline_, cuda_ = false;
  bool operands16_ = false;  // products on 16-bit copies of their operands (cuda, bf16 / fp16)
  std::array<double, NumStreams> free_{};
  llvm::DenseMap<Value, double> ready_, tokens_;
  llvm::StringMap<double> updated_;  // group -> when its weights are next usable
  llvm::StringMap<double> paramUpdated_;  // parameter -> when it is next usable
  llvm::StringMap<double> paramElems_;    // parameter -> its elements
  llvm::StringMap<StringRef> rowsTable_;  // group -> its table read rows first
  llvm::StringMap<SmallVector<StringRef>> updateOrder_;  // group -> its parameters in update order
  llvm::StringMap<double> rowsUpdated_;  // group -> when the next batch's rows of its table are
  llvm::StringMap<double> rowsFirst_;    // group -> elements of its table updated rows first
  llvm::StringSet<> rowsGradFirst_;      // groups whose table's rows of the gradient go down first
  llvm::StringMap<double> rowsLanded_;   // group -> when that copy lands
  llvm::StringMap<double> updateEnd_;    // group -> when the optimizer is done with its last update
  llvm::StringMap<StringRef> earlyTable_;  // group -> its table updated early (grad_offload_early)
  llvm::StringSet<> noEarly_;            // groups whose table the runtime does not hand over early
  bool eightBit_ = false;                // 8-bit moments: no early rows either
  llvm::StringSet<> earlyTaken_;         // groups whose early rows this step's update follows
  llvm::StringMap<double> earlyRows_;    // group -> when the next batch's rows among its early ones are up
  llvm::StringMap<double> earlyDone_;    // group -> when this step's early pieces ended
  llvm::StringMap<double> chunksLanded_;  // group -> when its early chunks sent so far land
  llvm::StringMap<double> releasedAt_;   // group -> when its held table's last read is done (early_release)
  double lastLanded_ = 0;                // when the step's last gradient copy lands (GPU)
  // A table's early pieces left to run when the worker is idle, from `ready`:
  // `elems` of work in `pieces` pieces; on a GPU piece k also waits for the
  // k-th chunk of the table's gradient to land (chunks: the landings of
  // those issued so far, `chunksLeft` still to issue).
  struct Filler {
    StringRef group;
    double ready, elems;
    int64_t pieces, done = 0;
    SmallVector<double> chunks;
    int64_t chunksLeft = 0;
    double tableElems = 0;
    // Elements of the table in piece (and chunk) k.
    double chunkElems(int64_t k) const {
      return std::min(double(fy::kUpdatePieceElems), tableElems - double(k) * double(fy::kUpdatePieceElems));
    }
  };
  SmallVector<Filler> fillers_;
  llvm::StringMap<int64_t> groupIndex_;  // group -> its place in the module (backward order)
  SmallVector<Pending> pending_;         // updates queued, not yet run
  int64_t updatesPerStep_ = 0;
  bool holds_ = false;                   // the updates wait for every gradient (loss scaling)
  llvm::StringMap<int64_t> groupParams_, momentBytes_;
};

} // namespace

Prediction predictStep(ModuleOp module, const Profile &profile, bool stateOnSsd, bool timeline) {
  return Replay(module, profile, stateOnSsd, timeline).run();
}

} // namespace fuyou
