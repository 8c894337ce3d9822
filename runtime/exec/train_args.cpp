#include "exec/train_args.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "exec/checkpoint.h"
#include "optim/adamw8bit.h"

namespace fy {

namespace {

const char kUsage[] =
    "usage: %s --data FILE --steps N [options]\n"
    "  --data FILE          token file: raw uint16 (nanoGPT .bin) or llm.c's, uint16 (magic 20240520)\n"
    "                       or uint32 tokens (20240801: Llama 3's layout, vocabularies past 65,536)\n"
    "  --steps N            number of training steps (> 0; 0 with --val-data: evaluate only)\n"
    "  --lr X               AdamW learning rate, the schedule's peak (default 1e-3)\n"
    "  --lr-schedule KIND   constant, cosine or linear: after the warmup, the rate decays from\n"
    "                       --lr to --min-lr at step --lr-decay-steps, then stays there (default constant)\n"
    "  --warmup-steps N     steps 1..N use lr * step / N (default 0)\n"
    "  --lr-decay-steps N   the step where the decay reaches --min-lr (default --steps)\n"
    "  --min-lr X           the rate the decay ends at (default 0)\n"
    "  --beta1 X            (default 0.9)\n"
    "  --beta2 X            (default 0.999)\n"
    "  --eps X              (default 1e-8)\n"
    "  --weight-decay X     (default 0.01)\n"
    "  --no-decay REGEX     no weight decay for the parameters whose ONNX names match (ECMAScript,\n"
    "                       full match; repeatable)\n"
    "  --decay-1d yes|no    weight decay for parameters of rank < 2 too: biases, norms' scales\n"
    "                       (default yes, as torch.optim.AdamW on every parameter)\n"
    "  --grad-accum K       K micro-batches a step: their gradients' mean updates the weights once;\n"
    "                       step s, micro-batch m reads batch s*K+m (default 1; needs host memory for\n"
    "                       one fp32 gradient of every trainable parameter)\n"
    "  --seed N             seed for dropout masks (default 0)\n"
    "  --log-json FILE      one JSON object per step: step, loss, lr, tokens_per_s, ms (with --resume:\n"
    "                       the log goes on after the checkpoint's step)\n"
    "  --log-every K        progress line on stderr every K steps (default 1)\n"
    "  --val-data FILE      held-out tokens: their loss under the weights of the step (forward only,\n"
    "                       dropout off) is logged as val_loss after the last step, and every\n"
    "                       --val-every steps; a run with no step to train evaluates its weights\n"
    "  --val-every K        evaluate every K steps as well (default: after the last step only)\n"
    "  --val-batches N      batches of the file's first windows to average, as step N-1 of the batch\n"
    "                       contract reads (default 20, or the file's whole batches if fewer)\n"
    "  --save DIR           checkpoint to DIR after the last step (manifest.json, state, model.safetensors)\n"
    "  --weights PATH       initial weights from a checkpoint: a safetensors file, a Hugging Face\n"
    "                       sharded checkpoint (its directory or model.safetensors.index.json), or\n"
    "                       one of --save's; names as the ONNX file's or the model's own (a wrapper's\n"
    "                       prefix dropped), bf16/fp16 widened to the fp32 masters (default: where\n"
    "                       the compile found them: the ONNX file and its external data)\n"
    "  --onnx FILE          read the default weights from FILE instead of the model the compile read\n"
    "  --dump-grads FILE    write the step-1 gradients to FILE (safetensors)\n"
    "  --clip-norm X        scale gradients so their global L2 norm is at most X\n"
    "  --loss-scale-init X  first loss scale of a program compiled with --loss-scale dynamic\n"
    "                       (default 65536); halved on a step with inf/NaN gradients, which is skipped\n"
    "  --loss-scale-growth-interval N  doubled after N finite steps in a row (default 2000)\n"
    "  --save-every K       also checkpoint to --save DIR every K steps\n"
    "  --save-shard-size SIZE  past SIZE bytes of parameters, --save writes them as Hugging Face's\n"
    "                       shards (model-00001-of-0000N.safetensors, model.safetensors.index.json),\n"
    "                       each at most SIZE unless one tensor is larger (default 5G)\n"
    "  --resume DIR         continue from DIR's last checkpoint (weights, AdamW state, step)\n"
    "                       (SIGINT, SIGTERM or SIGHUP: the run finishes its step, checkpoints to --save, then ends)\n"
    "  --ssd DIR[,DIR...]   keep AdamW's state on SSD (io_uring, striped over the directories)\n"
    "  --ssd-queue-depth N  I/O operations each SSD store keeps in flight, 1..4096 (default 32;\n"
    "                       fewer: an activation's read waits behind less of the state's I/O)\n"
    "  --ssd-read-priority yes|no  the optimizer state's I/O keeps 2 operations in flight while an\n"
    "                       activation's read is unfinished (default yes)\n"
    "  --cpu-mem SIZE       bound the host memory the optimizer holds (e.g. 512M, 2G)\n"
    "  --gpu-mem SIZE|none  bound the device arena: parameters and the planned temporaries (default:\n"
    "                       the program's fuyou-compile --gpu-mem, if any)\n"
    "  --optimizer-threads N  threads of the background CPU optimizer (default: every CPU)\n"
    "  --trace FILE         write the run's timeline as Chrome trace JSON (Perfetto)\n"
    "  --optimizer NAME     adamw, or adamw8bit: block-wise 8-bit moments (default: the program's)\n"
    "  --adamw8bit-block N  elements per 8-bit block (power of two, 32..4096; default 256)\n"
    "  --adamw8bit-min-size N  tensors with fewer elements keep fp32 moments (default 4096)\n"
    "  --adamw8bit-embedding yes|no  8-bit moments for the token embedding too (default no)\n"
    "  --help               this text\n";

int64_t parse_int(const std::string& flag, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE)
    fail("flag '" + flag + "' expects an integer, got '" + s + "'");
  return v;
}

double parse_double(const std::string& flag, const std::string& s) {
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size() || errno == ERANGE || !std::isfinite(v))
    fail("flag '" + flag + "' expects a finite number, got '" + s + "'");
  return v;
}

