// fuyou-compile MODEL.onnx -o OUT: ONNX training graph → native training program.
#include "compiler/importer/Importer.h"
#include "compiler/importer/OnnxModel.h"
#include "compiler/toolchain/Build.h"
#include "dialects/FySched/FySchedDialect.h"
#include "mlir/IR/MLIRContext.h"
#include "mlir/IR/Verifier.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/Cpp/CppEmitter.h"
#include "mlir/Transforms/Passes.h"
#include "passes/Analysis/CostModel.h"
#include "passes/Passes.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>
#include <filesystem>
#include <string>
#include <vector>

namespace {

struct Options {
  std::string model, out, target = "cpu", emit, precision, optimizer = "adamw";
  std::string lossScale;       // dynamic or none (default: dynamic at fp16)
  int64_t batch = 0, seq = 0;
  std::vector<std::string> freeze;
  bool syncOptimizer = false;  // AdamW inline, not overlapped with backward
  int64_t deviceOptimizer = 0;  // groups at the step's boundary whose AdamW runs on the GPU; -1: auto
  int64_t maxGroupBytes = 0;   // bound on a layer group's parameter bytes
  int64_t prefetchState = 3;   // updates ahead that a group's state is read
  int64_t ssdReadAhead = 4;    // activations read from SSD ahead of need
  int64_t ssdWriteBehind = 0;  // activations' SSD writes in flight before the oldest is waited for (0: planned)
  int64_t paramPrefetch = 0;   // launches ahead that a streamed weight's copy is issued
  int64_t copyWindow = 4;      // launches that may run while a host<->device copy is in flight
  int64_t activationPrefetch = 0;  // launches ahead that an activation's copy back to the device is issued
  std::string activations, params;   // placement; empty: keep, or auto under a budget
  int64_t gpuMem = 0, cpuMem = 0;    // budgets the plan must fit (0: none)
  std::string profile;               // the planner's machine profile (empty: built-in)
  std::string kernelTimes;           // a program's --trace whose kernel times the planner uses
  std::string planTrace;             // where the predicted step's timeline goes (Chrome trace JSON)
  std::string planSearch = "classes";
  std::string earlyRows = "auto";    // a tied table's rows handed over early: yes, no, auto (the planner's)
  std::string earlyChunks = "auto";  // ... and on a GPU sent down paced, all at once, or auto (the planner's)
  int64_t gradLanding = 0;           // fy-grad-landed's distance; 0: auto (the planner's, else 1)
  std::string rowsFirst = "yes";     // the next batch's rows of the token embedding updated first
  std::string paramWaits = "yes";    // the forward waits per parameter, not per group
  std::string earlyHold = "yes";     // a tied table's early rows handed over before its last read
  std::string fuse = "yes";          // fused attention and loss where the target has their kernels
  std::string halfActivations = "auto";  // activations in 16 bits at bf16/fp16 (auto: the CPU target)
  std::string state = "auto";        // where the planner takes AdamW's moments to be
  bool calibrate = false;
  std::string ssd;                   // --calibrate: where to measure the SSD
};

[[noreturn]] void die(const std::string &msg) {
  // One line, whatever the message quotes from the model (names may hold newlines).
  std::string line;
  for (char c : msg)
    line += static_cast<unsigned char>(c) < 0x20 ? ' ' : c;
  llvm::errs() << "fuyou-compile: error: " << line << "\n";
  std::exit(1);
}

// The temporaries' suffix: this process's own, so that two compiles to one
// -o never write each other's (or a user's OUT.tmp).
std::string tmpSuffix() { return ".tmp" + std::to_string(::getpid()); }

// Removes what compiles to `out` that are no longer running left behind
// (killed mid-build): OUT.tmpPID, OUT.tmpPID.cpp, OUT.tmpPID.weights.safetensors
// whose PID is no live process.
void removeDeadTemporaries(const std::string &out) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path o(out);
  const fs::path dir = o.has_parent_path() ? o.parent_path() : fs::path(".");
  const std::string stem = o.filename().string() + ".tmp";
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f.compare(0, stem.size(), stem) != 0)
      continue;
    const std::string rest = f.substr(stem.size());
    const size_t digits = rest.find_first_not_of("0123456789");
    const std::string pid = rest.substr(0, digits), suffix = digits == std::string::npos ? "" : rest.substr(digits);
    if (pid.empty() || pid.size() > 9 || (suffix != "" && suffix != ".cpp" && suffix != ".weights.safetensors"))
      continue;
    if (::kill(::pid_t(std::stol(pid)), 0) == 0 || errno != ESRCH)
      continue;  // a live compile's (or one we may not signal: not ours to judge)
    fs::remove(e.path(), ec);
  }
}

