// fuyou-calibrate: measures this machine for the compiler's cost model and
// writes a profile (tools/profile.h).
//
//   fuyou-calibrate [-o FILE] [--ssd DIR] [--quick]
//
// Every figure comes from the code a generated program runs. Kernels and
// host<->device copies go through the runtime API (abi/api.h), so this one
// source measures the CPU target when linked with libfuyou_rt
// (fuyou-calibrate) and the GPU when linked with libfuyou_rt_cuda
// (fuyou-calibrate-cuda), whose Device then holds the buffers. The SSD is the
// TensorStore as the optimizer opens it; AdamW runs on the pool the
// layer-group optimizer uses (on a GPU, beside host<->device copies). Each figure is the median of several timed
// samples after one untimed warm-up.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <fstream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "abi/api.h"
#include "device/device.h"
#include "trace/trace.h"
#include "exec/runtime.h"
#include "optim/adamw.h"
#include "store/store.h"
#include "tools/profile.h"

namespace {

using fy::DType;
using fy::Runtime;
using fy::Shape;
using fy::View;

constexpr char kUsage[] = "usage: fuyou-calibrate [-o FILE] [--ssd DIR] [--quick]";
constexpr int64_t kMiB = int64_t(1) << 20;

struct Options {
  std::string out;  // empty: the profile goes to stdout
  std::string ssd;  // empty: no SSD figures
  bool quick = false;
};

// Problem sizes. By default large enough for steady-state rates (buffers far
// beyond the last-level cache); --quick takes a few seconds, for tests.
struct Plan {
  int64_t matmul_n = 1024;  // an n x n x n product
  int64_t mem_bytes = 64 * kMiB;  // each of add's three buffers
  int64_t copy_bytes = 64 * kMiB;
  int64_t ssd_bytes = 256 * kMiB;
  int64_t adamw_params = 16 * kMiB;
  int repeats = 7;  // timed samples of each figure
  // Calls per timed sample: a GPU finishes one call in microseconds, so a
  // sample takes several for the host clock and the synchronisation to
  // matter little.
  int matmul_calls = 1, mem_calls = 1, copy_calls = 1, launch_calls = 1000;
};

Plan plan_for(bool quick, bool gpu) {
  Plan p;
  if (gpu) {
    p.matmul_n = 4096;
    p.matmul_calls = 10;
    p.mem_calls = 20;
    p.copy_calls = 4;
  }
  if (quick) {
    p.matmul_n = gpu ? 1024 : 512;
    p.mem_bytes = p.copy_bytes = p.ssd_bytes = 16 * kMiB;
    p.adamw_params = kMiB;
    p.repeats = 3;
    p.launch_calls = 200;
  }
  return p;
}

// ---- command line -------------------------------------------------------------

Options parse_args(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "-h" || arg == "--help") {
      std::printf("%s\n", kUsage);
      std::exit(0);
    }
    if (arg == "--quick") {
      o.quick = true;
      continue;
    }
    if (arg != "-o" && arg != "--ssd") fy::fail("unknown flag '" + arg + "' (" + kUsage + ")");
    if (i + 1 >= argc || !*argv[i + 1]) fy::fail(arg + " needs a value (" + kUsage + ")");
    (arg == "-o" ? o.out : o.ssd) = argv[++i];
  }
  return o;
}

// Bad paths fail before the measurements, not after a minute of them.
void check_output(const std::string& path) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0 || ::access(dir.c_str(), W_OK | X_OK) != 0)
    fy::fail("cannot write '" + path + "': " + std::strerror(errno));
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) fy::fail("cannot write '" + path + "': it is a directory");
}

void check_ssd_dir(const std::string& dir) {
  struct stat st;
  if (::stat(dir.c_str(), &st) != 0) fy::fail("--ssd '" + dir + "': " + std::strerror(errno));
  if (!S_ISDIR(st.st_mode)) fy::fail("--ssd '" + dir + "' is not a directory");
  if (::access(dir.c_str(), W_OK | X_OK) != 0) fy::fail("--ssd '" + dir + "': " + std::strerror(errno));
}

// ---- timing -----------------------------------------------------------------------

// Median seconds per call of `run`, each sample `calls` calls then `done()`
// (which waits for queued work). The untimed first call takes the page
// faults, library handles and clock ramp-up a steady program no longer pays.
template <class Run, class Done> double seconds_per_call(int repeats, int calls, Run&& run, Done&& done) {
  run();
  done();
  std::vector<double> samples;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int c = 0; c < calls; ++c) run();
    done();
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    samples.push_back(dt.count() / calls);
  }
  std::sort(samples.begin(), samples.end());
  const size_t n = samples.size();
  return n % 2 ? samples[n / 2] : (samples[n / 2 - 1] + samples[n / 2]) / 2;
}

