// main() of a generated training executable: weights, data, the step loop
// with its JSON log, gradient dump and checkpoint (its flags: train_args.cpp).
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "data/tokens.h"
#include "abi/api.h"
#include "device/device.h"
#include "exec/runtime.h"
#include "trace/trace.h"
#include "exec/checkpoint.h"
#include "exec/train_args.h"
#include "exec/weights.h"
#include "io/safetensors.h"
#include "optim/adamw8bit.h"

namespace fy {

namespace {

std::string mib(int64_t bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", double(bytes) / 1048576.0);
  return buf;
}


// SIGINT, SIGTERM or SIGHUP (Ctrl-C, a scheduler's preemption, a closed terminal): the step under way
// finishes, then the run checkpoints to --save, cleans up and ends by the
// signal itself (so a shell loop around it stops too). A second one stops
// it at once. Signals ignored when the run started (a background job's
// SIGINT) stay ignored.
std::atomic<int> g_stop_signal{0};
constexpr int kStopSignals[3] = {SIGINT, SIGTERM, SIGHUP};  // SIGHUP: the terminal or session went away
bool g_caught[3] = {false, false, false};

const char* stop_signal_name(int sig) {
  return sig == SIGINT ? "interrupted (SIGINT)" : sig == SIGHUP ? "hung up (SIGHUP)" : "terminated (SIGTERM)";
}

void on_stop_signal(int sig) {
  const int saved = errno;
  g_stop_signal.store(sig);
  static const char msg[] = "train: stopping after this step (a checkpoint if --save; again to stop now)\n";
  ssize_t ignored = ::write(2, msg, sizeof msg - 1);
  (void)ignored;
  // Again to stop now: SIGINT or SIGTERM. A closed terminal's SIGHUP comes
  // twice (the shell's, then the session's), as a logout's SIGTERM then
  // SIGHUP: those must not stop the run before its checkpoint.
  for (int k = 0; k < 2; ++k)
    if (g_caught[k]) ::signal(kStopSignals[k], SIG_DFL);
  errno = saved;
}

void catch_stop_signals() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // blocking calls go on; the loop checks between steps
  for (int k = 0; k < 3; ++k) {
    struct sigaction old {};
    if (::sigaction(kStopSignals[k], nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    g_caught[k] = ::sigaction(kStopSignals[k], &sa, nullptr) == 0;
  }
  // A log or trace on a pipe whose reader went away (| head) is a failed
  // write, checkpointed and said, not a silent death.
  ::signal(SIGPIPE, SIG_IGN);
}

// Which parameters AdamW decays (--no-decay, --decay-1d); says so when not all.
void choose_decay(Runtime& rt, const TrainOptions& o) {
  std::vector<std::regex> res;
  for (const std::string& pattern : o.no_decay) {
    try {
      res.emplace_back(pattern, std::regex::ECMAScript);
    } catch (const std::regex_error& e) {
      fail("flag '--no-decay': invalid regex '" + pattern + "': " + e.what());
    }
  }
  std::vector<bool> used(res.size(), false);
  int64_t off = 0, trainable = 0, off_elems = 0;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const Runtime::Param& p = rt.param(i);
    if (!p.trainable) continue;
    ++trainable;
    bool decay = o.decay_1d || p.value.shape.rank >= 2;
    for (size_t k = 0; k < res.size(); ++k)
      if (std::regex_match(p.name, res[k])) used[k] = true, decay = false;
    rt.set_decay(i, decay);
    if (!decay) ++off, off_elems += p.value.numel();
  }
  // A pattern that names nothing is a typo, not a choice.
  for (size_t k = 0; k < res.size(); ++k)
    if (!used[k]) fail("flag '--no-decay': '" + o.no_decay[k] + "' matches no trainable parameter's name");
  if (off > 0)
    std::fprintf(stderr, "train: no weight decay for %lld of %lld trainable tensors (%.2f%% of the parameters)\n",
                 (long long)off, (long long)trainable,
                 100.0 * double(off_elems) / double(std::max<int64_t>(1, rt.trainable_elements())));
}

// The step-1 gradients recorded for --dump-grads, by parameter name.
std::vector<SafetensorsEntry> grad_entries(const Runtime& rt) {
  std::vector<SafetensorsEntry> out;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const Runtime::Param& p = rt.param(i);
    if (!p.trainable) continue;
    if (!p.recorded_grad.data) fail("--dump-grads: no gradient reached parameter '" + p.name + "' in step 1");
    out.push_back({p.name, DType::F32, p.value.shape.vec(), p.recorded_grad.data, {}});
  }
  return out;
}

// Python's json module reads these; %g would print "nan".
std::string json_number(double v, const char* fmt) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "Infinity" : "-Infinity";
  char buf[64];
  std::snprintf(buf, sizeof buf, fmt, v);
  return buf;
}