const char *kUsage =
    "usage: fuyou-compile MODEL.onnx -o OUT [--target cpu|cuda] [--batch B] [--seq T]\n"
    "                     [--precision bf16|fp16|tf32|fp32]  matrix products' operands (default bf16\n"
    "                                          on CUDA, fp32 on the CPU target, which rounds its operands\n"
    "                                          to bf16 or fp16 the way the tensor cores do; tf32: CUDA)\n"
    "                     [--loss-scale dynamic|none]  start backward from a dynamic loss scale, skipping\n"
    "                                          steps whose gradients overflow (default: dynamic at fp16)\n"
    "                     [--optimizer adamw|adamw8bit]  AdamW with fp32 or block-wise 8-bit moments\n"
    "                     [--freeze REGEX]... [--emit=fygraph|fysched|cpp|plan]  plan: the placement\n"
    "                                          decisions, memory and predicted step, stream by stream;\n"
    "                                          printed, or with -o written to OUT\n"
    "                     [--plan-trace FILE]  the predicted step's timeline, a track per stream, as\n"
    "                                          Chrome trace JSON (beside a program's --trace in Perfetto)\n"
    "                     [--gpu-mem SIZE] [--cpu-mem SIZE]  budgets the plan must fit (K, M, G suffixes):\n"
    "                                          the resident weights and device arena; the host arena.\n"
    "                                          With either, placement not given is chosen by the planner;\n"
    "                                          --gpu-mem is also the program's own default\n"
    "                     [--profile FILE]     the planner's machine profile (default: built-in figures)\n"
    "                     [--kernel-times TRACE]  kernel times measured by a program's --trace on this\n"
    "                                          machine, used where they cover a launch (else the profile)\n"
    "                     [--plan-search classes|exhaustive]  how the planner searches (default classes)\n"
    "                     [--early-rows yes|no|auto]  hand a tied embedding's rows that the batch does not\n"
    "                                          read to the optimizer during backward (auto: where the\n"
    "                                          planner predicts a faster step; yes when no planner runs)\n"
    "                     [--early-chunks paced|all|auto]  on a GPU, send those rows down a chunk behind\n"
    "                                          each other group's gradient, or all at once (auto: as the\n"
    "                                          planner predicts faster; paced when no planner runs)\n"
    "                     [--grad-landing N|auto]  free a group's gradients at the grad_offload N groups\n"
    "                                          later, where a GPU waits for their copy (auto: 1, or 2\n"
    "                                          where the planner predicts a faster step that fits)\n"
    "                     [--rows-first yes|no]  update the rows of the token embedding that the next\n"
    "                                          batch reads before the rest, which overlaps the next\n"
    "                                          forward (default yes; no: the table's update whole)\n"
    "                     [--param-waits yes|no]  the next forward waits for each parameter's update, not\n"
    "                                          for its whole group's (default yes)\n"
    "                     [--early-hold yes|no]  hand a tied table's early rows over as soon as their\n"
    "                                          gradient is written, their update held for the table's\n"
    "                                          last read (default yes; no: after that read)\n"
    "                     [--fuse yes|no|all]  attention without its T x T scores, a loss without its\n"
    "                                          logits, SwiGLU's product and RoPE's rotation in a\n"
    "                                          kernel each, where the target's kernels are measured (default\n"
    "                                          yes; no: the exported ops as they are, to measure side by\n"
    "                                          side; all: the CUDA target's new kernels too)\n"
    "                     [--state ssd|memory|auto]  AdamW's moments when the program runs: on SSD (--ssd)\n"
    "                                          or in memory (auto: ssd when the profile has SSD rates)\n"
    "                     [--sync-optimizer]   AdamW inline instead of overlapped with backward\n"
    "                     [--device-optimizer N|auto]  the AdamW of the N layer groups backward completes\n"
    "                                          last (the next forward's first) on the GPU, inline, their\n"
    "                                          moments in device memory (default 0; auto: plans 0-4,\n"
    "                                          8, 16, ... and all, and keeps the fastest predicted\n"
    "                                          within the budgets)\n"
    "                     [--max-group-bytes N] split layer groups above N bytes of parameters (e.g. 16M)\n"
    "                     [--prefetch-state N] read a group's optimizer state N updates ahead (default 3)\n"
    "                     [--ssd-read-ahead N] read activations kept on SSD N values ahead of need (default 4)\n"
    "                     [--ssd-write-behind N] wait for an activation's SSD write only when N more\n"
    "                                          have started, each from its own host buffer (default:\n"
    "                                          the planner's choice of 1-16)\n"
    "                     [--param-prefetch N] copy a streamed weight to the device N launches before\n"
    "                                          its first use in each phase (default 0)\n"
    "                     [--activation-prefetch N] copy an activation back to the device N launches\n"
    "                                          before its first backward use (default 0)\n"
    "                     [--copy-window N]    kernels may run N launches past a copy between host and\n"
    "                                          device before the program waits for it (default 4)\n"
    "                     [--activations keep|host|ssd|recompute|selective|auto]  values saved for backward\n"
    "                                          wait on the device (default), in host memory, on SSD (the\n"
    "                                          program then needs --ssd), or are computed again in\n"
    "                                          backward (selective: what needs no weight product again);\n"
    "                                          or P1,P2,... one per forward segment (layer group);\n"
    "                                          auto: the planner chooses under the budgets\n"
    "                     [--params keep|stream|auto]  weights resident on the device (default), or copied\n"
    "                                          from the host masters before each phase that uses them\n"
    "       fuyou-compile --calibrate [--target cpu|cuda] [--ssd DIR] [-o FILE]  measure this machine\n"
    "                                          into a profile (stdout without -o)\n";

