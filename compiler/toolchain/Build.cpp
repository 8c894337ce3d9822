#include "compiler/toolchain/Build.h"

#include "compiler/toolchain/Config.h"
#include "runtime/abi/safetensors_layout.h"

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <set>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

namespace fs = std::filesystem;

namespace fuyou::toolchain {

std::string writeWeights(const onnx_in::Model &model, const std::vector<std::string> &names,
                         const std::string &path, bool &written) {
  written = false;
  std::vector<std::pair<std::string, const onnx_in::Tensor *>> sorted;
  for (const auto &name : names) {
    const onnx_in::Tensor *t = nullptr;
    for (const auto &init : model.initializers)
      if (init.name == name)
        t = &init;
    if (!t)
      return "no initializer named '" + name + "'";
    if (t->loaded)  // else the program reads it where the ONNX file keeps it
      sorted.emplace_back(name, t);
  }
  if (sorted.empty())
    return "";
  std::sort(sorted.begin(), sorted.end(), [](auto &a, auto &b) { return a.first < b.first; });
  for (size_t i = 0; i < sorted.size(); ++i)
    if (sorted[i].first.empty() || sorted[i].first == "__metadata__" ||
        (i && sorted[i].first == sorted[i - 1].first))
      return "initializer name '" + sorted[i].first + "' cannot name a tensor of the weights file (empty, reserved or repeated)";
  std::vector<fy::abi::StTensor> layout;
  for (const auto &[name, t] : sorted) {
    const bool f32 = t->dtype == onnx_in::DType::F32, i64 = t->dtype == onnx_in::DType::I64;
    layout.push_back(fy::abi::StTensor{name, f32 ? "F32" : i64 ? "I64" : "U8", t->shape, f32 ? 4u : i64 ? 8u : 1u});
    if (t->bytes.size() != layout.back().nbytes())
      return "initializer '" + name + "' holds " + std::to_string(t->bytes.size()) + " bytes, not its shape's " +
             std::to_string(layout.back().nbytes());
  }
  // The caller writes to a temporary and renames it once the program is built.
  std::vector<std::pair<std::string, std::string>> crcs;  // the runtime checks them when it reads the file
  for (const auto &[name, t] : sorted)
    crcs.emplace_back(fy::abi::kStCrcKey + name,
                      fy::abi::st_crc_text(fy::abi::crc32c_portable(0, t->bytes.data(), t->bytes.size())));
  const fy::abi::StHeader header = fy::abi::safetensors_header(crcs, layout);
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0)
    return "cannot create '" + path + "': " + std::strerror(errno);
  auto put = [&](const void *data, size_t n) {
    for (const char *p = static_cast<const char *>(data); n;) {
      const ssize_t w = ::write(fd, p, n);
      if (w < 0 && errno == EINTR)
        continue;
      if (w <= 0)
        return false;
      p += w;
      n -= size_t(w);
    }
    return true;
  };
  bool ok = put(header.bytes.data(), header.bytes.size());
  for (const auto &[name, t] : sorted)
    ok = ok && put(t->bytes.data(), t->bytes.size());
  ok = ok && ::fsync(fd) == 0;
  const std::string why = ok ? "" : std::strerror(errno);
  ok = ::close(fd) == 0 && ok;
  if (!ok)
    return "writing '" + path + "' failed: " + (why.empty() ? std::strerror(errno) : why);
  written = true;
  return "";
}

// A C++ string literal of `s`.
static std::string cppLiteral(const std::string &s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') out += {'\\', char(c)};
    else if (c == '\n') out += "\\n\"\n\"";  // a line of the literal per line of the manifest
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c >= 0x7f) { char b[8]; std::snprintf(b, sizeof b, "\\%03o", c); out += b; }
    else out += char(c);
  }
  return out + "\"";
}

