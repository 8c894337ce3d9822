#include "exec/checkpoint.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <sys/file.h>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <sstream>
#include <unistd.h>
#include <vector>

#include "exec/runtime.h"
#include "io/atomic_file.h"
#include "io/crc32c.h"
#include "io/safetensors.h"

namespace fy {

namespace {

// Format 2: the manifest carries its own checksum and the run's id, and the
// state file its step and run id; format 1 (before) is still read.
const char* kFormat = "fuyou-checkpoint-2";
const char* kFormat1 = "fuyou-checkpoint-1";
const char* kChecksumField = ", \"checksum\": \"";

// The manifest's text with its checksum field: CRC-32C of all before it.
std::string with_checksum(const std::string& body) {
  char hex[16];
  std::snprintf(hex, sizeof hex, "%08x", crc32c(0, body.data(), body.size()));
  return body + kChecksumField + hex + "\"}\n";
}

// Whether `text` ends in a checksum field that matches what comes before it.
bool checksum_holds(const std::string& text) {
  const size_t at = text.rfind(kChecksumField);
  if (at == std::string::npos) return false;
  return with_checksum(text.substr(0, at)) == text;
}

// A fresh run's id: 16 hex digits from the system's entropy.
std::string new_run_id() {
  std::random_device rd;
  char hex[32];
  std::snprintf(hex, sizeof hex, "%08x%08x", unsigned(rd()), unsigned(rd()));
  return hex;
}

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : s) h = (h ^ c) * 1099511628211ull;
  return h;
}

// The value of `"key": ...` in our own manifest (a flat JSON object).
bool json_field(const std::string& text, const std::string& key, std::string* out) {
  std::string pat = "\"" + key + "\":";
  size_t at = text.find(pat);
  if (at == std::string::npos) return false;
  size_t i = at + pat.size();
  while (i < text.size() && text[i] == ' ') ++i;
  if (i < text.size() && text[i] == '"') {
    size_t end = text.find('"', i + 1);
    if (end == std::string::npos) return false;
    *out = text.substr(i + 1, end - i - 1);
    return true;
  }
  size_t end = text.find_first_of(",}", i);
  if (end == std::string::npos) return false;
  *out = text.substr(i, end - i);
  return !out->empty();
}

// The shortest text that reads back as the same number.
template <class T>
std::string exact(T v) {
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, v, std::chars_format::general);
  return std::string(buf, r.ptr);
}

// The flags that decide what a step computes, by manifest key (the flag's
// name without "--", '-' as '_'). A resume under others would not continue
// the run it resumes: batch s*K+m moves with --grad-accum, and a decay that
// ends at --steps reshapes when --steps grows. A constant schedule's decay
// flags do nothing and are left out. Values are JSON: strings quoted.
std::vector<std::pair<std::string, std::string>> run_config(const Runtime& rt) {
  const TrainOptions& o = rt.options();
  const bool loss_scaling = rt.loss_scaling();
  const LrSchedule& ls = o.lr_schedule;
  const bool decays = ls.kind != LrSchedule::Kind::Constant;
  std::vector<std::pair<std::string, std::string>> c = {
      {"grad_accum", std::to_string(o.grad_accum)},
      {"lr", exact(o.adamw.lr)},
      {"lr_schedule", decays ? (ls.kind == LrSchedule::Kind::Cosine ? "\"cosine\"" : "\"linear\"") : "\"constant\""},
      {"warmup_steps", std::to_string(ls.warmup)},
  };
  if (decays) {
    c.push_back({"lr_decay_steps", std::to_string(ls.decay_end)});
    c.push_back({"min_lr", exact(ls.min_lr)});
  }
  for (auto [key, v] : {std::pair<const char*, float>{"beta1", o.adamw.beta1}, {"beta2", o.adamw.beta2},
                        {"eps", o.adamw.eps}, {"weight_decay", o.adamw.weight_decay}})
    c.push_back({key, exact(v)});
  // Which tensors AdamW decays (--no-decay, --decay-1d): the set, as its
  // size and a fingerprint of the names (patterns may be spelled otherwise).
  std::string exempt;
  int64_t n = 0;
  for (int64_t i = 0; i < rt.num_params(); ++i)
    if (rt.param(i).trainable && !rt.param(i).decay) exempt += rt.param(i).name + ";", ++n;
  char buf[64];
  std::snprintf(buf, sizeof buf, "\"%lld tensor(s) %016llx\"", (long long)n, (unsigned long long)fnv1a(exempt));
  c.push_back({"no_decay", buf});
  c.push_back({"clip_norm", exact(o.clip_norm)});
  c.push_back({"seed", std::to_string(o.seed)});
  // When the scale grows decides which fp16 steps are skipped.
  if (loss_scaling) c.push_back({"loss_scale_growth_interval", std::to_string(o.loss_scale.growth_interval)});
  return c;
}