// The shortest text that reads back as the same double (0.0005, not
// 0.00050000000000000001).
std::string json_exact(double v) {
  if (!std::isfinite(v)) return json_number(v, "%g");
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

class JsonLog {
 public:
  // A resumed run goes on with the log it finds, from the checkpoint's step
  // (keep_through); any other starts it afresh (keep_through(0)). Opened
  // here, so that a bad path fails before minutes of loading, but cut back
  // only there, once the run's inputs are checked: a run refused before its
  // first step leaves the log as it was.
  explicit JsonLog(const std::string& path) : path_(path) {
    if (path.empty()) return;
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) fail("log file '" + path + "': cannot open for writing: " + std::strerror(errno));
  }
  ~JsonLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  JsonLog(const JsonLog&) = delete;
  JsonLog& operator=(const JsonLog&) = delete;
  // Keeps the log's whole records of steps 1..step, in place of what a run
  // killed after its checkpoint logged past it (and a record cut short by
  // the kill): the file is cut back after the last of them (to nothing for
  // step 0). A pipe or a terminal keeps what it was sent.
  void keep_through(int64_t step) {
    struct stat st, out;
    if (fd_ < 0 || ::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) return;
    // --log-json /dev/stdout with stdout sent to a file: that file is the
    // shell's, a stream to add to.
    for (int fd : {1, 2})
      if (::fstat(fd, &out) == 0 && out.st_dev == st.st_dev && out.st_ino == st.st_ino) return;
    std::string text;
    if (std::FILE* in = step > 0 ? std::fopen(path_.c_str(), "r") : nullptr) {
      char buf[1 << 16];
      for (size_t n; (n = std::fread(buf, 1, sizeof buf, in)) > 0;) text.append(buf, n);
      std::fclose(in);
    }
    size_t keep = 0;
    for (size_t at = 0, end; (end = text.find('\n', at)) != std::string::npos; at = end + 1) {
      const std::string line = text.substr(at, end - at);
      long long s = 0;
      if (std::sscanf(line.c_str(), "{\"step\": %lld,", &s) != 1 || s < 1 || s > step || line.back() != '}') break;
      keep = end + 1;
    }
    // Appends go to the new end (the file is open in append mode).
    if (::ftruncate(fd_, off_t(keep)) != 0)
      fail("log file '" + path_ + "': cannot cut it back to step " + std::to_string(step) + ": " + std::strerror(errno));
  }
  // One whole record per call, so a reader (or a crash) only ever sees
  // complete records: on a failed write (a full disk) the part that went
  // is cut off again and false returned, error() saying why.
  bool line(const std::string& s) {
    if (fd_ < 0) return true;
    struct stat st;
    const off_t before = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode) ? st.st_size : -1;
    for (size_t done = 0; done < s.size();) {
      const ssize_t n = ::write(fd_, s.data() + done, s.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        error_ = "log file '" + path_ + "': write failed: " + std::strerror(n < 0 ? errno : ENOSPC);
        if (before >= 0 && ::ftruncate(fd_, before) != 0) error_ += " (and the record cut short stays)";
        return false;
      }
      done += size_t(n);
    }
    return true;
  }
  const std::string& error() const { return error_; }

 private:
  std::string path_, error_;
  int fd_ = -1;
};

