// fy-choose-placement: the planner. Each candidate plan is carried out on a
// copy of the module by the passes that would carry it out for real, so its
// memory is the memory plan's own figure and its time the cost model's
// replay of exactly the ops it would run.
#include "passes/Analysis/CostModel.h"
#include "passes/AttrNames.h"
#include "passes/Analysis/StepPhases.h"
#include "passes/Passes.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Pass/PassManager.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/ADT/StringSet.h"

#include <cmath>

namespace fuyou {
#define GEN_PASS_DEF_CHOOSEPLACEMENT
#include "passes/Passes.h.inc"
} // namespace fuyou

using namespace mlir;

namespace {

struct Plan {
  SmallVector<StringRef> acts;  // one policy per forward segment
  StringRef params = "keep";
  bool earlyRows = true;  // a tied table's rows handed over early (fy-early-offload)
  bool allChunks = false; // ... their chunks down all at once
  int64_t landing = 1;     // fy-grad-landed's distance
  std::string key() const {
    return llvm::join(acts, ",") + "/" + params.str() + (earlyRows ? "" : "/late") + (allChunks ? "/all" : "") +
           (landing == 1 ? "" : "/land" + std::to_string(landing));
  }
};

struct Outcome {
  bool ok = false;  // the passes accepted the plan
  fuyou::Prediction pred;
  int64_t writeBehind = 0;  // the SSD writes in flight it was carried out with (0: it sends none)
  std::string error;        // why the passes refused it (!ok)
};

// What write-behind=0 tries for a plan that sends activations to SSD: each
// write in flight holds a host buffer, so more is faster only while the
// host budget has room.
constexpr int64_t kWriteBehinds[] = {1, 2, 4, 8, 16};

// The class search's refinement: at most this many rounds, each carrying
// out the corrected descent's end and this many moves of one or two segments.
constexpr int64_t kRefineRounds = 3, kRefineMoves = 8;
// A class search over at most this many counts carries them all out.
constexpr double kAllCounts = 64;

struct ChoosePlacement : fuyou::impl::ChoosePlacementBase<ChoosePlacement> {
  using ChoosePlacementBase::ChoosePlacementBase;