// Fails, naming the flag, when this run's configuration is not the one the
// checkpoint in `dir` (manifest `text`) was written under. What a checkpoint
// does not record (one written before the manifest carried it) is taken as
// it is.
void check_run_config(const Runtime& rt, const std::string& text, const std::string& dir) {
  for (const auto& [key, value] : run_config(rt)) {
    std::string theirs;
    if (!json_field(text, key, &theirs)) continue;  // not recorded by the run that wrote it
    const bool quoted = value.size() >= 2 && value.front() == '"';
    const std::string mine = quoted ? value.substr(1, value.size() - 2) : value;
    if (theirs == mine) continue;
    std::string flag = "--" + key;
    for (char& ch : flag)
      if (ch == '_') ch = '-';
    fail("--resume: the checkpoint in '" + dir + "' was trained with " + flag + " " + theirs + ", this run has " +
         flag + " " + mine + (key == "lr_decay_steps" ? " (it defaults to --steps)" : "") + " (resume with the run's flags; to start afresh from its weights, pass --weights " +
         dir + "/model.safetensors without --resume)");
  }
}

// A name save_checkpoint gives a state: state-, at least 8 digits,
// .safetensors; or its temporary, .tmp after that (a save killed mid-write).
bool is_state_file_name(std::string f) {
  const std::string head = "state-", tail = ".safetensors", tmp = ".tmp";
  if (f.size() > tmp.size() && f.compare(f.size() - tmp.size(), tmp.size(), tmp) == 0) f.resize(f.size() - tmp.size());
  if (f.size() < head.size() + 8 + tail.size() || f.compare(0, head.size(), head) != 0 ||
      f.compare(f.size() - tail.size(), tail.size(), tail) != 0)
    return false;
  for (size_t i = head.size(); i < f.size() - tail.size(); ++i)
    if (f[i] < '0' || f[i] > '9') return false;
  return true;
}

// Hugging Face's name of shard k of n: model-0000k-of-0000n.safetensors.
std::string shard_name(size_t k, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", k, n);
  return buf;
}

bool is_shard_file_name(const std::string& f) {
  size_t k = 0, n = 0;
  return std::sscanf(f.c_str(), "model-%5zu-of-%5zu.", &k, &n) == 2 && f == shard_name(k, n);
}

// The users' copy of the parameters: model.safetensors, or past `shard_bytes`
// Hugging Face's shards and their index (tensors in order, a shard closed
// when the next would take it past the limit). Each file is written
// atomically, the index last; then the other layout's files of ours go, so
// the directory holds one copy. A kill part way leaves every file of the
// previous save or of this one, never one ahead of the manifest.
void write_users_copy(const std::string& dir, const std::vector<SafetensorsEntry>& params, uint64_t shard_bytes) {
  std::vector<std::vector<SafetensorsEntry>> shards(1);
  uint64_t total = 0, in_shard = 0;
  for (const SafetensorsEntry& e : params) {
    uint64_t bytes = dtype_size(e.dtype);
    for (int64_t d : e.shape) bytes *= uint64_t(d);
    if (in_shard && in_shard + bytes > shard_bytes) shards.emplace_back(), in_shard = 0;
    shards.back().push_back(e);
    in_shard += bytes;
    total += bytes;
  }
  std::vector<std::string> kept;
  if (shards.size() == 1) {
    write_safetensors(dir + "/model.safetensors", params);
    kept.push_back("model.safetensors");
  } else {
    std::map<std::string, std::string> weight_map;
    for (size_t k = 0; k < shards.size(); ++k) {
      kept.push_back(shard_name(k + 1, shards.size()));
      write_safetensors(dir + "/" + kept.back(), shards[k]);
      for (const SafetensorsEntry& e : shards[k]) weight_map[e.name] = kept.back();
    }
    write_file_atomic(dir + "/model.safetensors.index.json", safetensors_index_json(weight_map, total));
    kept.push_back("model.safetensors.index.json");
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    const bool ours = f == "model.safetensors" || f == "model.safetensors.index.json" || is_shard_file_name(f);
    if (ours && std::find(kept.begin(), kept.end(), f) == kept.end()) std::filesystem::remove(e.path(), ec);
  }
}