// Refuse, with the smallest workable figure, budgets the program cannot run
// in. --gpu-mem: before the device takes any memory.
void check_gpu_budget(Runtime& rt, const Device* device, const TrainOptions& o) {
  if (o.gpu_mem > 0) {
    if (rt.planned_temp_bytes() < 0) fail("--gpu-mem: this program carries no memory plan (recompile it)");
    // With a device: its scratch, and the moments of the parameters it updates.
    const int64_t fixed = device ? device->fixed_bytes() + rt.inline_state_bytes() : 0;
    int64_t need = rt.resident_param_bytes() + rt.planned_device_temp_bytes() + fixed;
    if (o.gpu_mem < need)
      fail("--gpu-mem " + mib(o.gpu_mem) + (o.gpu_mem_planned ? " (the budget the program was compiled for)" : "") +
           " is too small for this program: it needs at least " + mib(need) +
           " (parameters " + (rt.streamed_params() ? "streamed" : mib(rt.param_bytes())) + ", " +
           (rt.planned_arena_bytes() > 0 ? "the temporaries' arena " : "temporaries ") +
           mib(rt.planned_device_temp_bytes()) +
           (fixed > 0 ? ", library scratch, the step's inputs and moments updated there " + mib(fixed) : std::string()) +
           ")");
  }
}

// --cpu-mem; sizes the optimizer's gradient slots to the budget. Called
// before loading, and again once a device has set the optimizer's callbacks
// (which decide the rows-first buffers' size) before the first step.
void check_cpu_budget(Runtime& rt, const Device* device, const TrainOptions& o) {
  if (o.cpu_mem > 0) {
    // The device's own host buffers (gather_up's staging).
    const int64_t staged = device ? device->fixed_host_bytes() : 0;
    if (!rt.has_async_optimizer()) {
      const int64_t acts = rt.planned_host_arena_bytes(), need = rt.state_bytes_total() + acts + staged;
      std::string what = "its AdamW state";
      if (acts > 0) what += staged > 0 ? ", the activations it keeps in host memory" : " and the activations it keeps in host memory";
      if (staged > 0) what += " and the rows it gathers from host memory";
      if (o.cpu_mem < need)
        fail("--cpu-mem " + mib(o.cpu_mem) + " is too small for this program: " + what +
             (acts > 0 || staged > 0 ? " need " : " needs ") + mib(need) +
             " in memory (compile without --sync-optimizer and add --ssd to keep the state on SSD)");
      return;
    }
    AsyncOptimizer& opt = rt.async_optimizer();
    // Activations kept in host memory for backward count as fixed too.
    const int64_t acts = rt.planned_host_arena_bytes(), rows = int64_t(opt.rows_host_bytes());
    const int64_t accb = int64_t(opt.accum_host_bytes());
    // The parameters updated inline keep their moments in host memory too.
    int64_t fixed = int64_t(opt.min_fixed_host_bytes()) + acts + rt.inline_state_bytes() + staged;
    int64_t slot = int64_t(opt.slot_bytes());
    int64_t need = fixed + int64_t(opt.min_slots()) * slot;
    if (o.cpu_mem < need)
      fail("--cpu-mem " + mib(o.cpu_mem) + " is too small for this program: it needs at least " + mib(need) + " (" +
           (opt.on_ssd() ? "staging for two groups' AdamW state " : "AdamW state ") + mib(fixed - acts - rows - accb - staged) +
           ", " + (rows > 0 ? "rows-first buffers " + mib(rows) + ", " : std::string()) +
           (accb > 0 ? "accumulated gradients " + mib(accb) + ", " : std::string()) +
           (acts > 0 ? "activations in host memory " + mib(acts) + ", " : std::string()) +
           (staged > 0 ? "rows gathered from host memory " + mib(staged) + ", " : std::string()) +
           std::to_string(opt.min_slots()) + " gradient slot(s) of " + mib(slot) +
           (opt.on_ssd() || rt.inline_updates() ? ")" : "; add --ssd to keep the state on SSD)"));
    // What is left goes first to gradient slots (up to one per group: backward
    // never waits), then to more staging buffers (up to 8), which let the
    // program's state reads run further ahead.
    int64_t slots = std::min<int64_t>((o.cpu_mem - fixed) / (slot > 0 ? slot : 1), opt.num_groups());
    opt.set_slots(size_t(slots));
    if (opt.on_ssd()) {
      int64_t left = o.cpu_mem - fixed - slots * slot, per = int64_t(opt.staging_bytes());
      opt.set_staging(size_t(2 + std::min<int64_t>(per > 0 ? left / per : 0, 6)));
    }
  }
}

// One run of the program: the runtime and device it declares, its data,
// the steps from the first (0, or the checkpoint's) to --steps, and what
// the run reports and saves at the end.
class TrainRun {
 public:
  TrainRun(TrainOptions& o, JsonLog& log, TrainStepFn step, TrainStepFn eval) : o(o), log(log), step(step), eval(eval) {}