  void runOnOperation() override {
    ModuleOp module = getOperation();
    if (profile.empty() && target != "cpu" && target != "cuda")
      return fail("target must be cpu or cuda, got '" + target + "'");
    if (std::string err = fuyou::loadPlanProfile(profile, target, kernelTimes, prof_); !err.empty())
      return fail(err);
    if (state != "auto" && state != "ssd" && state != "memory")
      return fail("state must be ssd, memory or auto, got '" + state + "'");
    if (state == "ssd" && !prof_.hasSsd())
      return fail("state=ssd needs a profile with SSD rates (fuyou-compile --calibrate --ssd DIR)");
    // Groups updated on the device (fy-device-optimizer): the program runs
    // without --ssd, its moments in memory.
    const bool onDevice = llvm::any_of(module.getOps<fuyou::fysched::GroupOp>(), [](auto g) { return g.getOnDevice(); });
    if (onDevice && state == "ssd")
      return fail("state=ssd: the groups fy-device-optimizer put on the device keep the run off --ssd");
    stateOnSsd_ = !onDevice && (state == "ssd" || (state == "auto" && prof_.hasSsd()));
    if (search != "classes" && search != "exhaustive")
      return fail("search must be classes or exhaustive, got '" + search + "'");
    if (params != "auto" && params != "keep" && params != "stream")
      return fail("params must be keep, stream or auto, got '" + params + "'");
    if (earlyRows != "auto" && earlyRows != "yes" && earlyRows != "no")
      return fail("early-rows must be yes, no or auto, got '" + earlyRows + "'");
    if (earlyChunks != "auto" && earlyChunks != "paced" && earlyChunks != "all")
      return fail("early-chunks must be paced, all or auto, got '" + earlyChunks + "'");
    if (gradLanding < 0)
      return fail("grad-landing must be at least 0 (0: chosen), got " + std::to_string(gradLanding));
    if (writeBehind < 0)
      return fail("write-behind must be at least 0 (0: chosen), got " + std::to_string(writeBehind));
    auto step = module.lookupSymbol<func::FuncOp>("train_step");
    if (!step)
      return fail("no @train_step to plan");
    Block &body = step.getBody().front();
    fuyou::StepPhases phases(body);
    fuyou::ForwardSegments segments = fuyou::findForwardSegments(module, body, phases);
    segments_ = segments.count;
    classes_.clear();
    llvm::DenseMap<llvm::hash_code, size_t> classOf;
    for (int64_t s = 0; s < segments_; ++s) {
      auto [it, added] = classOf.try_emplace(segments.shape[s], classes_.size());
      if (added)
        classes_.emplace_back();
      classes_[it->second].push_back(s);
    }
    policies_ = {"keep", "host", "recompute", "selective"};
    // Predictable only with measured SSD rates, and only for a program run
    // with --ssd, which puts the moments there too.
    if (prof_.hasSsd() && stateOnSsd_)
      policies_.push_back("ssd");
    paramChoices_ = params == "auto" ? SmallVector<StringRef>{"keep", "stream"} : SmallVector<StringRef>{params};
    // Groups updated on the device (fy-device-optimizer) update the resident
    // working copy: nothing is streamed then.
    if (onDevice) {
      if (params == "stream")
        return fail("params=stream: the groups fy-device-optimizer put on the device need resident parameters");
      paramChoices_ = {"keep"};
    }

    // A plan given: only what it leaves open is chosen, the parameters'
    // placement under params=auto, the SSD writes in flight and a tied
    // table's early rows under early-rows=auto.
    std::optional<Plan> best = activations != "auto" ? given(module)
                               : search == "classes" ? classSearch(module)
                                                     : exhaustive(module);
    if (!best)
      return signalPassFailure();
    // A tied table's early rows move its gradient's copy ahead of the
    // blocks' on the link and its update among theirs: kept only where the
    // model predicts a shorter step (same memory: the buffer is live anyway).
    bool tied = llvm::any_of(body.getOps<fuyou::fysched::LaunchOp>(),
                             [](fuyou::fysched::LaunchOp l) { return l.getKernel() == "gather_grad_add"; });
    // On a GPU the early rows' chunks go down one behind each other group's
    // gradient, so as not to hold those up on the link, or all at once where
    // the model predicts a shorter step (the optimizer waits for the link).
    // The fastest of what is left open; a tie keeps the plan as found.
    if (tied) {
      const Plan found = *best;
      auto consider = [&](Plan q) {
        double step = cache_[best->key()].pred.stepS;
        if (const Outcome &o = evaluate(module, q); fits(o) && o.pred.stepS < step * (1 - 1e-9))
          best = q;
      };
      if (earlyRows == "auto" && found.earlyRows) {
        Plan late = found;
        late.earlyRows = late.allChunks = false;
        consider(late);
      }
      if (earlyChunks == "auto" && found.earlyRows && !found.allChunks && prof_.target == "cuda") {
        Plan all = found;
        all.allChunks = true;
        consider(all);
      }
    }
    // On a GPU, a group's gradients freed at the grad_offload two groups
    // on rather than the next: the kernels wait less for a large gradient's
    // copy, for the memory held meanwhile. Where the plan found no longer
    // fits with it but would be faster, the search runs again with it (it
    // may pay to recompute more), and the faster of the two stands.
    if (gradLanding == 0 && prof_.target == "cuda") {
      double foundS = cache_[best->key()].pred.stepS;
      Plan later = *best;
      later.landing = 2;
      const Outcome &o = evaluate(module, later);
      if (fits(o) && o.pred.stepS < foundS * (1 - 1e-9)) {
        best = later;
      } else if (!fits(o) && o.ok && o.pred.stepS < foundS * (1 - 1e-9) && activations == "auto") {
        landing_ = 2, quietNoFit_ = true;
        std::optional<Plan> again = search == "classes" ? classSearch(module) : exhaustive(module);
        landing_ = 1, quietNoFit_ = false;
        if (again && cache_[again->key()].pred.stepS < foundS * (1 - 1e-9))
          best = again;
      }
    }
    const Outcome &o = cache_[best->key()];
    auto plan = fuyou::fysched::PlanAttr::decided(
        &getContext(), llvm::join(best->acts, ","), best->params, tied ? (best->earlyRows ? "yes" : "no") : "",
        tied && best->earlyRows ? (best->allChunks ? "all" : "paced") : "", best->landing != 1 ? best->landing : 0,
        o.writeBehind, activations != "auto");
    // Against what the search cannot beat and what a user could name: the
    // bound, the busiest stream of keeping every activation (no plan with
    // the same parameters' placement does less on any stream), and the
    // fastest uniform plan that fits. (The uniform plans were carried out.)
    double bound = NAN, uniformS = NAN;
    std::string uniformName;
    if (activations == "auto") {
      double least = INFINITY;
      std::optional<Plan> uni;
      for (StringRef par : paramChoices_) {
        const Outcome &keep = evaluate(module, uniform("keep", par));
        if (keep.ok)
          least = std::min(least, busiest(keep.pred.busyS));
        for (StringRef pol : policies_)
          if (const Outcome &u = evaluate(module, uniform(pol, par));
              fits(u) && (!uni || u.pred.stepS < cache_[uni->key()].pred.stepS))
            uni = uniform(pol, par);
      }
      if (std::isfinite(least))
        bound = least;
      if (uni) {
        uniformName = (uni->acts.front() + "/" + uni->params).str();
        uniformS = cache_[uni->key()].pred.stepS;
      }
    }
    plan.withFigures(int64_t(cache_.size()), o.pred.stepS, uniformName, uniformS, bound, prof_.source,
                     stateOnSsd_ ? "ssd" : "memory")
        .setOn(module);
  }

