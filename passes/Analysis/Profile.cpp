// The machine profile: reading a calibrated one, the built-in figures, a
// program's trace as kernel times, and the matmul rate between measured sizes.
#include "passes/Analysis/Profile.h"

#include "llvm/ADT/SmallVector.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/MemoryBuffer.h"

#include <algorithm>
#include <cmath>

namespace fuyou {

using llvm::SmallVector;
using llvm::StringRef;

namespace {

// Parses the JSON file at path into `out`; else the error, naming it as `what`.
std::string readJson(const std::string &path, const std::string &what, llvm::json::Value &out) {
  auto buf = llvm::MemoryBuffer::getFile(path);
  if (!buf)
    return "cannot read " + what + " '" + path + "': " + buf.getError().message();
  auto json = llvm::json::parse((*buf)->getBuffer());
  if (!json)
    return what + " '" + path + "' is not JSON: " + llvm::toString(json.takeError());
  out = std::move(*json);
  return "";
}

} // namespace

std::string loadProfile(const std::string &path, Profile &out) {
  llvm::json::Value json(nullptr);
  if (std::string e = readJson(path, "profile", json); !e.empty())
    return e;
  auto *obj = json.getAsObject();
  if (!obj || obj->getString("format") != "fuyou-profile-1")
    return "profile '" + path + "' is not a fuyou-profile-1 file (make one with fuyou-compile --calibrate)";
  Profile p;
  p.source = path;
  p.target = obj->getString("target").value_or("").str();
  p.device = obj->getString("device").value_or("").str();
  if (p.target != "cpu" && p.target != "cuda")
    return "profile '" + path + "': target must be cpu or cuda";
  struct Field {
    const char *key;
    double *to;
    bool required;
  } fields[] = {{"matmul_flops_per_s", &p.matmulFlops, true}, {"device_mem_bytes_per_s", &p.memBytes, true},
                {"launch_s", &p.launchS, true},               {"h2d_bytes_per_s", &p.h2dBytes, true},
                {"d2h_bytes_per_s", &p.d2hBytes, true},       {"ssd_read_bytes_per_s", &p.ssdReadBytes, false},
                {"ssd_write_bytes_per_s", &p.ssdWriteBytes, false}, {"adamw_params_per_s", &p.adamwParams, true},
                {"matmul_n", &p.matmulN, false}, {"matmul_n64_flops_per_s", &p.matmulN64Flops, false},
                {"matmul_n256_flops_per_s", &p.matmulN256Flops, false},
                {"matmul_n1024_flops_per_s", &p.matmulN1024Flops, false},
                {"matmul_n2048_flops_per_s", &p.matmulN2048Flops, false},
                {"transcendental_elems_per_s", &p.transcendentalElems, false},
                {"softmax_elems_per_s", &p.softmaxElems, false},
                {"norm_elems_per_s", &p.normElems, false},
                {"norm_grad_elems_per_s", &p.normGradElems, false},
                {"attention_flops_per_s", &p.attentionFlops, false}};
  // Profiles before the field was written: a GPU's were measured at bf16.
  std::optional<StringRef> precision = obj->getString("matmul_precision");
  if (precision && *precision != "bf16" && *precision != "fp16" && *precision != "fp32")
    return "profile '" + path + "': 'matmul_precision' must be bf16, fp16 or fp32";
  p.matmul16 = precision ? *precision != "fp32" : p.target == "cuda";
  for (Field &f : fields) {
    std::optional<double> v = obj->getNumber(f.key);
    if (!v && !f.required)
      continue;
    if (!v || !(*v > 0))
      return "profile '" + path + "': '" + f.key + "' must be a positive number";
    *f.to = *v;
  }
  out = p;
  return "";
}

std::string loadKernelTimes(const std::string &path, Profile &p) {
  llvm::json::Value json(nullptr);
  if (std::string e = readJson(path, "kernel times", json); !e.empty())
    return e;
  auto *obj = json.getAsObject();
  auto *events = obj ? obj->getArray("traceEvents") : nullptr;
  if (!events)
    return "kernel times '" + path + "' is not a trace (no traceEvents; write one with the program's --trace)";
  // On a GPU the compute track has when kernels were queued; the gpu track
  // has when they ran.
  StringRef track = p.target == "cuda" ? "gpu" : "compute";
  std::optional<int64_t> kernelTid, stepsTid, optimizerTid;
  for (const llvm::json::Value &v : *events) {
    auto *e = v.getAsObject();
    auto *args = e ? e->getObject("args") : nullptr;
    if (!args || e->getString("ph") != "M")
      continue;
    if (args->getString("name") == track)
      kernelTid = e->getInteger("tid");
    else if (args->getString("name") == "steps")
      stepsTid = e->getInteger("tid");
    else if (args->getString("name") == "cpu optimizer")
      optimizerTid = e->getInteger("tid");
  }
  // The first step pays page faults and warm-up: it is left out.
  double warm = -1;
  for (const llvm::json::Value &v : *events)
    if (auto *e = v.getAsObject(); e && stepsTid && e->getInteger("tid") == stepsTid && e->getString("ph") == "X") {
      double end = e->getNumber("ts").value_or(0) + e->getNumber("dur").value_or(0);
      warm = warm < 0 ? end : std::min(warm, end);
    }
  llvm::StringMap<llvm::DenseMap<int64_t, std::vector<double>>> samples;
  double adamwParams = 0, adamwSeconds = 0;  // the layer-group updates' slices: 16 bytes a parameter
  for (const llvm::json::Value &v : *events) {
    auto *e = v.getAsObject();
    auto *args = e ? e->getObject("args") : nullptr;
    if (!args || e->getString("ph") != "X")
      continue;
    std::optional<int64_t> bytes = args->getInteger("bytes"), tid = e->getInteger("tid");
    std::optional<double> ts = e->getNumber("ts"), dur = e->getNumber("dur");
    std::optional<StringRef> name = e->getString("name");
    if (!bytes || !ts || !dur || !name || *ts < warm)
      continue;
    if (kernelTid && tid == kernelTid) {
      samples[*name][*bytes].push_back(*dur * 1e-6);
    } else if (optimizerTid && tid == optimizerTid && (*name == "adamw" || name->starts_with("adamw, group"))) {
      adamwParams += double(*bytes) / 16;
      adamwSeconds += *dur * 1e-6;
    }
  }
  if (samples.empty())
    return "kernel times '" + path + "' has no kernel slices with bytes on its '" + track.str() +
           "' track after the first step (trace a " + p.target + " program of this fuyou-compile for 2 steps or more)";
  for (auto &kernel : samples)
    for (auto &[bytes, times] : kernel.getValue()) {
      std::sort(times.begin(), times.end());
      size_t n = times.size();
      p.kernelTimes[kernel.getKey()][bytes] = n % 2 ? times[n / 2] : (times[n / 2 - 1] + times[n / 2]) / 2;
    }
  p.kernelTimesSource = path;
  if (adamwParams > 0 && adamwSeconds > 0) {
    p.adamwParams = adamwParams / adamwSeconds;
    p.adamwFromTrace = true;
  }
  return "";
}

std::string loadPlanProfile(const std::string &profilePath, const std::string &target,
                            const std::string &kernelTimesPath, Profile &out) {
  out = builtinProfile(target);
  if (!profilePath.empty())
    if (std::string err = loadProfile(profilePath, out); !err.empty())
      return err;
  return kernelTimesPath.empty() ? "" : loadKernelTimes(kernelTimesPath, out);
}

Profile builtinProfile(const std::string &target) {
  Profile p;
  p.target = target;
  if (target == "cuda") {
    p.device = "H100 (built-in figures)";
    p.matmulFlops = 4e14, p.memBytes = 2.5e12, p.launchS = 5e-6;
    p.h2dBytes = p.d2hBytes = 2e10, p.ssdReadBytes = p.ssdWriteBytes = 2e9, p.adamwParams = 5e9;
  } else {
    p.device = "2-core VM (built-in figures)";
    p.matmulFlops = 5e10, p.memBytes = 8e9, p.launchS = 2e-6;
    p.h2dBytes = p.d2hBytes = 5e9, p.ssdReadBytes = p.ssdWriteBytes = 5e8, p.adamwParams = 3e8;
  }
  return p;
}

double Profile::matmulRate(double flops, bool gemmOnly) const {
  // (flops of one n^3 product, rate) for the sizes measured, ascending.
  SmallVector<std::pair<double, double>, 5> pts;
  auto add = [&](double n, double rate) {
    if (!(n > 0 && rate > 0))
      return;
    double f = 2 * n * n * n, t = f / rate;
    // Each operand's copy reads 4 bytes an element and writes 2; at most
    // half the measured time, lest a noisy bandwidth make the rest vanish.
    if (gemmOnly && matmul16 && memBytes > 0)
      t -= std::min(t / 2, 12 * n * n / memBytes);
    pts.push_back({f, f / t});
  };
  add(64, matmulN64Flops);
  add(256, matmulN256Flops);
  if (matmulN > 1024)
    add(1024, matmulN1024Flops);
  if (matmulN > 2048)
    add(2048, matmulN2048Flops);
  if (matmulN > 256)
    add(matmulN, matmulFlops);
  if (pts.size() < 2)
    return pts.empty() ? matmulFlops : pts.back().second;
  if (flops <= pts.front().first)
    return pts.front().second;
  for (size_t i = 1; i < pts.size(); ++i)
    if (flops <= pts[i].first) {
      double f = std::log(flops / pts[i - 1].first) / std::log(pts[i].first / pts[i - 1].first);
      return pts[i - 1].second + f * (pts[i].second - pts[i - 1].second);
    }
  return pts.back().second;
}

} // namespace fuyou