std::string weightSourcesCpp(const onnx_in::Model &model, const std::vector<std::string> &names,
                             const std::string &program, std::string &error) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const std::string modelPath = fs::absolute(model.path, ec).lexically_normal().string();
  const std::string dir = fs::path(modelPath).parent_path().string();
  auto bad = [](const std::string &x) { return x.find_first_of("\t\n") != std::string::npos; };
  if (bad(modelPath)) {
    error = "the model's path holds a tab or a newline";
    return "";
  }
  // And relative to the program, so that a program moved with its model
  // (a directory copied to another machine) finds it there.
  const std::string fromProgram =
      fs::path(modelPath).lexically_relative(fs::absolute(program, ec).lexically_normal().parent_path()).string();
  if (bad(fromProgram)) {
    error = "the model's path holds a tab or a newline";
    return "";
  }
  std::string m = "M\t" + modelPath + "\t" + fromProgram + "\n";
  std::set<std::string> params(names.begin(), names.end());
  for (const auto &t : model.initializers) {
    if (bad(t.name)) {
      error = "initializer name '" + t.name + "' holds a tab or a newline";
      return "";
    }
    if (!params.count(t.name)) {
      m += "K\t" + t.name + "\n";
    } else if (t.loaded || t.source.path.empty()) {
      m += "E\t" + t.name + "\n";
    } else {
      // Relative to the model's directory (its external data), or "" for the
      // model file itself (raw_data): --onnx moves both.
      std::string rel = t.source.path == modelPath ? "" : fs::path(t.source.path).lexically_relative(dir).string();
      if (bad(rel)) {
        error = "the external data path of '" + t.name + "' holds a tab or a newline";
        return "";
      }
      m += "P\t" + t.name + "\t" + std::to_string(t.onnxType) + "\t" + std::to_string(t.source.offset) + "\t" +
           std::to_string(t.source.length) + "\t" + rel + "\n";
    }
  }
  // Each file read from, with its size and modification time: a file
  // changed since the compile (a new export to the same path) is refused
  // rather than read at the old offsets.
  std::set<std::string> files;
  for (const auto &t : model.initializers)
    if (params.count(t.name) && !t.loaded && !t.source.path.empty())
      files.insert(t.source.path);
  for (const std::string &f : files) {
    struct stat st;
    const std::string rel = f == modelPath ? "" : fs::path(f).lexically_relative(dir).string();
    if (::stat(f.c_str(), &st) == 0)
      m += "F\t" + rel + "\t" + std::to_string(st.st_size) + "\t" +
           std::to_string(int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec) + "\n";
  }
  for (const auto &[a, b] : model.aliases)
    if (!bad(a) && !bad(b))
      m += "A\t" + a + "\t" + b + "\n";
  return "\n// Where each parameter's initial values are (fuyou-compile read none of them).\n"
         "static const char kFyWeightSources[] =\n    " + cppLiteral(m) + ";\n"
         "static const bool kFyWeightSourcesSet = fy::rt::set_weight_sources(kFyWeightSources);\n";
}

static std::string selfDir() {
  std::error_code ec;
  fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string() : exe.parent_path().string();
}

bool haveTarget(const std::string &target) {
  return target == "cpu" || (target == "cuda" && std::strlen(FUYOU_RT_CUDA_LIBRARY) > 0);
}

// The build's process group (its shell's pid) while it runs, and the
// temporary file its messages go to.
static volatile std::sig_atomic_t buildGroup = 0;
static char buildLog[4096];

sigset_t stopSignalSet() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : kStopSignals)
    sigaddset(&set, sig);
  return set;
}

void stopBuild(int sig) noexcept {
  const pid_t group = buildGroup;
  if (group <= 0)
    return;
  ::kill(-group, sig);
  // Until every process of the group has gone (the compiler driver's
  // children too: the linker may still be writing): 2 s, then SIGKILL.
  // Ours are reaped here; one the group still has is alive, or a zombie
  // that its own parent reaps.
  const struct timespec tick {0, 10 * 1000 * 1000};
  auto gone = [group] {
    while (::waitpid(-group, nullptr, WNOHANG) > 0) {
    }
    return ::kill(-group, 0) != 0 && errno == ESRCH;
  };
  int i = 0;
  for (; i < 200 && !gone(); ++i)
    ::nanosleep(&tick, nullptr);
  if (i == 200) {
    ::kill(-group, SIGKILL);
    for (int k = 0; k < 100 && !gone(); ++k)
      ::nanosleep(&tick, nullptr);
  }
  ::unlink(buildLog);
}