int64_t parseCount(const std::string &flag, const std::string &v, long long least = 1) {
  char *end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end || x < least)
    die("--" + flag + " needs " + (least ? "a positive" : "a non-negative") + " integer, got '" + v + "'");
  return x;
}

// A byte count: digits with an optional K, M or G (binary) suffix.
int64_t parseSize(const std::string &flag, const std::string &v) {
  char *end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  std::string unit = end ? end : "";
  double scale = unit.empty() ? 1 : unit == "K" ? 1024.0 : unit == "M" ? 1048576.0 : unit == "G" ? 1073741824.0 : -1;
  if (v.empty() || end == v.c_str() || scale < 0 || !(x > 0))
    die("--" + flag + " needs a size such as 512M or 2G, got '" + v + "'");
  // At least a byte (0 would mean no bound at all), at most an exbibyte (and finite).
  const double bytes = x * scale;
  if (!(bytes >= 1 && bytes <= 1152921504606846976.0))
    die("--" + flag + " needs a size from 1 byte to 1 EiB, got '" + v + "'");
  return int64_t(bytes);
}

Options parse(int argc, char **argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  for (size_t i = 0; i < args.size(); ++i) {
    std::string a = args[i], val;
    bool hasVal = false;
    if (a.rfind("--", 0) == 0 && a.find('=') != std::string::npos) {
      val = a.substr(a.find('=') + 1);
      a = a.substr(0, a.find('='));
      hasVal = true;
    }
    auto next = [&]() -> std::string {
      if (hasVal)
        return val;
      if (i + 1 >= args.size())
        die("flag '" + a + "' needs a value");
      return args[++i];
    };
    if (a == "-h" || a == "--help") {
      llvm::outs() << kUsage;
      std::exit(0);
    } else if (a == "-o") o.out = next();
    else if (a == "--target") o.target = next();
    else if (a == "--precision") o.precision = next();
    else if (a == "--loss-scale") o.lossScale = next();
    else if (a == "--optimizer") o.optimizer = next();
    else if (a == "--batch") o.batch = parseCount("batch", next());
    else if (a == "--seq") o.seq = parseCount("seq", next());
    else if (a == "--freeze") o.freeze.push_back(next());
    else if (a == "--emit") o.emit = next();
    else if (a == "--sync-optimizer") o.syncOptimizer = true;
    else if (a == "--device-optimizer") {
      std::string v = next();
      o.deviceOptimizer = v == "auto" ? -1 : parseCount("device-optimizer", v, 0);
    }
    else if (a == "--max-group-bytes") o.maxGroupBytes = parseSize("max-group-bytes", next());
    else if (a == "--activations") o.activations = next();
    else if (a == "--params") o.params = next();
    else if (a == "--prefetch-state") o.prefetchState = parseCount("prefetch-state", next(), 0);
    else if (a == "--ssd-read-ahead") o.ssdReadAhead = parseCount("ssd-read-ahead", next());
    else if (a == "--ssd-write-behind") o.ssdWriteBehind = parseCount("ssd-write-behind", next());
    else if (a == "--param-prefetch") o.paramPrefetch = parseCount("param-prefetch", next(), 0);
    else if (a == "--copy-window") o.copyWindow = parseCount("copy-window", next(), 0);
    else if (a == "--activation-prefetch") o.activationPrefetch = parseCount("activation-prefetch", next(), 0);
    else if (a == "--gpu-mem") o.gpuMem = parseSize("gpu-mem", next());
    else if (a == "--cpu-mem") o.cpuMem = parseSize("cpu-mem", next());
    else if (a == "--profile") o.profile = next();
    else if (a == "--kernel-times") o.kernelTimes = next();
    else if (a == "--plan-trace") o.planTrace = next();
    else if (a == "--plan-search") o.planSearch = next();
    else if (a == "--early-rows") o.earlyRows = next();
    else if (a == "--early-chunks") o.earlyChunks = next();
    else if (a == "--grad-landing") {
      std::string v = next();
      o.gradLanding = v == "auto" ? 0 : parseCount("grad-landing", v);
    }
    else if (a == "--rows-first") o.rowsFirst = next();
    else if (a == "--param-waits") o.paramWaits = next();
    else if (a == "--early-hold") o.earlyHold = next();
    else if (a == "--fuse") o.fuse = next();
    else if (a == "--half-activations") o.halfActivations = next();
    else if (a == "--state") o.state = next();
    else if (a == "--calibrate") o.calibrate = true;
    else if (a == "--ssd") o.ssd = next();
    else if (!a.empty() && a[0] == '-') die("unknown flag '" + a + "' (see --help)");
    else if (o.model.empty()) o.model = a;
    else die("unexpected argument '" + a + "': one model at a time");
  }
  if (o.target != "cpu" && o.target != "cuda")
    die("--target must be cpu or cuda, got '" + o.target + "'");
  if (o.calibrate) {
    if (!o.model.empty())
      die("--calibrate measures the machine: it takes no model");
    return o;
  }
  if (!o.ssd.empty())
    die("--ssd is for --calibrate (the program takes its own --ssd when it runs)");
  if (o.model.empty())
    die("no model given (see --help)");
  bool budget = o.gpuMem > 0 || o.cpuMem > 0;
  if (o.activations.empty())
    o.activations = budget ? "auto" : "keep";
  if (o.params.empty())
    o.params = o.activations == "auto" ? "auto" : "keep";
  if (o.params == "auto" && o.activations != "auto")
    die("--params auto needs --activations auto: the planner chooses both");
  if (o.state != "auto" && o.state != "ssd" && o.state != "memory")
    die("--state must be ssd, memory or auto, got '" + o.state + "'");
  if (o.deviceOptimizer < 0 && o.target != "cuda")
    die("--device-optimizer auto is for --target cuda (on the CPU every update is on the CPU)");
  if (o.deviceOptimizer != 0 && o.params == "stream")
    die("--device-optimizer updates the resident working copies of its groups: not with --params stream");
  // The other groups' moments stay in memory too (train refuses --ssd).
  if (o.deviceOptimizer != 0 && o.state == "auto")
    o.state = "memory";
  if (o.deviceOptimizer != 0 && o.state == "ssd")
    die("--device-optimizer keeps those groups' moments in device memory and the others' in host memory: not with --state ssd");
  if (o.deviceOptimizer != 0 && fuyou::namesSsd(o.activations))
    die("--activations ssd needs a program run with --ssd, which a --device-optimizer program cannot take");
  if (o.syncOptimizer) {
    // Such a program cannot take --ssd, which activations on SSD and the
    // state on SSD both need.
    if (o.state == "ssd")
      die("--state ssd needs the layer-group optimizer: a --sync-optimizer program keeps AdamW's state in memory");
    o.state = "memory";
    if (fuyou::namesSsd(o.activations))
      die("--activations ssd needs a program run with --ssd, which a --sync-optimizer program cannot take");
  }
  if (o.planSearch != "classes" && o.planSearch != "exhaustive")
    die("--plan-search must be classes or exhaustive, got '" + o.planSearch + "'");
  if (o.earlyRows != "yes" && o.earlyRows != "no" && o.earlyRows != "auto")
    die("--early-rows must be yes, no or auto, got '" + o.earlyRows + "'");
  for (auto [flag, value] : {std::pair<const char *, std::string *>{"rows-first", &o.rowsFirst},
                              {"param-waits", &o.paramWaits}, {"early-hold", &o.earlyHold}})
    if (*value != "yes" && *value != "no")
      die(std::string("--") + flag + " must be yes or no, got '" + *value + "'");
  if (o.fuse != "yes" && o.fuse != "no" && o.fuse != "all")
    die("--fuse must be yes, no or all, got '" + o.fuse + "'");
  if (o.halfActivations != "auto" && o.halfActivations != "yes" && o.halfActivations != "no")
    die("--half-activations must be auto, yes or no, got '" + o.halfActivations + "'");
  // Early rows ride on rows first: the step's rows are the update's first part.
  if (o.rowsFirst == "no" && o.earlyRows == "yes")
    die("--early-rows yes needs --rows-first yes: the early rows are the rest of a table updated rows first");
  if (o.rowsFirst == "no")
    o.earlyRows = "no";
  if (o.earlyChunks != "paced" && o.earlyChunks != "all" && o.earlyChunks != "auto")
    die("--early-chunks must be paced, all or auto, got '" + o.earlyChunks + "'");
  if (o.earlyChunks != "auto" && o.target != "cuda")
    die("--early-chunks " + o.earlyChunks + " needs --target cuda: the CPU target has no link to send chunks across");
  if (o.gradLanding > 1 && o.target != "cuda")
    die("--grad-landing " + std::to_string(o.gradLanding) +
        " needs --target cuda: on the CPU target grad_offload copies the gradients before it returns");
  if (o.precision.empty())
    o.precision = o.target == "cuda" ? "bf16" : "fp32";
  if (o.target == "cpu" && o.precision == "tf32")
    die("--precision tf32 needs --target cuda (the CPU target has fp32, bf16 and fp16)");
  if (o.halfActivations == "yes" && o.precision != "bf16" && o.precision != "fp16")
    die("--half-activations yes needs --precision bf16 or fp16 (got " + o.precision + ")");
  if (o.lossScale.empty())
    o.lossScale = o.precision == "fp16" ? "dynamic" : "none";
  if (o.lossScale != "dynamic" && o.lossScale != "none")
    die("--loss-scale must be dynamic or none, got '" + o.lossScale + "'");
  if (o.lossScale == "dynamic" && o.syncOptimizer)
    die("--loss-scale dynamic needs the layer-group optimizer: a --sync-optimizer program updates during "
        "backward, before a later gradient can overflow");
  for (size_t at = 0, end; at <= o.activations.size(); at = end + 1) {
    end = std::min(o.activations.find(',', at), o.activations.size());
    std::string p = o.activations.substr(at, end - at);
    bool policy = p == "keep" || p == "host" || p == "ssd" || p == "recompute" || p == "selective";
    if (!policy && !(p == "auto" && o.activations == "auto"))
      die("--activations takes keep, host, ssd, recompute, selective or auto (or a comma-separated list of the "
          "first five), got '" + p + "'");
  }
  if (o.params != "keep" && o.params != "stream" && o.params != "auto")
    die("--params must be keep, stream or auto, got '" + o.params + "'");
  if (o.optimizer != "adamw" && o.optimizer != "adamw8bit")
    die("--optimizer must be adamw or adamw8bit, got '" + o.optimizer + "'");
  if (o.precision != "fp32" && o.precision != "bf16" && o.precision != "fp16" && o.precision != "tf32")
    die("--precision must be bf16, fp16, tf32 or fp32, got '" + o.precision + "'");
  if (o.emit.empty() && !fuyou::toolchain::haveTarget(o.target))
    die("--target cuda: this fuyou-compile was built without CUDA (no nvcc found when it was built)");
  if (!o.emit.empty() && o.emit != "fygraph" && o.emit != "fysched" && o.emit != "cpp" && o.emit != "plan")
    die("--emit must be fygraph, fysched, cpp or plan, got '" + o.emit + "'");
  if (o.emit.empty() && o.out.empty())
    die("no output given: -o OUT, or --emit=... to print");
  if (!o.planTrace.empty() && (o.emit == "fygraph" || o.emit == "fysched"))
    die("--plan-trace needs a placed program: not with --emit=" + o.emit);
  // -o names a file to write, not a directory (found now, not at the last rename).
  if (!o.out.empty() && (o.out.back() == '/' || llvm::sys::fs::is_directory(o.out)))
    die("-o " + o.out + " is a directory: -o names the program's file");
  // Nothing written (the outputs, or their temporaries) is an input (the
  // model, --profile, --kernel-times) or another output.
  std::vector<std::string> written;
  for (const std::string &base : {o.out, o.out + tmpSuffix()})
    if (!o.out.empty())
      for (const char *ext : {"", ".cpp", ".weights.safetensors"})
        written.push_back(base + ext);
  if (!o.planTrace.empty()) {
    for (const std::string &f : written)
      if (f == o.planTrace || llvm::sys::fs::equivalent(o.planTrace, f))
        die("--plan-trace " + o.planTrace + " is one of -o's files");
    written.insert(written.end(), {o.planTrace, o.planTrace + ".tmp"});
  }
  for (const auto &[flag, in] : {std::pair{"input model", &o.model}, std::pair{"--profile", &o.profile},
                                 std::pair{"--kernel-times", &o.kernelTimes}})
    for (const std::string &f : written)
      if (!in->empty() && llvm::sys::fs::equivalent(*in, f))
        die(std::string("the compile would overwrite the ") + flag + " file '" + *in + "' (with '" + f + "')");
  return o;
}