  void fail(const std::string &msg) {
    getOperation().emitError("fy-choose-placement: ") << msg;
    signalPassFailure();
  }

  // The plan carried out on a copy: placement, memory plan, replay. With
  // write-behind=0 a plan that sends activations to SSD is carried out with
  // each of kWriteBehinds, and the fastest that fits the budgets (the least
  // over them if none does) stands for it; ties go to fewer buffers.
  const Outcome &evaluate(ModuleOp module, const Plan &plan) {
    std::string key = plan.key();
    if (auto it = cache_.find(key); it != cache_.end())
      return it->second;
    // Without SSD rates every count predicts the same (unpriced) step.
    if (writeBehind > 0 || !llvm::is_contained(plan.acts, "ssd") || !prof_.hasSsd())
      return cache_[key] = carryOut(module, plan, writeBehind > 0 ? writeBehind : 4);
    std::optional<Outcome> pick;
    Outcome refused;  // the passes' reason when no count can be carried out
    for (int64_t n : kWriteBehinds) {
      Outcome o = carryOut(module, plan, n);
      if (!o.ok && refused.error.empty())
        refused = o;
      if (o.ok && (!pick || better(o, *pick, 1e-3)))
        pick = o;
      // Past a count that fits, more in flight only takes more host memory:
      // stop once it no longer fits or no longer shortens the step.
      else if (pick && fits(*pick))
        break;
    }
    return cache_[key] = pick ? *pick : refused;
  }

