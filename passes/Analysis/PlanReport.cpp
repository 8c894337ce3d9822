// What --emit=plan and --plan-trace print of a prediction.
#include "passes/Analysis/CostModel.h"
#include "passes/AttrNames.h"
#include "passes/Analysis/StepPhases.h"
#include "dialects/FySched/FySchedOps.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Format.h"

#include <algorithm>
#include <cmath>

using namespace mlir;
namespace fs = fuyou::fysched;

namespace fuyou {

void writeTimeline(const Prediction &p, llvm::raw_ostream &os) {
  // Chrome's trace format, as a program's --trace: a track per stream, the
  // step's work in microseconds from its start.
  os << "{\"traceEvents\": [\n";
  for (int s = 0; s < NumStreams; ++s)
    os << llvm::formatv("{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": {0}, "
                        "\"args\": {{\"name\": \"predicted {1}\"}},\n",
                        s, streamName(Stream(s)));
  os << llvm::formatv("{{\"ph\": \"M\", \"name\": \"thread_name\", \"pid\": 1, \"tid\": {0}, "
                      "\"args\": {{\"name\": \"predicted step\"}},\n",
                      int(NumStreams));
  for (const Prediction::Slice &s : p.timeline) {
    os << "{\"ph\": \"X\", \"pid\": 1, \"tid\": " << int(s.stream) << ", \"name\": " << llvm::json::Value(s.name)
       << ", \"ts\": " << llvm::format("%.3f", s.start * 1e6) << ", \"dur\": " << llvm::format("%.3f", (s.end - s.start) * 1e6);
    if (s.bytes >= 0)
      os << ", \"args\": {\"bytes\": " << s.bytes << "}";
    os << "},\n";
  }
  os << llvm::formatv("{{\"ph\": \"X\", \"pid\": 1, \"tid\": {0}, \"name\": \"step\", \"ts\": 0, \"dur\": {1:F3}}\n]}\n",
                      int(NumStreams), p.stepS * 1e6);
}

void printPlan(ModuleOp module, const Profile &profile, bool stateOnSsd, int64_t gpuMem, int64_t cpuMem,
               llvm::raw_ostream &os) {
  auto ms = [](double s) { return llvm::format("%.4g ms", s * 1e3); };
  auto plan = fs::PlanAttr::of(module);
  os << "profile: " << profile.source << " (" << profile.target << ", " << profile.device << ")\n";
  os << "optimizer state: " << (stateOnSsd ? "on SSD (--ssd)" : "in host memory") << "\n";
  // fy-device-optimizer's groups: their AdamW inline on the device.
  std::string onDevice;
  for (auto g : module.getOps<fs::GroupOp>())
    if (g.getOnDevice())
      onDevice += (onDevice.empty() ? "@" : ", @") + g.getSymName().str();
  if (!onDevice.empty())
    os << "AdamW on the device: " << onDevice << " (their moments in device memory)\n";
  Prediction p = predictStep(module, profile, stateOnSsd);
  if (!profile.kernelTimesSource.empty())
    os << "kernel times: " << p.launchesTimed << " of " << p.launches << " launches a step from "
       << profile.kernelTimesSource << ", the rest from the profile's rates\n";
  if (profile.adamwFromTrace)
    os << "AdamW: " << llvm::formatv("{0:e3}", profile.adamwParams) << " params/s from " << profile.kernelTimesSource
       << "\n";
  if (plan && plan.getEvaluated() > 0)
    os << "planner: " << plan.getEvaluated() << " plans evaluated, "
       << (plan.getGiven() ? "activations as given " : "chose activations ") << plan.getActivations()
       << ", parameters " << plan.getParams()
       << (plan.getEarlyRows().empty() ? "" : ", a tied table's rows early: " + plan.getEarlyRows().str())
       << (plan.getEarlyChunks() == "all" ? ", down all at once" : "")
       << (plan.getGradLanding() > 0 ? ", gradients freed " + std::to_string(plan.getGradLanding()) + " groups later"
                                     : "")
       << "\n";
  if (plan && plan.getWriteBehind() > 0)
    os << "planner: activations' SSD writes up to " << plan.getWriteBehind()
       << " in flight, each from its own host buffer (--ssd-write-behind)\n";
  auto step = module.lookupSymbol<func::FuncOp>("train_step");
  if (!step)
    return;
  Block &body = step.getBody().front();
  StepPhases phases(body);
  ForwardSegments seg = findForwardSegments(module, body, phases);
  // Bytes each segment's activations send to host memory and on to SSD.
  SmallVector<int64_t> toHost(seg.count, 0), toSsd(seg.count, 0);
  DenseMap<Value, int64_t> hostOf;  // host buffer -> segment whose value it holds
  for (auto copy : body.getOps<fs::CopyOp>()) {
    if (phases.backward(copy))
      continue;
    StringRef from = spaceOf(copy.getSource()), to = spaceOf(copy.getTarget());
    if (from == "device" && to == "host")
      if (auto it = seg.segmentOf.find(rootBuffer(copy.getSource())); it != seg.segmentOf.end()) {
        toHost[it->second] += bufferBytes(copy.getSource().getType());
        hostOf[rootBuffer(copy.getTarget())] = it->second;
      }
    if (from == "host" && to == "ssd")
      if (auto it = hostOf.find(rootBuffer(copy.getSource())); it != hostOf.end())
        toSsd[it->second] += bufferBytes(copy.getSource().getType());
  }
  SmallVector<StringRef> policies;
  (plan ? plan.getActivations() : StringRef()).split(policies, ',');
  auto remade = module->getAttrOfType<DenseI64ArrayAttr>(fuyou::attr::kRecomputedBytes);
  for (int64_t i = 0; i < seg.count; ++i) {
    os << "segment " << i << ": " << (int64_t(policies.size()) == seg.count ? policies[i] : policies.front());
    if (toHost[i])
      os << ", " << toHost[i] << " B out to host";
    if (toSsd[i])
      os << ", " << toSsd[i] << " B on to SSD";
    if (remade && i < int64_t(remade.size()) && remade[i])
      os << ", " << remade[i] << " B made again in backward";
    os << "\n";
  }
  os << "parameters: " << (module->hasAttr(fuyou::attr::kStreamedParams) ? "streamed per phase" : "resident") << "\n";
  os << "device: " << p.deviceBytes << " B";
  if (auto reserved = module->getAttrOfType<IntegerAttr>(fuyou::attr::kReservedDeviceBytes))
    os << " (" << reserved.getInt() << " B of it the runtime's scratch)";
  if (gpuMem > 0)
    os << " of --gpu-mem " << gpuMem << (p.deviceBytes <= gpuMem ? " (fits)" : " (OVER)");
  os << "\nhost: " << p.hostBytes << " B";
  if (cpuMem > 0)
    os << " of --cpu-mem " << cpuMem << (p.hostBytes <= cpuMem ? " (fits)" : " (OVER)");
  if (std::isfinite(p.stepS) || profile.hasSsd())
    os << "\npredicted step: " << ms(p.stepS) << "\n";
  else  // SSD copies at no rate
    os << "\npredicted step: not priced: the profile has no SSD rates (fuyou-compile --calibrate --ssd DIR)\n";
  // What the planner held it against (fy-choose-placement).
  if (auto uni = plan ? plan.getUniformStepS() : FloatAttr()) {
    auto [acts, params] = plan.getUniform().split('/');
    os << "  the fastest uniform plan that fits (--activations " << acts << " --params " << params
       << "): " << ms(uni.getValueAsDouble()) << llvm::format(", this plan x%.3f", p.stepS / uni.getValueAsDouble())
       << "\n";
  }
  if (auto bound = plan ? plan.getLowerBoundS() : FloatAttr())
    os << "  lower bound (the busiest stream when every activation is kept: no plan is faster): "
       << ms(bound.getValueAsDouble()) << llvm::format(", this plan x%.3f", p.stepS / bound.getValueAsDouble())
       << "\n";
  for (int s = 0; s < NumStreams; ++s) {
    os << "  " << streamName(Stream(s)) << ": busy " << ms(p.busyS[s]);
    if (s == Compute)
      os << " (forward " << ms(p.forwardS) << ", backward " << ms(p.backwardS) << ")";
    os << "\n";
  }
  // What the step waits for in the optimizer (the GPU's idle time).
  double waited = 0;
  for (const Prediction::Wait &w : p.updateWaits)
    waited += w.s;
  os << "  waits for updates: " << ms(waited);
  for (size_t i = 0; i < p.updateWaits.size(); ++i)
    os << (i ? ", " : " (") << p.updateWaits[i].what << " " << ms(p.updateWaits[i].s);
  os << (p.updateWaits.empty() ? "\n" : ")\n");
  if (p.copyWaitS > 0)
    os << "  waits for gradient copies: " << ms(p.copyWaitS) << "\n";
  // Where the kernels' time goes: the five costliest (ties by name).
  std::vector<std::pair<double, std::string>> kernels;
  for (auto &entry : p.kernelS)
    kernels.push_back({-entry.getValue(), entry.getKey().str()});
  std::sort(kernels.begin(), kernels.end());
  os << "  costliest kernels:";
  for (size_t i = 0; i < kernels.size() && i < 5; ++i)
    os << (i ? ", " : " ") << kernels[i].second << " " << ms(-kernels[i].first);
  os << "\n";
}

} // namespace fuyou