// The temporary outputs a signal (Ctrl-C, a scheduler's SIGTERM) must not
// leave behind; the handler only unlinks them and exits by the signal.
std::vector<std::string> &signalPaths() {
  static std::vector<std::string> paths;
  return paths;
}

extern "C" void removeAndExit(int sig) {
  fuyou::toolchain::stopBuild(sig);  // first: it may still be writing a temporary
  if (!signalPaths().empty()) {  // (else the compile was complete)
    for (const std::string &p : signalPaths())
      ::unlink(p.c_str());
    const char msg[] = "fuyou-compile: error: interrupted; nothing written\n";
    ssize_t ignored = ::write(2, msg, sizeof msg - 1);
    (void)ignored;
  }
  ::signal(sig, SIG_DFL);
  ::raise(sig);
}

// Signals ignored when the compile started (nohup, a background job) stay so.
void removeOnSignal(std::vector<std::string> paths) {
  signalPaths() = std::move(paths);
  for (int sig : fuyou::toolchain::kStopSignals) {
    struct sigaction old {};
    if (::sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN)
      continue;
    struct sigaction sa {};
    sa.sa_handler = removeAndExit;
    sigemptyset(&sa.sa_mask);
    ::sigaction(sig, &sa, nullptr);
  }
}

// Writes `path` through PATH.tmp, renamed, so that a failed write leaves no
// file that looks whole; errors start with `what`.
void writeThroughTmp(const std::string &named, const std::string &what,
                     llvm::function_ref<void(llvm::raw_ostream &)> print) {
  std::error_code ec;
  // A symbolic link (/dev/stdout) is written where it leads, never replaced.
  std::string path = named;
  llvm::SmallString<256> real;
  if (llvm::sys::fs::is_symlink_file(named) && !llvm::sys::fs::real_path(named, real) && llvm::sys::fs::exists(real))
    path = real.str().str();
  // A device or a FIFO (-o /dev/stdout) is written as it is: a rename would
  // put a file in its place.
  if (llvm::sys::fs::exists(path) && !llvm::sys::fs::is_regular_file(path)) {
    llvm::raw_fd_ostream os(path, ec);
    if (ec)
      die(what + "cannot write '" + path + "': " + ec.message());
    print(os);
    return;
  }
  const std::string tmp = path + ".tmp";
  {
    llvm::raw_fd_ostream os(tmp, ec);
    if (ec)
      die(what + "cannot write '" + tmp + "': " + ec.message());
    print(os);
    os.close();
    if (os.has_error()) {
      std::string why = os.error().message();
      os.clear_error();
      llvm::sys::fs::remove(tmp);
      die(what + "writing '" + tmp + "' failed: " + why);
    }
  }
  if ((ec = llvm::sys::fs::rename(tmp, path))) {
    llvm::sys::fs::remove(tmp);
    die(what + "cannot rename '" + tmp + "' to '" + path + "': " + ec.message());
  }
}