// Runs `cmd` with /bin/sh in a process group of its own (writing `log`);
// returns "" with its wait status, or what went wrong.
static std::string runInOwnGroup(const std::string &cmd, const std::string &log, int *status) {
  posix_spawnattr_t attr;
  ::posix_spawnattr_init(&attr);
  // The child starts with the signals this thread had unblocked, below.
  // (The compile has no other thread that could take one meanwhile.)
  const sigset_t stop = stopSignalSet();
  sigset_t before;
  ::sigprocmask(SIG_BLOCK, &stop, &before);
  ::posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK);
  ::posix_spawnattr_setpgroup(&attr, 0);
  ::posix_spawnattr_setsigmask(&attr, &before);
  // (A compile started with SIGCHLD ignored would find no child to wait for.)
  ::signal(SIGCHLD, SIG_DFL);
  // The build dies with the compile, however the compile ends: a watcher in
  // the build's group reads a pipe whose only writer is this process, and at
  // its end (this process gone, or done waiting) kills the group.
  int lifeline[2] = {-1, -1};
  if (::pipe2(lifeline, O_CLOEXEC) != 0) {
    ::sigprocmask(SIG_SETMASK, &before, nullptr);
    ::posix_spawnattr_destroy(&attr);
    return std::string("cannot start the C++ compiler: pipe: ") + std::strerror(errno);
  }
  posix_spawn_file_actions_t files;
  ::posix_spawn_file_actions_init(&files);
  ::posix_spawn_file_actions_adddup2(&files, lifeline[0], 9);  // (dup2 clears close-on-exec)
  const std::string guarded = "{ read _ <&9; kill -s KILL 0; } & exec 9<&-; " + cmd;
  const char *argv[] = {"sh", "-c", guarded.c_str(), nullptr};
  pid_t pid = 0;
  int err = ::posix_spawn(&pid, "/bin/sh", &files, &attr, const_cast<char *const *>(argv), environ);
  ::posix_spawn_file_actions_destroy(&files);
  ::posix_spawnattr_destroy(&attr);
  ::close(lifeline[0]);
  // No signal between the spawn and here: the handler then finds the group.
  if (err == 0) {
    std::snprintf(buildLog, sizeof buildLog, "%s", log.c_str());
    buildGroup = pid;
  }
  ::sigprocmask(SIG_SETMASK, &before, nullptr);
  if (err != 0) {
    ::close(lifeline[1]);
    return std::string("cannot start the C++ compiler: ") + std::strerror(err);
  }
  std::string lost;
  while (::waitpid(pid, status, 0) < 0)
    if (errno != EINTR) {
      lost = std::string("lost the C++ compiler's process: ") + std::strerror(errno);
      break;
    }
  ::close(lifeline[1]);  // the watcher ends, and whatever the build left in its group
  buildGroup = 0;
  return lost;
}

// `s` as one word for /bin/sh, whatever quotes or spaces it holds.
static std::string shellQuoted(const std::string &s) {
  std::string q = "'";
  for (char c : s)
    q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

std::string buildExecutable(const std::string &cppPath, const std::string &out,
                            const std::string &target, int *signal) {
  // Installed: <prefix>/bin/fuyou-compile, <prefix>/lib, <prefix>/include/fuyou.
  const bool cuda = target == "cuda";
  std::string include = FUYOU_RT_BUILD_INCLUDE;
  std::string library = cuda ? FUYOU_RT_CUDA_LIBRARY : FUYOU_RT_BUILD_LIBRARY;
  std::string flags = FUYOU_RT_LINK_FLAGS;
  if (cuda)
    flags = std::string(FUYOU_RT_CUDA_LINK_FLAGS) + " " + flags;
  const char *libName = cuda ? "lib/libfuyou_rt_cuda.a" : "lib/libfuyou_rt.a";
  fs::path prefix = fs::path(selfDir()).parent_path();
  if (fs::exists(prefix / "include/fuyou/abi/api.h") && fs::exists(prefix / libName)) {
    include = (prefix / "include/fuyou").string();
    library = (prefix / libName).string();
  }
  if (!fs::exists(library))
    return "the runtime library is missing: " + library;

  // The compiler's messages go to a temporary file, not beside the output:
  // when that disk is full, the log is where the reason would be lost.
  std::error_code ec;
  fs::path tmpDir = fs::temp_directory_path(ec);
  if (ec)
    tmpDir = "/tmp";  // TMPDIR names nothing usable: the compiler falls back so too
  std::string log = (tmpDir / "fuyou-build-XXXXXX").string();
  int logFd = ::mkstemp(log.data());
  if (logFd < 0)
    return "cannot create a temporary file for the build's messages in " + tmpDir.string() + ": " +
           std::strerror(errno);
  ::close(logFd);
  // -O0: the program is straight-line calls into the runtime, where every
  // kernel is already optimised; -O2 took four times as long to build
  // (27 s against 7 s for 12 layers) and gave no faster steps.
  std::string cmd = std::string(FUYOU_CXX) + " -std=c++17 -O0 -w -I" + shellQuoted(include) + " " +
                    shellQuoted(cppPath) + " " + shellQuoted(library) + " " + flags + " -o " +
                    shellQuoted(out) + " > " + shellQuoted(log) + " 2>&1";
  int rc = 0;
  const std::string failed = runInOwnGroup(cmd, log, &rc);
  std::string messages;
  if (FILE *f = std::fopen(log.c_str(), "r")) {
    char buf[4096];
    size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0 && messages.size() < 4000)
      messages.append(buf, n);
    std::fclose(f);
  }
  std::remove(log.c_str());
  if (!failed.empty()) {
    std::remove(out.c_str());
    return failed;
  }
  if (rc != 0) {
    std::remove(out.c_str());
    // The build's shell died by a signal sent to its group alone.
    if (WIFSIGNALED(rc)) {
      if (signal)
        *signal = WTERMSIG(rc);
      return "building the executable was interrupted (signal " + std::to_string(WTERMSIG(rc)) + "); nothing written";
    }
    for (char &c : messages)
      if (c == '\n')
        c = ' ';
    return "building the executable failed: " + messages.substr(0, 600);
  }
  return "";
}

} // namespace fuyou::toolchain