// Waits for everything queued on the target: on a device, its compute
// stream, where the program's kernels and copies run in order; the CPU
// target runs each call to completion.
void settle(Runtime& rt) {
  if (fy::Device* d = rt.device()) d->finish_host_transfers();
}

template <class Run> double device_seconds(Runtime& rt, int repeats, int calls, Run&& run) {
  return seconds_per_call(repeats, calls, run, [&] { settle(rt); });
}

template <class Run> double host_seconds(int repeats, Run&& run) {
  return seconds_per_call(repeats, 1, run, [] {});
}

// The target's buffers for one measurement, given back at its end.
class Temps {
 public:
  explicit Temps(Runtime& rt) : rt_(rt) {}
  ~Temps() {
    for (const View& v : views_) fy::rt::dealloc(&rt_, v);
  }
  Temps(const Temps&) = delete;
  Temps& operator=(const Temps&) = delete;

  View filled(Shape s, double value) { return keep(fy::rt::constant_splat(&rt_, s, DType::F32, value)); }
  View uninit(Shape s) { return keep(fy::rt::alloc(&rt_, s, DType::F32)); }
  // Host memory as the program's host buffers get it (page-locked on a device).
  View host(Shape s) {
    View v = keep(fy::rt::alloc_host(&rt_, s, DType::F32));
    std::memset(v.data, 0, v.nbytes());
    return v;
  }

 private:
  View keep(View v) {
    views_.push_back(v);
    return v;
  }
  Runtime& rt_;
  std::vector<View> views_;
};

// ---- measurements -------------------------------------------------------------

// n x n x n products; smaller ones take more calls per sample (as many as
// make the work of the large size's calls, up to 4096).
double matmul_flops_per_s(Runtime& rt, const Plan& p, int64_t n) {
  Temps t(rt);
  View a = t.filled(Shape{n, n}, 0.5), b = t.filled(Shape{n, n}, 0.25), c = t.uninit(Shape{n, n});
  const double scale = double(p.matmul_n) / double(n);
  const int calls = int(std::min(4096.0, std::max(1.0, p.matmul_calls * scale * scale * scale)));
  const double s = device_seconds(rt, p.repeats, calls, [&] { fy::rt::matmul(&rt, a, b, c, false, false); });
  return 2.0 * double(n) * double(n) * double(n) / s;
}

// Elements per second of tanh-GELU (arithmetic-bound where the exp is
// costly), of a softmax over rows of 256 (a vocabulary-like width), and of
// a layer norm over rows of 256 and its gradient (row statistics: on a CPU
// these run well below the memory rate an elementwise kernel gets).
void transcendental_rates(Runtime& rt, const Plan& p, fy::Profile& out) {
  Temps t(rt);
  const int64_t n = p.mem_bytes / 4, rows = n / 256;
  View x = t.filled(Shape{n}, 0.5), y = t.uninit(Shape{n});
  out.transcendental_elems_per_s =
      double(n) / device_seconds(rt, p.repeats, p.mem_calls, [&] { fy::rt::gelu_tanh(&rt, x, y); });
  View xs = t.filled(Shape{rows, 256}, 0.5), ys = t.uninit(Shape{rows, 256});
  out.softmax_elems_per_s =
      double(rows * 256) / device_seconds(rt, p.repeats, p.mem_calls, [&] { fy::rt::softmax(&rt, xs, ys, 1); });
  View scale = t.filled(Shape{256}, 1.5), bias = t.filled(Shape{256}, 0.25);
  View mean = t.uninit(Shape{rows}), inv_std = t.uninit(Shape{rows});
  out.norm_elems_per_s = double(rows * 256) / device_seconds(rt, p.repeats, p.mem_calls, [&] {
    fy::rt::layer_norm(&rt, xs, scale, bias, ys, mean, inv_std, 1, 1e-5);
  });
  View dx = t.uninit(Shape{rows, 256}), dscale = t.uninit(Shape{256}), dbias = t.uninit(Shape{256});
  out.norm_grad_elems_per_s = double(rows * 256) / device_seconds(rt, p.repeats, p.mem_calls, [&] {
    fy::rt::layer_norm_grad(&rt, ys, xs, scale, mean, inv_std, dx, dscale, dbias, 1);
  });
}