// --emit's text: to stdout, or with -o to that file.
void emitText(const Options &o, llvm::function_ref<void(llvm::raw_ostream &)> print) {
  if (o.out.empty())
    return print(llvm::outs());
  writeThroughTmp(o.out, "", print);
}

} // namespace

// --calibrate: the measuring is the runtime's (fuyou-calibrate, built
// beside this tool without MLIR, so it also runs where no compiler is).
int calibrate(const Options &o, const char *argv0) {
  std::string self = llvm::sys::fs::getMainExecutable(argv0, reinterpret_cast<void *>(&calibrate));
  std::string tool = (llvm::sys::path::parent_path(self) + "/fuyou-calibrate" +
                      (o.target == "cuda" ? "-cuda" : "")).str();
  if (!llvm::sys::fs::can_execute(tool))
    die("--calibrate --target " + o.target + ": " + tool + " is missing" +
        (o.target == "cuda" ? " (built only where nvcc was found)" : ""));
  std::vector<llvm::StringRef> args{tool};
  if (!o.out.empty())
    args.insert(args.end(), {"-o", o.out});
  if (!o.ssd.empty())
    args.insert(args.end(), {"--ssd", o.ssd});
  std::string err;
  int rc = llvm::sys::ExecuteAndWait(tool, args, std::nullopt, {}, 0, 0, &err);
  if (rc < 0)
    die("--calibrate: cannot run " + tool + ": " + err);
  return rc;
}