  // The runtime and device the program declares, checked against the flags.
  void declare(DeclareFn declare_program) {
    rt.set_options(o);
    if (!o.trace.empty()) rt.set_trace(std::make_unique<Trace>(o.trace));
    device = make_device(rt);
    rt.set_device(device.get());
    declare_program(&rt);
    if (!rt.inputs_declared()) fail("the program did not declare its inputs (declare_inputs)");
    // Only the layer-group optimizer keeps AdamW's state in the store,
    // accumulates, clips and scales the loss: refuse those for any other
    // program now, before weights load or a step runs.
    if (!rt.has_async_optimizer() || rt.inline_updates()) {
      const char* needs = !o.ssd_dirs.empty()  ? "--ssd"
                          : o.grad_accum > 1   ? "--grad-accum"
                          : o.clip_norm > 0    ? "--clip-norm"
                          : rt.loss_scaling() ? "loss scaling"
                          : rt.inline_updates() && (o.optimizer.empty() ? rt.optimizer_name() : o.optimizer) == "adamw8bit"
                              ? "8-bit AdamW"
                                               : nullptr;
      if (needs)
        fail(std::string(needs) + (rt.inline_updates() ? " needs the layer-group optimizer for every parameter; this "
                                                         "program was compiled with --device-optimizer"
                                                       : " needs the layer-group optimizer; this program was compiled "
                                                         "with --sync-optimizer"));
    }
    // The device budget the program was planned for is the run's, unless it
    // names another (or none).
    o.gpu_mem_planned = o.gpu_mem == 0 && rt.planned_gpu_mem() > 0;
    if (o.gpu_mem_planned) {
      o.gpu_mem = rt.planned_gpu_mem();
      std::fprintf(stderr, "train: --gpu-mem %s, the budget the program was compiled for (--gpu-mem SIZE|none to change)\n",
                   mib(o.gpu_mem).c_str());
    }
    if (o.gpu_mem < 0) o.gpu_mem = 0;
    rt.set_options(o);
    rt.settle_state();
    if (!o.adamw8bit_flag.empty() && rt.optimizer_name() != "adamw8bit")
      fail(o.adamw8bit_flag + " applies to 8-bit AdamW (--optimizer adamw8bit); this run's optimizer is " +
           rt.optimizer_name());
    choose_decay(rt, o);
    if (rt.optimizer_name() == "adamw8bit") {
      int64_t n8 = 0, t8 = 0, t = 0;
      for (int64_t i = 0; i < rt.num_params(); ++i) {
        const Runtime::Param& p = rt.param(i);
        if (!p.trainable) continue;
        ++t;
        if (p.q8_block) ++t8, n8 += p.value.numel();
      }
      std::fprintf(stderr, "train: adamw8bit: %lld of %lld tensors (%.1f%% of the parameters) keep 8-bit moments, %s\n",
                   (long long)t8, (long long)t, 100.0 * double(n8) / double(std::max<int64_t>(1, rt.trainable_elements())),
                   mib(rt.state_bytes_total()).c_str());
    }
    if (!o.resume_dir.empty()) {
      // A run killed after its final checkpoint has nothing left to do.
      const int64_t at = check_checkpoint(rt, o.resume_dir);
      if (at > o.steps)
        fail("--resume: the checkpoint in '" + o.resume_dir + "' is at step " + std::to_string(at) + ", past --steps " +
             std::to_string(o.steps));
    }
  }