// Fused causal attention's rate, forward and backward together, in flops of
// its products (the cost model's measure: 2 of them forward, 5 backward, over
// the scores a row sees), at a GPT-like head: 4 heads of 64 over T 1024.
double attention_flops_per_s(Runtime& rt, const Plan& p) {
  Temps t(rt);
  const int64_t H = 4, T = 1024, D = 64;
  View q = t.filled(Shape{1, H, T, D}, 0.5), k = t.filled(Shape{1, H, T, D}, 0.25), v = t.filled(Shape{1, H, T, D}, 1),
       out = t.uninit(Shape{1, H, T, D}), lse = t.uninit(Shape{1, H, T}), dq = t.uninit(Shape{1, H, T, D}),
       dk = t.uninit(Shape{1, H, T, D}), dv = t.uninit(Shape{1, H, T, D});
  const double flops = (2 + 5) * 2.0 * double(H) * double(T) * double(T + 1) / 2 * double(D);
  return flops / device_seconds(rt, p.repeats, 1, [&] {
    fy::rt::attention(&rt, q, k, v, out, lse, 0.125, 0, false);
    fy::rt::attention_grad(&rt, q, k, v, out, lse, v, dq, dk, dv, 0.125, 0, false);
  });
}

// add reads two buffers and writes one.
double mem_bytes_per_s(Runtime& rt, const Plan& p) {
  Temps t(rt);
  const Shape s{p.mem_bytes / 4};
  View a = t.filled(s, 1), b = t.filled(s, 2), c = t.uninit(s);
  return 3.0 * double(p.mem_bytes) / device_seconds(rt, p.repeats, p.mem_calls, [&] { fy::rt::add(&rt, a, b, c); });
}

// A kernel whose work is nothing: what every kernel costs on top of its work.
double launch_s(Runtime& rt, const Plan& p) {
  Temps t(rt);
  View a = t.filled(Shape{16}, 1), b = t.filled(Shape{16}, 2), c = t.uninit(Shape{16});
  return device_seconds(rt, p.repeats, p.launch_calls, [&] { fy::rt::add(&rt, a, b, c); });
}

void copy_rates(Runtime& rt, const Plan& p, fy::Profile& out) {
  Temps t(rt);
  const Shape s{p.copy_bytes / 4};
  View host = t.host(s), dev = t.filled(s, 1);
  const double bytes = double(p.copy_bytes);
  out.h2d_bytes_per_s = bytes / device_seconds(rt, p.repeats, p.copy_calls, [&] { fy::rt::copy_to_device(&rt, host, dev); });
  out.d2h_bytes_per_s = bytes / device_seconds(rt, p.repeats, p.copy_calls, [&] { fy::rt::copy_to_host(&rt, dev, host); });
}

// Removes a file when the scope ends, however it ends.
class RemoveOnExit {
 public:
  explicit RemoveOnExit(std::string path) : path_(std::move(path)) {}
  ~RemoveOnExit() { ::unlink(path_.c_str()); }
  RemoveOnExit(const RemoveOnExit&) = delete;
  RemoveOnExit& operator=(const RemoveOnExit&) = delete;

 private:
  std::string path_;
};

// One region written, then read, whole: the optimizer's state moves in
// regions of this kind, through the same queue depth and block size.
void ssd_rates(const std::string& dir, const Plan& p, fy::Profile& out) {
  fy::store::StoreOptions so;  // the optimizer's settings (AsyncOptimizer's constructor)
  so.dirs = {dir};
  so.truncate = true;
  so.file_name = "fuyou-calibrate.store";  // never a training run's store
  RemoveOnExit remove(dir + (dir.back() == '/' ? "" : "/") + so.file_name);
  fy::store::TensorStore store(so);
  const fy::store::Region r = store.allocate("calibrate", uint64_t(p.ssd_bytes));
  fy::store::AlignedBuffer buf = store.buffer(size_t(p.ssd_bytes));
  std::memset(buf.data(), 0x5a, buf.size());
  const double bytes = double(p.ssd_bytes);
  // The untimed first write also allocates the file's blocks.
  out.ssd_write_bytes_per_s = bytes / host_seconds(p.repeats, [&] { store.write_sync(r, buf.data()); });
  out.ssd_read_bytes_per_s = bytes / host_seconds(p.repeats, [&] { store.read_sync(r, buf.data()); });
}

double adamw_params_per_s(const Plan& p) {
  // The layer-group optimizer's pool at a run's default thread count.
  fy::AdamWPool pool(int(fy::TrainOptions().optimizer_threads));
  const int64_t n = p.adamw_params;
  fy::HostTensor w(Shape{n}, DType::F32), g(Shape{n}, DType::F32), m(Shape{n}, DType::F32), v(Shape{n}, DType::F32);
  std::fill_n(w.as<float>(), n, 0.5f);
  std::fill_n(g.as<float>(), n, 1e-3f);
  const fy::AdamWConfig cfg;
  int64_t step = 0;
  return double(n) / host_seconds(p.repeats, [&] {
    pool.update(w.as<float>(), g.as<float>(), m.as<float>(), v.as<float>(), n, cfg, ++step);
  });
}