  Outcome carryOut(ModuleOp module, const Plan &plan, int64_t ssdWriteBehind) {
    OwningOpRef<ModuleOp> copy(cast<ModuleOp>(module->clone()));
    {  // the early rows as this plan has them (its placement goes to the passes as options)
      auto given = fuyou::fysched::PlanAttr::of(*copy);
      StringRef rows = plan.earlyRows ? (given ? given.getEarlyRows() : StringRef()) : "no";
      StringRef chunks = plan.allChunks ? "all" : "paced";
      (given ? given.withEarly(rows, chunks)
             : fuyou::fysched::PlanAttr::decided(&getContext(), "", "keep", rows, chunks, 0, 0, false))
          .setOn(*copy);
    }
    PassManager pm(&getContext());
    // The plan chosen is carried out again, verified, by the pipeline itself.
    pm.enableVerifier(false);
    fuyou::PlacementOptions place;
    place.activations = llvm::join(plan.acts, ",");
    place.params = plan.params.str();
    place.readAhead = readAhead;
    place.paramPrefetch = paramPrefetch;
    place.activationPrefetch = activationPrefetch;
    place.copyWindow = copyWindow;
    place.writeBehind = ssdWriteBehind;
    place.gradLanding = plan.landing;
    fuyou::addPlacementPasses(pm, place);
    Outcome o;
    std::string quietError;
    {
      ScopedDiagnosticHandler quiet(&getContext(), [&](Diagnostic &d) {
        if (quietError.empty())
          quietError = d.str();
        return success();
      });
      o.ok = succeeded(pm.run(*copy));
    }
    if (o.ok)
      o.pred = fuyou::predictStep(*copy, prof_, stateOnSsd_);
    else
      o.error = quietError;
    if (llvm::is_contained(plan.acts, "ssd"))
      o.writeBehind = ssdWriteBehind;
    return o;
  }

  // `o` before `than`: it fits where `than` does not, else it is faster by
  // more than the share `margin` (both fit) or further within the budgets.
  bool better(const Outcome &o, const Outcome &than, double margin) const {
    if (fits(o) != fits(than))
      return fits(o);
    return fits(o) ? o.pred.stepS < than.pred.stepS * (1 - margin) : excess(o) < excess(than);
  }

  // The plan `activations` names, with each of paramChoices_: the better
  // that the passes can carry out, fitting the budgets or not (the memory
  // check refuses it then). None: the passes' error is the pass's.
  std::optional<Plan> given(ModuleOp module) {
    std::optional<Plan> best;
    std::string error;
    for (StringRef par : paramChoices_) {
      Plan q = fresh();
      q.params = par;
      StringRef(activations).split(q.acts, ',');
      const Outcome &o = evaluate(module, q);
      if (o.ok && (!best || better(o, evaluate(module, *best), 0)))
        best = q;
      if (!o.ok && error.empty())
        error = o.error;
    }
    if (!best && !error.empty())
      getOperation().emitError(error);  // the passes' own words, as without the planner
    else if (!best)
      fail("activations=" + activations + " cannot be carried out");
    return best;
  }

  // How far over the budgets, each as a share of its budget (0: fits).
  double excess(const Outcome &o) const {
    if (!o.ok)
      return INFINITY;
    double e = 0;
    if (gpuMem > 0)
      e += std::max<double>(0, double(o.pred.deviceBytes - gpuMem)) / double(gpuMem);
    if (cpuMem > 0)
      e += std::max<double>(0, double(o.pred.hostBytes - cpuMem)) / double(cpuMem);
    return e;
  }
  bool fits(const Outcome &o) const { return excess(o) == 0; }

  // No step is shorter than its busiest stream; on the CPU target the
  // kernels and the optimizer share the cores, so than the two together.
  double busiest(const std::array<double, fuyou::NumStreams> &busy) const {
    double most = *llvm::max_element(busy);
    return prof_.target == "cuda" ? most : std::max(most, busy[fuyou::Compute] + busy[fuyou::Optimizer]);
  }

  // A plan before its activations and parameters: the table's rows as the
  // options give them.
  Plan fresh() const {
    Plan q;
    q.earlyRows = earlyRows != "no";
    q.allChunks = earlyChunks == "all";
    q.landing = gradLanding > 0 ? gradLanding : landing_;
    return q;
  }