// A --plan-trace that could never be written fails before the compile
// (a FILE.tmp already there is left alone: the directory must take one).
static void checkPlanTrace(const Options &opts) {
  if (opts.planTrace.empty())
    return;
  const std::string tmp = opts.planTrace + ".tmp";
  if (int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644); fd >= 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
  } else if (errno != EEXIST) {
    die("--plan-trace: cannot write '" + tmp + "': " + std::strerror(errno));
  } else if (std::string dir = llvm::sys::path::parent_path(opts.planTrace).str();
             ::access(dir.empty() ? "." : dir.c_str(), W_OK | X_OK) != 0) {
    die("--plan-trace: cannot write in '" + dir + "': " + std::strerror(errno));
  }
}

// The model as fygraph, verified, its parameters' names in `paramNames`.
static mlir::OwningOpRef<mlir::ModuleOp> importOrDie(mlir::MLIRContext &ctx, const Options &opts,
                                                     const fuyou::onnx_in::Model &model, std::string &diag,
                                                     std::vector<std::string> &paramNames) {
  fuyou::onnx_in::NameFilter freeze;
  for (const auto &f : opts.freeze)
    if (std::string err = freeze.add(f); !err.empty())
      die(err);

  fuyou::ImportStats stats;
  std::string err;
  auto module = fuyou::importModel(ctx, model, freeze, stats, err);
  if (!module)
    die(opts.model + ": " + err);
  if (failed(mlir::verify(*module)))
    die(opts.model + ": the imported graph does not verify (a compiler bug): " + diag);
  diag.clear();  // what the passes report, not the import
  if (std::vector<std::string> unused = freeze.unused(); !unused.empty())
    die("--freeze '" + unused.front() + "' matches no parameter's name");
  // (The IR of such a model may still be looked at.)
  if (stats.trainableTensors == 0 && opts.emit != "fygraph" && opts.emit != "fysched")
    die(opts.model + ": no parameter is left to train (" + std::to_string(stats.frozenTensors) + " frozen)");
  for (const auto &w : stats.warnings)
    llvm::errs() << "fuyou-compile: warning: " << opts.model << ": " << w << "\n";
  llvm::errs() << "fuyou-compile: " << stats.trainableParams << " trainable parameters in "
               << stats.trainableTensors << " tensors, " << stats.frozenTensors
               << " frozen tensors\n";

  // Names of the initializers the program keeps, before lowering erases them.
  for (auto p : module->getOps<fuyou::fygraph::ParamOp>())
    paramNames.push_back(p.getSymName().str());
  return module;
}

// The pipeline's options are the compile's flags.
static void pipelineOptions(const Options &opts, fuyou::TrainPipelineOptions &po) {
  po.until = opts.emit == "fygraph" ? "fygraph" : "fysched";  // (the EmitC once the plan is checked)
  po.target = opts.target;
  po.precision = opts.precision;
  po.optimizer = opts.optimizer;
  po.lossScale = opts.lossScale == "dynamic";
  po.maxGroupBytes = opts.maxGroupBytes;
  po.syncOptimizer = opts.syncOptimizer;
  po.deviceOptimizer = opts.deviceOptimizer;
  po.prefetchState = opts.prefetchState;
  po.activations = opts.activations;
  po.params = opts.params;
  po.gpuMem = opts.gpuMem;
  po.cpuMem = opts.cpuMem;
  po.profile = opts.profile;
  po.kernelTimes = opts.kernelTimes;
  po.planSearch = opts.planSearch;
  po.state = opts.state;
  po.ssdReadAhead = opts.ssdReadAhead;
  po.ssdWriteBehind = opts.ssdWriteBehind;
  po.paramPrefetch = opts.paramPrefetch;
  po.copyWindow = opts.copyWindow;
  po.activationPrefetch = opts.activationPrefetch;
  po.gradLanding = opts.gradLanding;
  po.earlyRows = opts.earlyRows;
  po.earlyChunks = opts.earlyChunks;
  po.rowsFirst = opts.rowsFirst == "yes";
  po.paramWaits = opts.paramWaits == "yes";
  po.earlyHold = opts.earlyHold == "yes";
  po.fuse = opts.fuse;
  po.halfActivations = opts.halfActivations;
}