std::string state_name(int64_t step) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "state-%08lld.safetensors", (long long)step);
  return buf;
}

}  // namespace

bool is_checkpoint_file_name(std::string f) {
  if (is_state_file_name(f)) return true;
  if (f.size() > 4 && f.compare(f.size() - 4, 4, ".tmp") == 0) f.resize(f.size() - 4);
  return f == "manifest.json" || f == "model.safetensors" || f == "model.safetensors.index.json" ||
         is_shard_file_name(f);
}

std::string model_fingerprint(const Runtime& rt) {
  std::string desc;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const auto& p = rt.param(i);
    desc += p.name + ":" + dtype_name(p.value.dtype) + p.value.shape.str() + (p.trainable ? "T" : "F") + ";";
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)fnv1a(desc));
  return buf;
}

void save_checkpoint(const Runtime& rt, const std::string& dir, int64_t step) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    fail("--save: cannot create directory '" + dir + "'" + (ec ? ": " + ec.message() : std::string()));

  std::vector<SafetensorsEntry> state, params;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const auto& p = rt.param(i);
    params.push_back({p.checkpoint_name.empty() ? p.name : p.checkpoint_name, p.value.dtype, p.value.shape.vec(),
                      p.value.data, {}});
    state.push_back({"param/" + p.name, p.value.dtype, p.value.shape.vec(), p.value.data, {}});
    if (!p.trainable) continue;
    // Moments in their format: fp32 like the parameter, or 8-bit states as bytes.
    const DType sd = p.q8_block ? DType::U8 : DType::F32;
    const std::vector<int64_t> ss = p.q8_block ? std::vector<int64_t>{rt.state_bytes(i)} : p.value.shape.vec();
    if (p.m.data) {
      state.push_back({"adam_m/" + p.name, sd, ss, p.m.data, {}});
      state.push_back({"adam_v/" + p.name, sd, ss, p.v.data, {}});
      continue;
    }
    // Moments on SSD: copied out one tensor at a time as the writer reaches them.
    auto& opt = const_cast<Runtime&>(rt).async_optimizer();
    state.push_back({"adam_m/" + p.name, sd, ss, nullptr, [&opt, i](void* buf) { opt.read_state(i, buf, nullptr); }});
    state.push_back({"adam_v/" + p.name, sd, ss, nullptr, [&opt, i](void* buf) { opt.read_state(i, nullptr, buf); }});
  }
  // State first (durable), then the manifest that points at it, then the
  // users' copy of the parameters.
  std::string name = state_name(step);
  if (rt.run_id().empty()) const_cast<Runtime&>(rt).set_run_id(new_run_id());
  write_safetensors(dir + "/" + name, state, {{"fuyou.step", std::to_string(step)}, {"fuyou.run", rt.run_id()}});
  std::ostringstream m;
  m << "{\"format\": \"" << kFormat << "\", \"step\": " << step << ", \"model\": \"" << model_fingerprint(rt)
    << "\", \"state\": \"" << name << "\"";
  for (const auto& [key, value] : run_config(rt)) m << ", \"" << key << "\": " << value;
  // The checkpoint's own names of parameters loaded under them (--weights),
  // kept for the saves of a resumed run: "param=name;..." where the names
  // need no escaping.
  std::string renamed;
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const auto& p = rt.param(i);
    auto plain = [](const std::string& x) { return x.find_first_of("\"\\;=") == std::string::npos; };
    if (!p.checkpoint_name.empty() && p.checkpoint_name != p.name && plain(p.name) && plain(p.checkpoint_name))
      renamed += (renamed.empty() ? "" : ";") + p.name + "=" + p.checkpoint_name;
  }
  if (!renamed.empty()) m << ", \"checkpoint_names\": \"" << renamed << "\"";
  if (rt.loss_scaling() && rt.has_async_optimizer())
    if (const LossScaler* ls = const_cast<Runtime&>(rt).async_optimizer().loss_scaler()) {
      char buf[160];
      std::snprintf(buf, sizeof buf, ", \"loss_scale\": %.9g, \"loss_scale_growth_tracker\": %lld, \"skipped_steps\": %lld",
                    double(ls->scale()), (long long)ls->growth_tracker(), (long long)ls->skipped());
      m << buf;
    }
  m << ", \"run\": \"" << rt.run_id() << "\"";
  try {
    write_file_atomic(dir + "/manifest.json", with_checksum(m.str()));
  } catch (...) {
    // The previous manifest still points at its own state: this one is an orphan (on a full disk, too big to leave).
    std::filesystem::remove(dir + "/" + name, ec);
    throw;
  }
  // Older states are garbage once the manifest moved on (and the room they
  // free is the users' copy's): ours only, state-<8 digits>.safetensors,
  // not whatever else of the user's starts with "state-".
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string f = e.path().filename().string();
    if (f != name && is_state_file_name(f) && e.is_regular_file(ec)) std::filesystem::remove(e.path(), ec);
  }
  write_users_copy(dir, params, uint64_t(rt.options().save_shard_bytes));
}