  // The held-out file, the weights, the data and the buffers; the budgets;
  // the checkpoint's state on --resume.
  void load() {
    // The held-out file, before minutes of loading.
    B = rt.input_shape()[0], T = rt.input_shape()[1];
    if (!o.val_data.empty()) {
      if (!eval)
        fail("--val-data: this program has no evaluation step (compiled by an older fuyou-compile): compile it again");
      val = std::make_unique<const TokenFile>(o.val_data, rt.vocab());
      val->require_window(T);
      // A file of fewer windows than a batch still makes one (its rows wrap).
      const int64_t whole = std::max<int64_t>(1, val->windows(T) / B);
      if (o.val_batches > whole)
        fail("--val-batches " + std::to_string(o.val_batches) + ": '" + o.val_data + "' holds " +
             std::to_string(val->windows(T)) + " windows of " + std::to_string(T + 1) + " tokens, " +
             std::to_string(whole) + " batch(es) of " + std::to_string(B));
      val_batches = o.val_batches > 0 ? o.val_batches : std::min<int64_t>(20, whole);
    }
    load_weights(rt, o.weights, o.onnx, o.own_weights);

    // Shared with the optimizer (next_ids), which may outlive this scope on an error.
    data = std::make_shared<const TokenFile>(o.data, rt.vocab());
    data->require_window(T);

    idx = rt.alloc_pinned(Shape{B, T}, DType::I64);
    tgt = rt.alloc_pinned(Shape{B, T}, DType::I64);
    if (o.grad_accum > 1) rt.async_optimizer().set_accumulation(o.grad_accum);
    if (rt.has_async_optimizer()) {
      // The batches are a function of the step, so the optimizer may read the
      // next one while this one runs (the token embedding's rows first; at the
      // table's grad_offload: a batch's worth of ids, microseconds). The next
      // forward after an update is the next step's first micro-batch.
      rt.async_optimizer().set_next_ids(
          [data = data, B = B, T = T, K = o.grad_accum, steps = o.steps, targets = std::vector<int64_t>()](
              int64_t step, std::vector<int64_t>& ids) mutable {
            if (step >= steps) return false;
            ids.resize(size_t(B * T));
            targets.resize(size_t(B * T));
            data->batch(step * K, B, T, ids.data(), targets.data());
            return true;
          });
    }
    loss = rt.alloc_pinned(Shape{}, DType::F32);
    rt.set_record_grads(!o.dump_grads.empty());
    if (o.clip_norm > 0) rt.async_optimizer().set_clip_norm(o.clip_norm);
    if (rt.loss_scaling()) rt.async_optimizer().set_loss_scaling(o.loss_scale);

    check_gpu_budget(rt, device.get(), o);
    check_cpu_budget(rt, device.get(), o);

    if (!o.resume_dir.empty()) first = load_checkpoint(rt, o.resume_dir);
    if (device) {
      device->prepare();
      check_cpu_budget(rt, device.get(), o);
    }
    // The run starts: a rerun never leaves the previous run's records looking
    // like this one's.
    log.keep_through(first);
  }