// The same while another thread copies between page-locked host memory and
// the device, down then up, without a pause: in a step the gradients come
// down and the updated weights go up while the optimizer works, and the
// copies take host memory bandwidth that AdamW (28 bytes a parameter) needs.
// On an H100 host the programs' AdamW ran at 3.7-5.0 G params/s, where
// measured alone it gave 5.1-7.8.
double adamw_beside_copies_params_per_s(Runtime& rt, const Plan& p) {
  Temps t(rt);
  const Shape s{p.copy_bytes / 4};
  View down = t.host(s), up = t.host(s), dev = t.filled(s, 1);
  std::atomic<bool> stop{false};
  std::exception_ptr error;
  int64_t copies = 0;
  std::thread copier([&] {
    try {
      while (!stop.load()) {
        fy::rt::copy_to_host(&rt, dev, down);
        fy::rt::copy_to_device(&rt, up, dev);
        settle(rt);
        copies += 2;
      }
    } catch (...) {
      error = std::current_exception();
    }
  });
  double rate = 0;
  try {
    rate = adamw_params_per_s(p);
  } catch (...) {
    error = error ? error : std::current_exception();
  }
  stop = true;
  copier.join();
  if (error) std::rethrow_exception(error);
  if (copies < 2) fy::fail("the copies beside AdamW did not run while it was measured");
  return rate;
}

std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    const size_t colon = line.find(':');
    if (line.rfind("model name", 0) != 0 || colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(" \t", colon + 1);
    if (start != std::string::npos) return line.substr(start);
  }
  return "unknown CPU";
}

int run(int argc, char** argv) {
  const Options o = parse_args(argc, argv);
  if (!o.out.empty()) check_output(o.out);
  if (!o.ssd.empty()) check_ssd_dir(o.ssd);

  Runtime rt;
  // Null on the CPU target; on the CUDA target it fails without a GPU.
  std::unique_ptr<fy::Device> device = fy::make_device(rt);
  rt.set_device(device.get());
  // Matrix products at the precision programs default to (fuyou-compile --precision).
  fy::Profile p;
  p.matmul_precision = device ? "bf16" : "fp32";
  fy::rt::declare_precision(&rt, p.matmul_precision.c_str());
  const Plan plan = plan_for(o.quick, device != nullptr);

  p.target = device ? "cuda" : "cpu";
  p.device = device ? device->name() : cpu_model();
  p.matmul_n = double(plan.matmul_n);
  p.matmul_flops_per_s = matmul_flops_per_s(rt, plan, plan.matmul_n);
  p.matmul_n64_flops_per_s = matmul_flops_per_s(rt, plan, 64);
  p.matmul_n256_flops_per_s = matmul_flops_per_s(rt, plan, 256);
  // Between 256 and a GPU's 4096 the rate climbs most: a layer's products
  // (n ~ 1-2k) would otherwise be interpolated from the ends.
  if (plan.matmul_n > 1024) p.matmul_n1024_flops_per_s = matmul_flops_per_s(rt, plan, 1024);
  if (plan.matmul_n > 2048) p.matmul_n2048_flops_per_s = matmul_flops_per_s(rt, plan, 2048);
  p.device_mem_bytes_per_s = mem_bytes_per_s(rt, plan);
  transcendental_rates(rt, plan, p);
  p.attention_flops_per_s = attention_flops_per_s(rt, plan);
  p.launch_s = launch_s(rt, plan);
  copy_rates(rt, plan, p);
  if (!o.ssd.empty()) ssd_rates(o.ssd, plan, p);
  if (device) {
    p.adamw_alone_params_per_s = adamw_params_per_s(plan);
    p.adamw_params_per_s = adamw_beside_copies_params_per_s(rt, plan);
  } else {
    p.adamw_params_per_s = adamw_params_per_s(plan);  // the CPU target has no copies beside it
  }

  if (o.out.empty())
    std::fputs(fy::profile_json(p).c_str(), stdout);
  else
    fy::write_profile(o.out, p);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  fy::settle_openmp(argv);  // measure what the programs see
  try {
    return run(argc, argv);
  } catch (const std::exception& e) {
    std::string msg = e.what();
    for (char& c : msg)
      if (c == '\n' || c == '\r') c = ' ';  // the contract is one line
    std::fprintf(stderr, "fuyou-calibrate: error: %s\n", msg.c_str());
  }
  return 1;
}