void check_save_dir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path p = fs::absolute(dir, ec);
  if (ec) fail("--save: '" + dir + "': " + ec.message());
  // The directory, or the nearest ancestor that exists (the save creates the rest).
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec))
    fail("--save: cannot make directory '" + dir + "': '" + p.string() + "' is not a directory");
  if (::access(p.c_str(), W_OK | X_OK) != 0)
    fail("--save: cannot write in '" + p.string() + "': " + std::strerror(errno));
}

SaveDirLock::SaveDirLock(const std::string& dir) : dir_(dir) {
  std::error_code ec;
  created_ = !std::filesystem::exists(dir, ec);
  std::filesystem::create_directories(dir, ec);
  if (ec || !std::filesystem::is_directory(dir))
    fail("--save: cannot create directory '" + dir + "'" + (ec ? ": " + ec.message() : std::string()));
  const std::string path = dir + "/.fuyou.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) fail("--save: cannot open '" + path + "': " + std::strerror(errno));
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int e = errno;
    char pid[32] = {0};
    const ssize_t n = ::pread(fd_, pid, sizeof pid - 1, 0);
    ::close(fd_);
    fd_ = -1;
    if (e != EWOULDBLOCK) fail("--save: cannot lock '" + path + "': " + std::strerror(e));
    std::string holder = n > 0 ? std::string(pid, size_t(n)) : std::string("unknown");
    while (!holder.empty() && (holder.back() == '\n' || holder.back() == ' ')) holder.pop_back();
    fail("--save: '" + dir + "' is held by another run (pid " + holder + "): one run saves to a directory at a time");
  }
  // Held: any temporary of a checkpoint file here is a dead writer's (a save
  // killed mid-write), which a resumed run would otherwise leave to fill the disk.
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    std::string f = e.path().filename().string();
    const size_t tmp = f.rfind(".tmp");
    if (tmp == std::string::npos || tmp == 0) continue;
    const std::string after = f.substr(tmp + 4);  // "" or ".PID"
    if (!after.empty() && (after[0] != '.' || after.size() == 1 ||
                           after.find_first_not_of("0123456789", 1) != std::string::npos))
      continue;
    if (is_checkpoint_file_name(f.substr(0, tmp)) && e.is_regular_file(ec)) std::filesystem::remove(e.path(), ec);
  }
  const std::string mine = std::to_string(::getpid()) + "\n";
  // (Unwritten, the lock holds all the same; only a refused run's message lacks the pid.)
  if (::ftruncate(fd_, 0) == 0) (void)!::pwrite(fd_, mine.data(), mine.size(), 0);
}