  // Step s + 1: its micro-batches, log line, checkpoint; -1 to go on, else
  // the run's exit code (a stop signal).
  int train_step(int64_t s) {
    const int64_t K = o.grad_accum;
    rt.set_step(s + 1);
    auto t0 = std::chrono::steady_clock::now();
    // K micro-batches: the program runs K times, the optimizer updates after the last.
    double loss_sum = 0;
    {
      TraceSpan span(rt.trace(), "steps", "step ", s + 1);
      for (int64_t m = 0; m < K; ++m) {
        data->batch(s * K + m, B, T, idx.as<int64_t>(), tgt.as<int64_t>());
        // A program that forgot to write its loss logs NaN, not a stale value.
        loss.as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
        rt.set_micro_step(m);
        if (device)
          device->run_step(on(step), idx, tgt, loss);
        else
          step(&rt, idx, tgt, loss);
        check_program("step " + std::to_string(s + 1));
        loss_sum += loss.as<float>()[0];
      }
    }
    auto t1 = std::chrono::steady_clock::now();

    const double L = loss_sum / double(K);  // the micro-batches' mean (K = 1: the loss itself)
    const double ms = std::chrono::duration<double, std::milli>(t1 - t0).count();
    total_ms += ms;
    const double tps = ms > 0 ? double(B * T * K) / (ms / 1000.0) : 0.0;
    std::string extra, note;
    if (rt.loss_scaling()) {
      // The step's verdict: its gradients are all checked by now or soon.
      AsyncOptimizer::Verdict v = rt.async_optimizer().wait_verdict();
      extra = ", \"loss_scale\": " + json_number(v.scale, "%.9g") + ", \"skipped\": " + (v.skipped ? "true" : "false");
      if (v.skipped) {
        char buf[128];
        std::snprintf(buf, sizeof buf, "  skipped: inf/NaN gradients at loss scale %g, now %g", double(v.scale),
                      double(v.next));
        note = buf;
      }
    }
    if (o.clip_norm > 0) {
      rt.async_optimizer().wait_verdict();  // the norm comes with the verdict
      extra += ", \"grad_norm\": " + json_number(rt.async_optimizer().last_grad_norm(), "%.9g");
    }
    if (val && ((o.val_every > 0 && (s + 1) % o.val_every == 0) || s + 1 == o.steps)) {
      double val_ms = 0, wait_ms = 0;
      const double V = validate(s + 1, &val_ms, &wait_ms);
      total_ms += wait_ms;
      val_wait_ms += wait_ms;
      if (!std::isnan(V)) {
        extra += ", \"val_loss\": " + json_number(V, "%.9g") + ", \"val_ms\": " + json_number(val_ms, "%.4f");
        char buf[64];
        std::snprintf(buf, sizeof buf, "  val_loss %.4f", V);
        note = buf + note;
      } else {  // stopped by a signal: no partial figure, and said so
        note = "  validation stopped by the signal: no val_loss" + note;
      }
    }
    const bool logged = log.line("{\"step\": " + std::to_string(s + 1) + ", \"loss\": " + json_number(L, "%.9g") +
                                 ", \"lr\": " + json_exact(rt.adamw_config(s + 1).lr) +
                                 ", \"tokens_per_s\": " + json_number(tps, "%.1f") +
                                 ", \"ms\": " + json_number(ms, "%.4f") + extra + "}\n");
    if ((s + 1) % o.log_every == 0 || s + 1 == o.steps || !note.empty())
      std::fprintf(stderr, "step %lld/%lld  loss %.4f  %.1f ms  %.0f tok/s%s\n", (long long)(s + 1),
                   (long long)o.steps, L, ms, tps, note.c_str());
    // Nobody reads stderr any more (2>&1 | head): as a closed log, not a
    // run going on unseen.
    const bool stderr_closed = std::ferror(stderr) && errno == EPIPE;
    if (!logged || stderr_closed) {
      // The steps so far are not lost to a full log disk: checkpointed as
      // on SIGTERM, where --save has room.
      std::string saved = "nothing saved (no --save)";
      if (!o.save_dir.empty()) {
        try {
          checkpoint(s + 1);
          saved = "checkpoint in '" + o.save_dir + "'" + (logged ? "" : " (the log lacks this step)") + "; --resume " +
                  o.save_dir + " goes on";
        } catch (const std::exception& e) {
          saved = std::string("the checkpoint failed too: ") + e.what();
        }
      }
      if (rt.trace()) rt.trace()->write();
      fail((logged ? std::string("stderr: write failed: ") + std::strerror(EPIPE) : log.error()) + " after step " +
           std::to_string(s + 1) + ": " + saved);
    }

    if (s == 0 && !o.dump_grads.empty()) {
      write_safetensors(o.dump_grads, grad_entries(rt));
      rt.set_record_grads(false);
    }
    const bool stopping = g_stop_signal.load() != 0 && s + 1 < o.steps;
    if ((o.save_every > 0 && (s + 1) % o.save_every == 0 && s + 1 < o.steps) || (stopping && !o.save_dir.empty())) {
      checkpoint(s + 1);
    }
    if (stopping) {
      const int sig = g_stop_signal.load();
      if (rt.trace()) rt.trace()->write();
      std::fprintf(stderr, "train: %s after step %lld of %lld: %s\n", stop_signal_name(sig),
                   (long long)(s + 1), (long long)o.steps,
                   o.save_dir.empty() ? "nothing saved (no --save)"
                                      : ("checkpoint in '" + o.save_dir + "'; --resume " + o.save_dir + " goes on").c_str());
      return 128 + sig;
    }
    return -1;
  }