  Plan uniform(StringRef policy, StringRef params) const {
    Plan q = fresh();
    q.params = params;
    q.acts.assign(segments_, policy);
    return q;
  }

  // What the class search adds up of an outcome: the step, each stream's
  // busy time, device and host bytes.
  static constexpr size_t kDevice = 1 + fuyou::NumStreams, kHost = kDevice + 1, kFigures = kHost + 1;
  using Figures = std::array<double, kFigures>;
  static Figures figures(const Outcome &o) {
    Figures f{};
    f[0] = o.pred.stepS;
    for (size_t s = 0; s < fuyou::NumStreams; ++s)
      f[1 + s] = o.pred.busyS[s];
    f[kDevice] = double(o.pred.deviceBytes);
    f[kHost] = double(o.pred.hostBytes);
    return f;
  }

  // A class's policy, priced against keeping everything: k of the class's
  // segments under it change the figures by one + (k - 1) * slope.
  struct Price {
    bool ok = false;  // the passes carried out the plans it was priced by
    Figures one{}, slope{};
  };
  // The search's state: per class, how many of its segments take each policy.
  using Counts = SmallVector<SmallVector<int64_t>>;

  // The figures the prices predict for `n`, from the keep-all plan's `ref`.
  Figures predict(const Figures &ref, ArrayRef<SmallVector<Price>> prices, const Counts &n) const {
    Figures f = ref;
    for (size_t c = 0; c < n.size(); ++c)
      for (size_t p = 1; p < policies_.size(); ++p)
        if (int64_t k = n[c][p])
          for (size_t i = 0; i < kFigures; ++i)
            f[i] += prices[c][p].one[i] + double(k - 1) * prices[c][p].slope[i];
    return f;
  }
  // How far predicted figures are over the budgets (0: within), and their
  // step: no shorter than the busiest stream, whatever the changes add up to.
  std::pair<double, double> rank(const Figures &f) const {
    double e = 0;
    if (gpuMem > 0)
      e += std::max(0.0, f[kDevice] - double(gpuMem)) / double(gpuMem);
    if (cpuMem > 0)
      e += std::max(0.0, f[kHost] - double(cpuMem)) / double(cpuMem);
    std::array<double, fuyou::NumStreams> busy;
    std::copy_n(f.begin() + 1, fuyou::NumStreams, busy.begin());
    return {e, std::max(f[0], busiest(busy))};
  }

  // The plan of counts `n`: within a class the policies that send data
  // away take its first segments (read back last in backward, with the
  // most compute to hide the copy behind), then recompute and selective;
  // keep takes the last.
  Plan realize(const Counts &n, StringRef params) const {
    static constexpr StringRef kForwardOrder[] = {"ssd", "host", "recompute", "selective", "keep"};
    Plan q = uniform("keep", params);
    for (size_t c = 0; c < classes_.size(); ++c) {
      size_t at = 0;
      for (StringRef pol : kForwardOrder)
        if (auto it = llvm::find(policies_, pol); it != policies_.end())
          for (int64_t k = n[c][it - policies_.begin()]; k > 0; --k)
            q.acts[classes_[c][at++]] = *it;
    }
    return q;
  }

  // One placement of the parameters, priced: the keep-all plan's figures
  // and each class's policies against it.
  struct Model {
    StringRef params;
    Figures ref{};
    SmallVector<SmallVector<Price>> prices;
  };

  Counts countsOf(const Plan &q) const {
    Counts n;
    for (auto &members : classes_) {
      n.emplace_back(policies_.size(), 0);
      for (int64_t s : members)
        ++n.back()[llvm::find(policies_, q.acts[s]) - policies_.begin()];
    }
    return n;
  }