std::string default_weights_path(const char* argv0) {
  char buf[PATH_MAX];
  ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  std::string exe = n > 0 ? std::string(buf, size_t(n)) : std::string(argv0 ? argv0 : "train");
  return exe + ".weights.safetensors";
}

}  // namespace

int64_t parse_size(const std::string& flag, const std::string& value) {
  char* end = nullptr;
  double x = std::strtod(value.c_str(), &end);
  double unit = 1;
  std::string suffix = end ? std::string(end) : std::string();
  if (suffix == "K" || suffix == "k" || suffix == "KiB") unit = 1024.0;
  else if (suffix == "M" || suffix == "m" || suffix == "MiB") unit = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g" || suffix == "GiB") unit = 1024.0 * 1024 * 1024;
  else if (suffix == "T" || suffix == "t" || suffix == "TiB") unit = 1024.0 * 1024 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B") fail("flag '" + flag + "' needs a size like 512M or 2G, got '" + value + "'");
  if (end == value.c_str() || !(x > 0)) fail("flag '" + flag + "' needs a positive size, got '" + value + "'");
  // At least a byte (0 would mean no bound at all), at most an exbibyte (and finite).
  const double bytes = x * unit;
  if (!(bytes >= 1 && bytes <= 1152921504606846976.0))
    fail("flag '" + flag + "' needs a size from 1 byte to 1 EiB, got '" + value + "'");
  return int64_t(bytes);
}