  int train() {
    for (int64_t s = first; s < o.steps; ++s)
      if (const int rc = train_step(s); rc >= 0) return rc;
    if (val && first == o.steps) {
      // Nothing to train: the run evaluates the weights it loaded.
      double val_ms = 0, wait_ms = 0;
      const double V = validate(first, &val_ms, &wait_ms);
      if (const int sig = g_stop_signal.load(); sig != 0) {
        std::fprintf(stderr, "train: %s during the evaluation: no val_loss\n",
                     stop_signal_name(sig));
        return 128 + sig;
      }
      std::fprintf(stderr, "train: val_loss %.9g after step %lld (%lld batches of %lldx%lld tokens, %.1f ms)\n", V,
                   (long long)first, (long long)val_batches, (long long)B, (long long)T, val_ms);
    }
    if (rt.has_async_optimizer() && first < o.steps) {
      // The last updates finish after the last step; the wait is not compute.
      AsyncOptimizer& opt = rt.async_optimizer();
      // (wait_all is not counted in wait_seconds: timed here.)
      const auto tail0 = std::chrono::steady_clock::now();
      opt.wait_all();
      double tail_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - tail0).count();
      double steps = double(o.steps - first);
      double step_ms = (total_ms + tail_ms) / steps;
      double opt_ms = opt.busy_seconds() * 1000.0 / steps;
      double compute_ms = step_ms - ((opt.wait_seconds() - eval_wait_s) * 1000.0 + val_wait_ms + tail_ms) / steps;
      // Whether a tied table's rows went early (fy-early-offload), when the program has them.
      char early[96] = "";
      if (opt.early_updates() > 0)
        std::snprintf(early, sizeof early, "; the embedding's rows early in %lld of %lld steps",
                      (long long)opt.early_updates(), (long long)(o.steps - first));
      std::fprintf(stderr,
                   "train: per step: %.2f ms, compute %.2f ms, optimizer %.2f ms (in the background, "
                   "%d groups%s)\n",
                   step_ms, compute_ms, opt_ms, int(opt.num_groups()), early);
      if (const store::TensorStore* st = opt.store()) {
        store::StoreCounters c = st->counters();
        double per = steps * double(rt.trainable_elements());
        std::fprintf(stderr,
                     "train: store: %.1f MiB read, %.1f MiB written (%.2f B/param/step), busy %.2f ms/step, "
                     "staging %.1f MiB\n",
                     c.bytes_read / 1048576.0, c.bytes_written / 1048576.0, (c.bytes_read + c.bytes_written) / per,
                     c.busy_seconds * 1000.0 / steps, double(opt.fixed_host_bytes()) / 1048576.0);
      }
    }

    if (rt.ssd() && first < o.steps) {
      store::StoreCounters c = rt.ssd()->counters();
      double steps = double(o.steps - first);
      std::fprintf(stderr, "train: activations on SSD: %.2f MiB written, %.2f MiB read per step, busy %.2f ms/step\n",
                   c.bytes_written / 1048576.0 / steps, c.bytes_read / 1048576.0 / steps, c.busy_seconds * 1000.0 / steps);
    }
    if (device && first < o.steps)
      if (std::string line = device->summary(); !line.empty()) std::fprintf(stderr, "train: %s\n", line.c_str());
    if (device) device->settle_masters();
    if (!o.save_dir.empty()) save_checkpoint(rt, o.save_dir, o.steps);
    if (rt.trace()) rt.trace()->write();
    return 0;
  }

 private:
  // After each run of the program: its temporaries within the plan, and all freed.
    void check_program(const std::string& what) {
      const Runtime::PoolStats& pool = device ? device->pool_stats() : rt.pool_stats();
      if (rt.planned_temp_bytes() >= 0 && pool.peak_bytes > rt.planned_temp_bytes())
        fail(what + " held " + std::to_string(pool.peak_bytes) + " bytes of temporaries at once, more than the compiler's plan of " +
             std::to_string(rt.planned_temp_bytes()) + " (a compiler bug)");
      if (pool.live_buffers != 0 || rt.host_arena_live_buffers() != 0)
        fail(what + " left " + std::to_string(pool.live_buffers + rt.host_arena_live_buffers()) +
             " buffers allocated (alloc/dealloc unbalanced in the program)");
    }

    // The validation loss under the weights after step `at`: the updates
    // land first (that wait for the background optimizer is the training's
    // time, in *wait_ms), then fy_eval_step runs on each batch; the mean of
    // theirs, or NaN when a stop signal came first.
    // The evaluation's own group_waits are not the steps' (eval_wait_s).
    double validate(int64_t at, double* ms, double* wait_ms) {
      TraceSpan span(rt.trace(), "steps", "validation after step ", at);
      auto v0 = std::chrono::steady_clock::now();
      if (rt.has_async_optimizer()) rt.async_optimizer().wait_all();
      auto v1 = std::chrono::steady_clock::now();
      const double waited0 = rt.has_async_optimizer() ? rt.async_optimizer().wait_seconds() : 0;
      struct CountEvalWaits {
        Runtime& rt;
        double waited0;
        double& into;
        ~CountEvalWaits() {
          if (rt.has_async_optimizer()) into += rt.async_optimizer().wait_seconds() - waited0;
        }
      } count{rt, waited0, eval_wait_s};
      double sum = 0;
      for (int64_t k = 0; k < val_batches; ++k) {
        if (g_stop_signal.load() != 0) return std::numeric_limits<double>::quiet_NaN();
        val->batch(k, B, T, idx.as<int64_t>(), tgt.as<int64_t>());
        loss.as<float>()[0] = std::numeric_limits<float>::quiet_NaN();
        if (device)
          device->run_step(on(eval), idx, tgt, loss, /*training=*/false);
        else
          eval(&rt, idx, tgt, loss);
        check_program("the validation after step " + std::to_string(at));
        sum += loss.as<float>()[0];
      }
      *wait_ms = std::chrono::duration<double, std::milli>(v1 - v0).count();
      *ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - v1).count();
      return sum / double(val_batches);
    }

    // A checkpoint mid-run: the updates in flight land, the device's masters come back.
    void checkpoint(int64_t at) {
      if (rt.has_async_optimizer()) rt.async_optimizer().wait_all();
      if (device) device->settle_masters();
      save_checkpoint(rt, o.save_dir, at);
    }

  // The program's step (or evaluation) as the device runs it.
  Device::Step on(TrainStepFn fn) {
    return [this, fn](View i, View t, View l) { fn(&rt, i, t, l); };
  }

  TrainOptions& o;
  JsonLog& log;
  TrainStepFn step, eval;
  Runtime rt;
  std::unique_ptr<Device> device;
  int64_t B = 0, T = 0;
  std::unique_ptr<const TokenFile> val;  // --val-data
  int64_t val_batches = 0;
  // Shared with the optimizer (next_ids), which may outlive this run on an error.
  std::shared_ptr<const TokenFile> data;
  View idx, tgt, loss;
  int64_t first = 0;                     // steps done before this run (--resume)
  double eval_wait_s = 0;                // the validations' own waits for updates
  double total_ms = 0, val_wait_ms = 0;  // val_wait_ms: the optimizer's, before validations
};