  // How `n` ranks on the prices, corrected by `offset` (what a plan carried
  // out measured beyond its prices).
  std::pair<double, double> rankOf(const Model &m, const Counts &n, const Figures &offset) const {
    Figures f = predict(m.ref, m.prices, n);
    for (size_t i = 0; i < kFigures; ++i)
      f[i] += offset[i];
    return rank(f);
  }
  // Nearer the budgets first; within them, faster by more than a rounding error.
  static bool ahead(std::pair<double, double> a, std::pair<double, double> b) {
    return a.first < b.first || (a.first == 0 && b.first == 0 && a.second < b.second * (1 - 1e-9));
  }

  // Every count one move away from `n`: `k` segments of a class from one
  // policy to another (k = 0: 1, 2, 4, ... as many as there are).
  SmallVector<Counts> moves(const Model &m, const Counts &n, int64_t k) const {
    SmallVector<Counts> out;
    for (size_t c = 0; c < n.size(); ++c)
      for (size_t from = 0; from < policies_.size(); ++from)
        for (size_t to = 0; to < policies_.size(); ++to) {
          if (to == from || (to && !m.prices[c][to].ok))
            continue;
          for (int64_t j = 1; j <= n[c][from] && (!k || j <= k); j *= 2) {
            out.push_back(n);
            out.back()[c][from] -= j, out.back()[c][to] += j;
          }
        }
    return out;
  }

  // The descent on the prices from `n`: the best move while one ranks ahead.
  Counts descend(const Model &m, Counts n, const Figures &offset) const {
    for (auto cur = rankOf(m, n, offset);;) {
      std::optional<Counts> next;
      auto nextRank = cur;
      for (Counts &q : moves(m, n, 0))
        if (auto r = rankOf(m, q, offset); ahead(r, nextRank))
          next = std::move(q), nextRank = r;
      if (!next)
        return n;
      n = std::move(*next), cur = nextRank;
    }
  }

  // Every way to split `total` segments among `parts` policies.
  static SmallVector<SmallVector<int64_t>> splits(int64_t total, size_t parts) {
    if (parts == 1)
      return {SmallVector<int64_t>{total}};
    SmallVector<SmallVector<int64_t>> out;
    for (int64_t k = total; k >= 0; --k)
      for (SmallVector<int64_t> &rest : splits(total - k, parts - 1)) {
        out.emplace_back(1, k);
        out.back().append(rest.begin(), rest.end());
      }
    return out;
  }