bool parse_args(int argc, char** argv, TrainOptions* o) {
  bool have_steps = false;
  const char* decay_flag = nullptr;  // --lr-decay-steps or --min-lr, when given
  o->weights.clear();
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::printf(kUsage, argc > 0 ? argv[0] : "train");
      return false;
    }
    if (arg.rfind("--", 0) != 0 || arg.size() == 2) fail("unexpected argument '" + arg + "' (see --help)");
    std::string flag = arg, value;
    bool inline_value = false;
    if (size_t eq = arg.find('='); eq != std::string::npos) {
      flag = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    static const char* const kKnown[] = {"--data", "--steps", "--lr", "--beta1", "--beta2", "--eps",
                                         "--weight-decay", "--seed", "--log-json", "--log-every", "--save",
                                         "--weights", "--onnx", "--dump-grads", "--clip-norm", "--resume", "--save-every",
                                         "--save-shard-size",
                                         "--ssd", "--cpu-mem", "--gpu-mem", "--optimizer-threads", "--trace",
                                         "--optimizer", "--adamw8bit-block", "--adamw8bit-min-size",
                                         "--adamw8bit-embedding", "--ssd-queue-depth",
                                         "--ssd-read-priority",
                                         "--loss-scale-init",
                                         "--loss-scale-growth-interval", "--lr-schedule",
                                         "--warmup-steps", "--lr-decay-steps", "--min-lr",
                                         "--grad-accum", "--no-decay", "--decay-1d", "--val-data",
                                         "--val-every", "--val-batches"};
    // Decisions of the compile, which the program carries out as compiled.
    static const char* const kCompiled[] = {"--rows-first", "--param-waits", "--early-rows", "--early-hold",
                                            "--grad-landing"};
    for (const char* k : kCompiled)
      if (flag == k)
        fail("'" + flag + "' is decided when the program is compiled: fuyou-compile " + flag +
             (flag == "--grad-landing" ? " N" : " yes|no") + ", then run that program");
    bool known = false;
    for (const char* k : kKnown) known |= flag == k;
    if (!known) fail("unknown flag '" + flag + "' (see --help)");
    if (!inline_value) {
      // "--data --steps 3" is a forgotten value, not a file named --steps.
      if (i + 1 >= argc || std::string(argv[i + 1]).rfind("--", 0) == 0) fail("flag '" + flag + "' needs a value");
      value = argv[++i];
    }
    if (value.empty()) fail("flag '" + flag + "' needs a value");
    // (Refused later without 8-bit AdamW, which only the program may name.)
    if (flag.rfind("--adamw8bit-", 0) == 0 && o->adamw8bit_flag.empty()) o->adamw8bit_flag = flag;

    if (flag == "--data") o->data = value;
    else if (flag == "--val-data") o->val_data = value;
    else if (flag == "--val-every" || flag == "--val-batches") {
      (flag == "--val-every" ? o->val_every : o->val_batches) = parse_int(flag, value);
      if ((flag == "--val-every" ? o->val_every : o->val_batches) <= 0)
        fail("flag '" + flag + "' must be positive, got " + value);
    }
    else if (flag == "--log-json") o->log_json = value;
    else if (flag == "--save") o->save_dir = value;
    else if (flag == "--weights") o->weights = value;
    else if (flag == "--onnx") o->onnx = value;
    else if (flag == "--dump-grads") o->dump_grads = value;
    else if (flag == "--resume") o->resume_dir = value;
    else if (flag == "--cpu-mem") o->cpu_mem = parse_size(flag, value);
    else if (flag == "--save-shard-size") o->save_shard_bytes = parse_size(flag, value);
    else if (flag == "--trace") o->trace = value;
    else if (flag == "--optimizer-threads") {
      o->optimizer_threads = parse_int(flag, value);
      if (o->optimizer_threads < 0 || o->optimizer_threads > 4096)
        fail("flag '--optimizer-threads' must be from 0 (every CPU) to 4096, got " + value);
    }
    else if (flag == "--gpu-mem") o->gpu_mem = value == "none" ? -1 : parse_size(flag, value);
    else if (flag == "--ssd") {
      o->ssd_dirs.clear();
      size_t start = 0;
      while (start <= value.size()) {
        size_t comma = value.find(',', start);
        std::string dir = value.substr(start, comma == std::string::npos ? std::string::npos : comma - start);
        if (dir.empty()) fail("flag '--ssd' has an empty directory in '" + value + "'");
        o->ssd_dirs.push_back(dir);
        if (comma == std::string::npos) break;
        start = comma + 1;
      }
    }
    else if (flag == "--ssd-read-priority") {
      if (value != "yes" && value != "no") fail("flag '--ssd-read-priority' must be yes or no, got '" + value + "'");
      o->ssd_read_priority = value == "yes";
    }
    else if (flag == "--ssd-queue-depth") {
      o->ssd_queue_depth = parse_int(flag, value);
      if (o->ssd_queue_depth < 1 || o->ssd_queue_depth > 4096)
        fail("flag '--ssd-queue-depth' must be from 1 to 4096, got " + value);
    }
    else if (flag == "--optimizer") {
      if (value != "adamw" && value != "adamw8bit")
        fail("flag '--optimizer' must be adamw or adamw8bit, got '" + value + "'");
      o->optimizer = value;
    } else if (flag == "--adamw8bit-block") {
      o->adamw8bit_block = parse_int(flag, value);
      if (!q8_block_ok(o->adamw8bit_block))
        fail("flag '--adamw8bit-block' must be a power of two from 32 to 4096, got " + value);
    } else if (flag == "--adamw8bit-min-size") {
      o->adamw8bit_min_size = parse_int(flag, value);
      if (o->adamw8bit_min_size < 0) fail("flag '--adamw8bit-min-size' must be >= 0, got " + value);
    } else if (flag == "--adamw8bit-embedding") {
      if (value != "yes" && value != "no") fail("flag '--adamw8bit-embedding' must be yes or no, got '" + value + "'");
      o->adamw8bit_embedding = value == "yes";
    }
    else if (flag == "--save-every") {
      o->save_every = parse_int(flag, value);
      if (o->save_every <= 0) fail("flag '--save-every' must be positive, got " + value);
    } else if (flag == "--loss-scale-init") {
      double v = parse_double(flag, value);
      if (!(v > 0) || v > 3.0e38) fail("flag '--loss-scale-init' must be > 0 and a finite float, got " + value);
      o->loss_scale.init = float(v);
    } else if (flag == "--loss-scale-growth-interval") {
      o->loss_scale.growth_interval = parse_int(flag, value);
      if (o->loss_scale.growth_interval <= 0)
        fail("flag '--loss-scale-growth-interval' must be positive, got " + value);
    } else if (flag == "--clip-norm") {
      o->clip_norm = parse_double(flag, value);
      if (!(o->clip_norm > 0)) fail("flag '--clip-norm' must be > 0, got " + value);
    }
    else if (flag == "--lr-schedule") {
      if (!parse_lr_schedule_kind(value, &o->lr_schedule.kind))
        fail("flag '--lr-schedule' must be constant, cosine or linear, got '" + value + "'");
    } else if (flag == "--warmup-steps") {
      o->lr_schedule.warmup = parse_int(flag, value);
      if (o->lr_schedule.warmup < 0) fail("flag '--warmup-steps' must be >= 0, got " + value);
    } else if (flag == "--lr-decay-steps") {
      decay_flag = "--lr-decay-steps";
      o->lr_schedule.decay_end = parse_int(flag, value);
      if (o->lr_schedule.decay_end <= 0) fail("flag '--lr-decay-steps' must be positive, got " + value);
    } else if (flag == "--min-lr") {
      decay_flag = "--min-lr";
      o->lr_schedule.min_lr = parse_double(flag, value);
      if (o->lr_schedule.min_lr < 0) fail("flag '--min-lr' must be >= 0, got " + value);
    }
    else if (flag == "--no-decay") {
      o->no_decay.push_back(value);
    } else if (flag == "--decay-1d") {
      if (value != "yes" && value != "no") fail("flag '--decay-1d' must be yes or no, got '" + value + "'");
      o->decay_1d = value == "yes";
    }
    else if (flag == "--grad-accum") {
      o->grad_accum = parse_int(flag, value);
      if (o->grad_accum < 1 || o->grad_accum > 65536)
        fail("flag '--grad-accum' must be from 1 to 65536, got " + value);
    }
    else if (flag == "--steps") {
      o->steps = parse_int(flag, value);
      have_steps = true;
      if (o->steps < 0) fail("flag '--steps' must be positive (or 0 with --val-data), got " + value);
    } else if (flag == "--log-every") {
      o->log_every = parse_int(flag, value);
      if (o->log_every <= 0) fail("flag '--log-every' must be positive, got " + value);
    } else if (flag == "--seed") {
      int64_t s = parse_int(flag, value);
      if (s < 0) fail("flag '--seed' must be >= 0, got " + value);
      o->seed = uint64_t(s);
    } else {
      // AdamW hyper-parameters, validated as torch.optim.AdamW does.
      double v = parse_double(flag, value);
      bool ok = flag == "--beta1" || flag == "--beta2" ? (v >= 0 && v < 1) : v >= 0;
      if (!ok)
        fail("flag '" + flag + "' must be " + (flag.rfind("--beta", 0) == 0 ? "in [0, 1)" : ">= 0") + ", got " +
             value);
      float f = float(v);
      if (flag != "--lr" && !std::isfinite(f)) fail("flag '" + flag + "' must be a finite float, got " + value);
      if (flag == "--lr") o->adamw.lr = v;
      else if (flag == "--beta1") o->adamw.beta1 = f;
      else if (flag == "--beta2") o->adamw.beta2 = f;
      else if (flag == "--eps") o->adamw.eps = f;
      else o->adamw.weight_decay = f;
    }
  }
  if (o->data.empty()) fail("missing required flag --data FILE (see --help)");
  if (!have_steps) fail("missing required flag --steps N (see --help)");
  if (o->val_data.empty() && (o->val_every > 0 || o->val_batches > 0))
    fail(std::string(o->val_every > 0 ? "--val-every" : "--val-batches") + " needs --val-data FILE");
  // Nothing to train is an evaluation, or a mistake.
  if (o->steps == 0 && o->val_data.empty()) fail("flag '--steps' must be positive, got 0 (0 needs --val-data)");
  if (o->steps == 0) {
    const char* idle = !o->log_json.empty()     ? "--log-json"
                       : !o->save_dir.empty()   ? "--save"
                       : o->save_every > 0      ? "--save-every"
                       : !o->dump_grads.empty() ? "--dump-grads"
                                                : nullptr;
    if (idle) fail(std::string(idle) + ": a run of --steps 0 trains nothing to write (its val_loss goes to stderr)");
  }
  if (!o->dump_grads.empty() && !o->resume_dir.empty())
    fail("--dump-grads records step 1's gradients: a run resumed from a checkpoint starts after it");
  // A decay flag without a decay is a forgotten --lr-schedule, not a no-op.
  if (decay_flag && o->lr_schedule.kind == LrSchedule::Kind::Constant)
    fail(std::string(decay_flag) + " shapes a decay: it needs --lr-schedule cosine or linear");
  if (o->lr_schedule.decay_end == 0) o->lr_schedule.decay_end = std::max<int64_t>(o->steps, 1);
  if (std::string why = o->lr_schedule.invalid(o->adamw.lr); !why.empty()) fail("--lr-schedule: " + why);
  o->own_weights = default_weights_path(argc > 0 ? argv[0] : nullptr);
  return true;
}