int run(int argc, char** argv, DeclareFn declare, TrainStepFn step, TrainStepFn eval) {
  TrainOptions o;
  if (!parse_args(argc, argv, &o)) return 0;
  if (const char* e = std::getenv("FY_DEFER_COPIES")) o.defer_copies = std::string(e) == "1";
  check_outputs_are_not_inputs(o);
  // Open the log first: a bad path fails before minutes of loading.
  JsonLog log(o.log_json);
  // Likewise a --save that could never be written.
  if (o.save_every > 0 && o.save_dir.empty()) fail("--save-every needs --save DIR");
  if (!o.save_dir.empty()) check_save_dir(o.save_dir);
  // One run saves to a directory at a time: held for this run's life.
  std::optional<SaveDirLock> save_lock;
  if (!o.save_dir.empty()) save_lock.emplace(o.save_dir);
  // And a --trace or --dump-grads.
  if (!o.trace.empty()) check_output_path("--trace", o.trace);
  if (!o.dump_grads.empty()) check_output_path("--dump-grads", o.dump_grads);

  catch_stop_signals();
  TrainRun r(o, log, step, eval);
  r.declare(declare);
  r.load();
  return r.train();
}

void report(const char* what) {
  std::string msg = what;
  for (char& c : msg)
    if (c == '\n' || c == '\r') c = ' ';  // the contract is one line
  std::fprintf(stderr, "train: error: %s\n", msg.c_str());
}

}  // namespace

int program_main(int argc, char** argv, DeclareFn declare, TrainStepFn step, TrainStepFn eval) {
  settle_openmp(argv);
  return train_main(argc, argv, declare, step, eval);
}

int train_main(int argc, char** argv, DeclareFn declare, TrainStepFn step, TrainStepFn eval) {
  try {
    const int rc = run(argc, argv, declare, step, eval);
    // Stopped by a signal, everything written and torn down: end by it.
    if (const int sig = g_stop_signal.load(); sig != 0 && rc == 128 + sig) {
      std::fflush(nullptr);
      ::signal(sig, SIG_DFL);
      ::raise(sig);
    }
    return rc;
  } catch (const std::exception& e) {
    report(e.what());
  } catch (...) {
    report("unknown exception");
  }
  return 1;
}

}  // namespace fy