// The front passes, then the back ones; what --device-optimizer auto chose.
static void runPipelines(mlir::MLIRContext &ctx, mlir::OwningOpRef<mlir::ModuleOp> &module, const Options &opts,
                         const fuyou::TrainPipelineOptions &po, std::string &diag) {
  mlir::PassManager pm(&ctx);
  fuyou::addFrontPasses(pm, po);
  fuyou::addBackPasses(pm, po);
  if (failed(pm.run(*module)))
    die(opts.model + ": " + (diag.empty() ? "compilation failed" : diag));
  if (auto plan = fuyou::fysched::PlanAttr::of(*module); plan && plan.getDeviceGroups() >= 0) {
    llvm::errs() << "fuyou-compile: --device-optimizer auto: " << plan.getDeviceGroups() << " group(s), predicted "
                 << llvm::format("%.3f", plan.getDeviceStepS().getValueAsDouble() * 1e3) << " ms a step";
    if (auto none = plan.getDeviceNoneStepS())
      llvm::errs() << " (" << llvm::format("%.3f", none.getValueAsDouble() * 1e3) << " ms with none)";
    llvm::errs() << "\n";
  }
}

// The plan against the budgets, before any file is written; --plan-trace and
// --emit=plan (true: the plan was the output).
static bool checkPlan(const mlir::OwningOpRef<mlir::ModuleOp> &module, const Options &opts) {
  fuyou::Profile profile;
  if (std::string e = fuyou::loadPlanProfile(opts.profile, opts.target, opts.kernelTimes, profile); !e.empty())
    die(e);
  if (opts.state == "ssd" && !profile.hasSsd())
    die("--state ssd needs a profile with SSD rates (fuyou-compile --calibrate --ssd DIR)");
  bool stateOnSsd = opts.state == "ssd" || (opts.state == "auto" && profile.hasSsd());
  if (!opts.planTrace.empty())
    writeThroughTmp(opts.planTrace, "--plan-trace: ", [&](llvm::raw_ostream &os) {
      fuyou::writeTimeline(fuyou::predictStep(*module, profile, stateOnSsd, /*timeline=*/true), os);
    });
  if (opts.emit == "plan") {
    emitText(opts, [&](llvm::raw_ostream &os) {
      fuyou::printPlan(*module, profile, stateOnSsd, opts.gpuMem, opts.cpuMem, os);
    });
    return true;
  }
  fuyou::Prediction p = fuyou::predictStep(*module, profile, stateOnSsd);
  if (opts.gpuMem > 0 && p.deviceBytes > opts.gpuMem)
    die("--gpu-mem " + std::to_string(opts.gpuMem) + " bytes is too small for this placement: it needs " +
        std::to_string(p.deviceBytes) + " (parameters, the device arena and the runtime's scratch; see --emit=plan)");
  if (opts.cpuMem > 0 && p.hostBytes > opts.cpuMem)
    die("--cpu-mem " + std::to_string(opts.cpuMem) + " bytes is too small for this placement: its host arena and staging take " +
        std::to_string(p.hostBytes) + " bytes (see --emit=plan)");
  return false;
}