// Fails, naming the flag, unless `path` can be written at the end of the
// run as Trace::write and write_safetensors do: through PATH.tmp, renamed
// over PATH, which must then be a regular file (a rename would put a file
// in place of a device or a FIFO). Leaves nothing.
void check_output_path(const char* flag, const std::string& path) {
  const std::string tmp = path + ".tmp";
  struct stat st;
  for (const std::string& p : {path, tmp})
    if (::stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fail(std::string(flag) + ": '" + p + "' is a directory");
  if ((::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) || (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)))
    fail(std::string(flag) + ": '" + path + "' is not a regular file (the run writes a file in its place)");
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd >= 0) {
    ::close(fd);
    ::unlink(tmp.c_str());
    return;
  }
  if (errno != EEXIST) fail(std::string(flag) + ": cannot write '" + tmp + "': " + std::strerror(errno));
  // PATH.tmp is left from an earlier run: the directory must take the new one.
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::access(dir.c_str(), W_OK | X_OK) != 0)
    fail(std::string(flag) + ": cannot write in '" + dir + "': " + std::strerror(errno));
}

// Fails when a file the run writes is one it reads (a --log-json naming the
// --data file would be emptied by it), or another it writes.
void check_outputs_are_not_inputs(const TrainOptions& o) {
  auto same = [](const std::string& a, const std::string& b) {
    struct stat x, y;
    return !a.empty() && !b.empty() && ::stat(a.c_str(), &x) == 0 && ::stat(b.c_str(), &y) == 0 &&
           x.st_dev == y.st_dev && x.st_ino == y.st_ino;
  };
  const std::string self = "/proc/self/exe";
  const std::pair<const char*, const std::string*> ins[] = {
      {"--data", &o.data}, {"--val-data", &o.val_data}, {"--weights", &o.weights}, {"--onnx", &o.onnx},
      {"weights", &o.own_weights}, {"program's", &self}};
  const std::pair<const char*, const std::string*> outs[] = {
      {"--log-json", &o.log_json}, {"--trace", &o.trace}, {"--dump-grads", &o.dump_grads}};
  for (size_t i = 0; i < std::size(outs); ++i) {
    const auto& [flag, out] = outs[i];
    for (const auto& [in_flag, in] : ins)
      if (same(*out, *in))
        fail(std::string(flag) + " '" + *out + "' is the " + in_flag + " file: the run would overwrite it");
    for (size_t j = i + 1; j < std::size(outs); ++j)
      if (!out->empty() && (*out == *outs[j].second || same(*out, *outs[j].second)))
        fail(std::string(flag) + " and " + outs[j].first + " name the same file '" + *out + "'");
    // Nor a checkpoint's own files (its manifest, weights or states).
    if (out->empty()) continue;
    const size_t slash = out->rfind('/');
    const std::string dir = slash == std::string::npos ? "." : out->substr(0, slash + 1),
                      base = slash == std::string::npos ? *out : out->substr(slash + 1);
    const bool checkpoint_name = is_checkpoint_file_name(base);
    for (const auto& [ck_flag, ck] : {std::pair{"--resume", &o.resume_dir}, std::pair{"--save", &o.save_dir}})
      if (checkpoint_name && same(dir, *ck))
        fail(std::string(flag) + " '" + *out + "' is a checkpoint's file in the " + ck_flag + " directory");
  }
}

}  // namespace fy