  // search=classes: see the pass's description.
  std::optional<Plan> classSearch(ModuleOp module) {
    std::optional<Plan> best;
    SmallVector<Plan> tried;  // in the order carried out
    auto consider = [&](const Plan &q) -> const Outcome & {
      const Outcome &o = evaluate(module, q);
      tried.push_back(q);
      if (fits(o) && (!best || o.pred.stepS < evaluate(module, *best).pred.stepS * (1 - 1e-9)))
        best = q;
      return o;
    };
    for (StringRef params : paramChoices_)
      for (StringRef pol : policies_)
        consider(uniform(pol, params));
    // Nothing is faster than keeping every activation, where that fits:
    // the other placements of the parameters are searched.
    SmallVector<StringRef> open;
    for (StringRef params : paramChoices_)
      if (const Outcome &keep = evaluate(module, uniform("keep", params)); keep.ok && !fits(keep))
        open.push_back(params);
    // Where the counts are few, every one is carried out.
    // (In logs: a class of n segments splits C(n + p - 1, p - 1) ways.)
    double space = std::log(double(open.size()));
    for (auto &members : classes_)
      space += std::lgamma(double(members.size() + policies_.size())) - std::lgamma(double(members.size() + 1)) -
               std::lgamma(double(policies_.size()));
    if (!open.empty() && space <= std::log(kAllCounts)) {
      SmallVector<Counts> all(1);
      for (auto &members : classes_) {
        SmallVector<Counts> grown;
        for (const Counts &n : all)
          for (SmallVector<int64_t> &split : splits(int64_t(members.size()), policies_.size())) {
            grown.push_back(n);
            grown.back().push_back(split);
          }
        all = std::move(grown);
      }
      for (StringRef params : open)
        for (const Counts &n : all)
          consider(realize(n, params));
      return best ? best : noFit(module);
    }
    SmallVector<Model> models;
    for (StringRef params : open) {
      Model &m = models.emplace_back();
      m.params = params;
      m.ref = figures(evaluate(module, uniform("keep", params)));
      m.prices.assign(classes_.size(), SmallVector<Price>(policies_.size()));
      for (size_t c = 0; c < classes_.size(); ++c)
        for (size_t p = 1; p < policies_.size(); ++p) {
          ArrayRef<int64_t> members = classes_[c];
          Plan one = uniform("keep", params);
          one.acts[members.front()] = policies_[p];  // where realize() puts the first
          const Outcome &o1 = consider(one);
          if (!o1.ok)
            continue;
          Price &pr = m.prices[c][p];
          Figures f1 = figures(o1);
          for (size_t i = 0; i < kFigures; ++i)
            pr.one[i] = f1[i] - m.ref[i];
          if (members.size() > 1) {
            Plan all = uniform("keep", params);
            for (int64_t s : members)
              all.acts[s] = policies_[p];
            const Outcome &oAll = consider(all);
            if (!oAll.ok)
              continue;
            Figures fAll = figures(oAll);
            for (size_t i = 0; i < kFigures; ++i)
              pr.slope[i] = (fAll[i] - m.ref[i] - pr.one[i]) / double(members.size() - 1);
          }
          pr.ok = true;
        }
      // The descent from each uniform plan the prices can express.
      for (size_t start = 0; start < policies_.size(); ++start) {
        if (start && llvm::any_of(m.prices, [&](auto &row) { return !row[start].ok; }))
          continue;
        Plan u = uniform(policies_[start], params);
        consider(realize(descend(m, countsOf(u), Figures{}), params));
      }
    }
    // Then, for each placement of the parameters, from its best plan
    // carried out, with the prices corrected by what that plan measured
    // beyond them: the descent's end again, and the moves of one or two
    // segments priced faster, nearest the budgets first, while one is.
    for (const Model &m : models) {
      std::optional<Plan> from;
      for (const Plan &q : tried)
        if (const Outcome &o = evaluate(module, q);
            q.params == m.params && fits(o) && (!from || o.pred.stepS < evaluate(module, *from).pred.stepS))
          from = q;
      for (int64_t round = 0; from && round < kRefineRounds; ++round) {
        Counts n = countsOf(*from);
        Figures offset = figures(evaluate(module, *from)), priced = predict(m.ref, m.prices, n);
        for (size_t i = 0; i < kFigures; ++i)
          offset[i] -= priced[i];
        SmallVector<Counts> next = moves(m, n, 1);
        for (size_t i = 0, singles = next.size(); i < singles; ++i)
          for (Counts &q : moves(m, next[i], 1))
            if (q != n)
              next.push_back(std::move(q));
        // Only plans not carried out yet and priced faster, nearest the
        // budgets first.
        const double was = evaluate(module, *from).pred.stepS;
        SmallVector<std::pair<std::pair<double, double>, Plan>> ranked;
        llvm::StringSet<> seen;
        for (const Counts &q : next) {
          Plan p = realize(q, m.params);
          if (cache_.contains(p.key()) || !seen.insert(p.key()).second)
            continue;
          if (auto r = rankOf(m, q, offset); r.second < was * (1 - 1e-9))
            ranked.push_back({r, std::move(p)});
        }
        llvm::stable_sort(ranked, [](auto &a, auto &b) { return a.first < b.first; });
        std::optional<Plan> faster;
        auto tryPlan = [&](const Plan &q) {
          const Outcome &o = consider(q);
          if (fits(o) && o.pred.stepS < (faster ? evaluate(module, *faster).pred.stepS : was) * (1 - 1e-9))
            faster = q;
        };
        tryPlan(realize(descend(m, n, offset), m.params));
        for (size_t i = 0; i < std::min<size_t>(ranked.size(), kRefineMoves); ++i)
          tryPlan(ranked[i].second);
        from = faster;
      }
    }
    return best ? best : noFit(module);
  }