SaveDirLock::~SaveDirLock() {
  if (fd_ < 0) return;
  // A run that made the directory and saved nothing in it (refused, or
  // failed before its first save) leaves nothing behind.
  std::error_code ec;
  const std::string lock = dir_ + "/.fuyou.lock";
  if (created_) {
    bool only_lock = true;
    for (const auto& e : std::filesystem::directory_iterator(dir_, ec)) only_lock &= e.path().filename() == ".fuyou.lock";
    if (only_lock && !ec) {
      ::unlink(lock.c_str());
      ::rmdir(dir_.c_str());
    }
  }
  ::close(fd_);  // (and the lock with it)
}

namespace {

struct Manifest {
  std::string path, text, state;
  int64_t step = 0;
  bool checked = false;  // format 2: checksummed, with the run's id
  std::string run;
};

// DIR's manifest, once it is known to be whole, of this model and of this
// run's flags.
Manifest read_manifest(const Runtime& rt, const std::string& dir) {
  Manifest m;
  m.path = dir + "/manifest.json";
  std::ifstream f(m.path);
  if (!f) fail("--resume: no checkpoint in '" + dir + "' (cannot open " + m.path + ")");
  std::stringstream ss;
  ss << f.rdbuf();
  m.text = ss.str();
  std::string format, step_text, model;
  const bool has_format = json_field(m.text, "format", &format);
  // Format 2 checks itself first: a flipped bit or an edit is no manifest.
  m.checked = has_format && format == kFormat;
  if (m.checked && !checksum_holds(m.text))
    fail("--resume: checkpoint manifest '" + m.path + "' fails its checksum: damaged or edited, not resumed");
  if (m.checked && !json_field(m.text, "run", &m.run))
    fail("--resume: checkpoint manifest '" + m.path + "' names no run");
  if (!has_format || (format != kFormat && format != kFormat1) || !json_field(m.text, "step", &step_text) ||
      !json_field(m.text, "model", &model) || !json_field(m.text, "state", &m.state) ||
      m.text.find('}') == std::string::npos)
    fail("--resume: checkpoint manifest '" + m.path + "' is corrupt or truncated");
  char* end = nullptr;
  long long step = std::strtoll(step_text.c_str(), &end, 10);
  if (*end || step < 0) fail("--resume: checkpoint manifest '" + m.path + "' has a bad step '" + step_text + "'");
  m.step = step;
  if (model != model_fingerprint(rt))
    fail("--resume: checkpoint '" + dir + "' was written by another model (fingerprint " + model +
         ", this program's is " + model_fingerprint(rt) + ")");
  check_run_config(rt, m.text, dir);
  return m;
}

}  // namespace

int64_t check_checkpoint(const Runtime& rt, const std::string& dir) { return read_manifest(rt, dir).step; }