// OUT, OUT.cpp and OUT.weights.safetensors (the parameters no ONNX file
// addresses, when there are any) appear together or not at all,
// and a failed or interrupted compile leaves the ones an earlier compile
// wrote as they were: each is written under a .tmp name, and the three
// are renamed over them only once the executable is built.
static void writeProgram(const Options &opts, const fuyou::onnx_in::Model &model,
                         const std::vector<std::string> &paramNames, const std::string &cpp) {
  removeDeadTemporaries(opts.out);
  const std::string cppPath = opts.out + ".cpp", weights = opts.out + ".weights.safetensors";
  // (The C++ compiler goes by the extension.)
  const std::string tmpOut = opts.out + tmpSuffix(), tmpCpp = tmpOut + ".cpp",
                    tmpWeights = tmpOut + ".weights.safetensors";
  removeOnSignal({tmpCpp, tmpWeights, tmpOut});
  auto cleanup = [&] {
    for (const std::string *p : {&tmpOut, &tmpCpp, &tmpWeights})
      ::unlink(p->c_str());
  };
  std::string sourcesError;
  const std::string sources = fuyou::toolchain::weightSourcesCpp(model, paramNames, opts.out, sourcesError);
  if (!sourcesError.empty())
    die(opts.model + ": " + sourcesError);
  {
    std::error_code ec;
    llvm::raw_fd_ostream f(tmpCpp, ec);
    if (ec)
      die("cannot write '" + tmpCpp + "': " + ec.message());
    f << cpp << sources;
    f.close();
    if (f.has_error()) {
      f.clear_error();
      cleanup();
      die("cannot write '" + tmpCpp + "'");
    }
  }
  bool ownWeights = false;  // (a program whose parameters are all in the ONNX file has none)
  if (std::string e = fuyou::toolchain::writeWeights(model, paramNames, tmpWeights, ownWeights); !e.empty()) {
    cleanup();
    die(e);
  }
  int buildSignal = 0;
  if (std::string e = fuyou::toolchain::buildExecutable(tmpCpp, tmpOut, opts.target, &buildSignal); !e.empty()) {
    cleanup();
    if (llvm::is_contained(fuyou::toolchain::kStopSignals, buildSignal)) {
      // Ended by the signal, as the compile it interrupted: a shell loop stops.
      llvm::errs() << "fuyou-compile: error: " << e << "\n";
      llvm::errs().flush();
      ::signal(buildSignal, SIG_DFL);
      ::raise(buildSignal);
    }
    die(e);
  }
  // The executable last: it is what a user runs, and it reads the others.
  // No signal between the three (one that comes waits until they are done).
  const sigset_t stop = fuyou::toolchain::stopSignalSet();
  sigset_t before;
  ::sigprocmask(SIG_BLOCK, &stop, &before);
  // And no other compile's renames into the same directory between them
  // (two compiles to one -o leave one whole set): the directory is locked.
  const std::string dir = llvm::sys::path::parent_path(opts.out).str();
  const int dirFd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  // (Waited for 10 s at most: a lock that never comes, on a network file
  // system, must not hang the compile with its signals blocked.)
  for (int tries = 0; dirFd >= 0 && tries < 200 && ::flock(dirFd, LOCK_EX | LOCK_NB) != 0 && errno == EWOULDBLOCK;
       ++tries)
    ::usleep(50 * 1000);
  const std::pair<std::string, std::string> renames[] = {{tmpWeights, weights}, {tmpCpp, cppPath}, {tmpOut, opts.out}};
  if (!ownWeights)
    ::unlink(weights.c_str());  // an earlier compile's, which this program does not read
  for (const auto &[from, to] : renames) {
    if (from == tmpWeights && !ownWeights)
      continue;
    if (std::error_code ec = llvm::sys::fs::rename(from, to)) {
      cleanup();
      die("cannot rename '" + from + "' to '" + to + "': " + ec.message());
    }
  }
  if (dirFd >= 0)
    ::close(dirFd);  // (and the lock with it)
  signalPaths().clear();  // (a signal now ends the run as the compile it completed)
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
}

int main(int argc, char **argv) {
  Options opts = parse(argc, argv);
  if (opts.calibrate)
    return calibrate(opts, argv[0]);
  checkPlanTrace(opts);
  fuyou::onnx_in::Model model;
  fuyou::onnx_in::LoadOptions lo;
  lo.batch = opts.batch;
  lo.seq = opts.seq;
  if (std::string err = fuyou::onnx_in::loadModel(opts.model, lo, model); !err.empty())
    die(err);

  // One thread: the stop signals it blocks (around the build's start and
  // the renames) then reach no other, and no pass here runs in parallel.
  mlir::MLIRContext ctx(mlir::MLIRContext::Threading::DISABLED);
  // Diagnostics from the verifier and the passes become one error line each.
  std::string diag;
  mlir::ScopedDiagnosticHandler handler(&ctx, [&](mlir::Diagnostic &d) {
    if (d.getSeverity() == mlir::DiagnosticSeverity::Error && diag.empty()) {
      llvm::raw_string_ostream os(diag);
      os << d.getLocation() << ": " << d;
    }
    return mlir::success();
  });
  std::vector<std::string> paramNames;
  mlir::OwningOpRef<mlir::ModuleOp> module = importOrDie(ctx, opts, model, diag, paramNames);
  fuyou::TrainPipelineOptions po;
  pipelineOptions(opts, po);
  runPipelines(ctx, module, opts, po, diag);
  if (opts.emit != "fygraph" && checkPlan(module, opts))
    return 0;
  if (opts.emit == "fygraph" || opts.emit == "fysched") {
    emitText(opts, [&](llvm::raw_ostream &os) { module->print(os); });
    return 0;
  }
  mlir::PassManager lower(&ctx);
  lower.addPass(fuyou::createConvertFySchedToEmitC());
  if (failed(lower.run(*module)))
    die(opts.model + ": " + (diag.empty() ? "compilation failed" : diag));
  std::string cpp;
  llvm::raw_string_ostream cppOs(cpp);
  cppOs << "// Generated by fuyou-compile from " << opts.model << ". Do not edit.\n";
  if (failed(mlir::emitc::translateToCpp(*module, cppOs)))
    die(opts.model + ": emitting C++ failed: " + diag);
  if (opts.emit == "cpp") {
    emitText(opts, [&](llvm::raw_ostream &os) { os << cpp; });
    return 0;
  }
  writeProgram(opts, model, paramNames, cpp);
  return 0;
}