  std::optional<Plan> exhaustive(ModuleOp module) {
    double total = std::pow(double(policies_.size()), double(segments_)) * paramChoices_.size();
    // A plan takes ~4 ms to carry out and replay for a 4-layer GPT-2 (seven
    // segments, 4^7 x 2 plans in 140 s on two cores): 50,000 is minutes.
    if (total > 50000) {
      fail("search=exhaustive over " + std::to_string(segments_) + " segments is " + std::to_string(int64_t(total)) +
           " plans: too many (use classes)");
      return std::nullopt;
    }
    std::optional<Plan> best;
    double bestTime = INFINITY;
    SmallVector<size_t> digit(segments_, 0);
    for (StringRef par : paramChoices_) {
      std::fill(digit.begin(), digit.end(), 0);
      while (true) {
        Plan q = fresh();
        q.params = par;
        for (size_t d : digit)
          q.acts.push_back(policies_[d]);
        const Outcome &o = evaluate(module, q);
        if (fits(o) && o.pred.stepS < bestTime)
          best = q, bestTime = o.pred.stepS;
        size_t i = 0;
        while (i < digit.size() && ++digit[i] == policies_.size())
          digit[i++] = 0;
        if (i == digit.size())
          break;
      }
    }
    return best ? best : noFit(module);
  }

  // No plan fits: name the least memory a plan needs. With both budgets,
  // where each alone can be met, the least of each among the plans that
  // meet the other.
  std::optional<Plan> noFit(ModuleOp module) {
    if (quietNoFit_)
      return std::nullopt;  // a second search's: the first one's plan stands
    int64_t leastDevice = INT64_MAX, leastHost = INT64_MAX;
    int64_t deviceWithinCpu = INT64_MAX, hostWithinGpu = INT64_MAX;
    for (auto &entry : cache_) {
      const fuyou::Prediction &p = entry.second.pred;
      if (!entry.second.ok)
        continue;
      leastDevice = std::min(leastDevice, p.deviceBytes);
      leastHost = std::min(leastHost, p.hostBytes);
      if (p.hostBytes <= cpuMem)
        deviceWithinCpu = std::min(deviceWithinCpu, p.deviceBytes);
      if (p.deviceBytes <= gpuMem)
        hostWithinGpu = std::min(hostWithinGpu, p.hostBytes);
    }
    const std::string gpu = " --gpu-mem " + std::to_string(gpuMem), cpu = " --cpu-mem " + std::to_string(cpuMem);
    const bool gpuShort = gpuMem > 0 && leastDevice > gpuMem, cpuShort = cpuMem > 0 && leastHost > cpuMem;
    std::string msg = "no placement fits";
    if (!gpuShort && !cpuShort)
      msg += gpu + " and" + cpu + " together: the plans within --gpu-mem need at least " +
             std::to_string(hostWithinGpu) + " bytes of host memory, those within --cpu-mem at least " +
             std::to_string(deviceWithinCpu) + " bytes of device memory";
    if (gpuShort)
      msg += gpu + " (the least device memory found: " + std::to_string(leastDevice) + " bytes)";
    if (cpuShort)
      msg += std::string(gpuShort ? " and" : "") + cpu + " (the least host memory found: " +
             std::to_string(leastHost) + " bytes)";
    fail(msg);
    return std::nullopt;
  }

  fuyou::Profile prof_;
  bool stateOnSsd_ = false;
  int64_t landing_ = 1;      // fresh()'s fy-grad-landed distance under grad-landing=0
  bool quietNoFit_ = false;  // a search that finds no plan is no error
  int64_t segments_ = 1;
  SmallVector<SmallVector<int64_t>> classes_;  // segments of the same shape, in forward order
  SmallVector<StringRef> policies_, paramChoices_;
  llvm::StringMap<Outcome> cache_;  // plan key -> its outcome
};

} // namespace