int64_t load_checkpoint(Runtime& rt, const std::string& dir) {
  const Manifest man = read_manifest(rt, dir);
  const std::string& path = man.path;
  const std::string& text = man.text;
  const std::string& state = man.state;
  const int64_t step = man.step;

  // Parameters keep the names they were loaded under, for the next --save.
  if (std::string names; json_field(text, "checkpoint_names", &names)) {
    std::map<std::string, int64_t> index;
    for (int64_t i = 0; i < rt.num_params(); ++i) index[rt.param(i).name] = i;
    std::stringstream pairs(names);
    for (std::string pair; std::getline(pairs, pair, ';');)
      if (size_t eq = pair.find('='); eq != std::string::npos)
        if (auto it = index.find(pair.substr(0, eq)); it != index.end())
          rt.set_checkpoint_name(it->second, pair.substr(eq + 1));
  }

  // The loss scaler goes on where it was (a checkpoint without one: from its start).
  std::string scale_text, tracker_text, skipped_text;
  if (rt.loss_scaling() && json_field(text, "loss_scale", &scale_text) &&
      json_field(text, "loss_scale_growth_tracker", &tracker_text) && json_field(text, "skipped_steps", &skipped_text)) {
    char *e1 = nullptr, *e2 = nullptr, *e3 = nullptr;
    double scale = std::strtod(scale_text.c_str(), &e1);
    long long tracker = std::strtoll(tracker_text.c_str(), &e2, 10), skipped = std::strtoll(skipped_text.c_str(), &e3, 10);
    if (*e1 || *e2 || *e3 || !(scale > 0) || tracker < 0 || skipped < 0 || skipped > step)
      fail("--resume: checkpoint manifest '" + path + "' has a bad loss scaler state");
    rt.async_optimizer().restore_loss_scaler(float(scale), tracker, skipped);
  }

  std::string state_path = dir + "/" + state;
  // The state file is the manifest's: its step and its run.
  if (man.checked) {
    std::map<std::string, std::string> meta;
    list_safetensors(state_path, &meta);
    const std::string their_step = meta.count("fuyou.step") ? meta["fuyou.step"] : "none";
    if (their_step != std::to_string(step))
      fail("--resume: '" + state_path + "' holds step " + their_step + ", the manifest '" + path + "' step " +
           std::to_string(step) + ": not resumed");
    const std::string their_run = meta.count("fuyou.run") ? meta["fuyou.run"] : "none";
    if (their_run != man.run)
      fail("--resume: '" + state_path + "' is of run " + their_run + ", the manifest '" + path + "' of run " +
           man.run + ": not resumed");
    rt.set_run_id(man.run);
  }
  // Streamed into place, one tensor at a time: moments on SSD go through one
  // tensor's worth of host memory.
  std::map<std::string, std::pair<int64_t, char>> where;  // name -> (param, 'p'/'m'/'v')
  for (int64_t i = 0; i < rt.num_params(); ++i) {
    const auto& p = rt.param(i);
    where["param/" + p.name] = {i, 'p'};
    if (p.trainable) {
      where["adam_m/" + p.name] = {i, 'm'};
      where["adam_v/" + p.name] = {i, 'v'};
    }
  }
  std::vector<uint8_t> scratch;
  int64_t pending = -1;  // parameter whose SSD moment sits in scratch
  char pending_kind = 0;
  auto flush = [&] {
    if (pending < 0) return;
    AsyncOptimizer& opt = rt.async_optimizer();
    if (pending_kind == 'm') opt.write_state(pending, scratch.data(), nullptr);
    else opt.write_state(pending, nullptr, scratch.data());
    pending = -1;
  };
  size_t found = 0;
  read_safetensors_into(state_path, [&](const std::string& key, DType dtype, const std::vector<int64_t>& shape) -> void* {
    flush();
    auto it = where.find(key);
    if (it == where.end()) return nullptr;
    const auto& p = rt.param(it->second.first);
    const bool param = it->second.second == 'p';
    View into = param ? p.value : it->second.second == 'm' ? p.m : p.v;
    DType want = param ? p.value.dtype : p.q8_block ? DType::U8 : DType::F32;
    Shape want_shape = !param && p.q8_block ? Shape{rt.state_bytes(it->second.first)} : p.value.shape;
    if (dtype != want || Shape(shape) != want_shape)
      fail("--resume: tensor '" + key + "' in '" + state_path + "' does not match the program" +
           (!param && dtype != want ? std::string(" (its AdamW state is ") + (dtype == DType::U8 ? "8-bit" : "fp32") +
                                          ", this run's " + rt.optimizer_name() + " keeps it " +
                                          (p.q8_block ? "8-bit)" : "fp32)")
                                    : std::string()));
    ++found;
    if (into.data) return into.data;
    scratch.resize(size_t(rt.state_bytes(it->second.first)));
    pending = it->second.first;
    pending_kind = it->second.second;
    return scratch.data();
  });
  flush();
  if (found != where.size())
    fail("--resume: '" + state_path + "' lacks " + std::to_string(where.size() - found) + " of the program's tensors");
  return step;
}

}  // namespace fy
