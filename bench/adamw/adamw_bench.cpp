// fuyou-bench-adamw: CPU AdamW against the memory-bandwidth bound, in one run.
//
//   fuyou-bench-adamw [--n PARAMS] [--reps R] [--threads T]
//
// Measures, each as the best of R timed rounds after one untimed round (a
// round runs every kernel once, so all see the same machine conditions):
//   - STREAM triad a[i] = b[i] + s*c[i] on fp32 arrays of PARAMS elements
//     (3 x 256 MiB by default, far beyond any LLC), with 1 thread and with T.
//     Bandwidth is counted as STREAM does, 12 B per element (read b, c; write
//     a). The CPU also reads each line of a before writing it (the
//     read-for-ownership of write-allocate caches), so the DRAM traffic is
//     16 B per element; that figure is printed too. A triad with
//     non-temporal stores (no RFO) shows what the memory can do when nothing
//     is read for ownership.
//   - fy::adamw_step (one thread; every instruction set the CPU has) and
//     fy::AdamWPool::update (T threads) on PARAMS parameters. Bytes that must
//     move per parameter: read p, g, m, v (16 B), write p, m, v (12 B) = 28 B.
//     The written lines were just read, so there is no RFO: 28 B is also the
//     DRAM traffic.
//   - fy::adamw8bit_step / AdamWPool::submit_8bit: AdamW with block-wise
//     8-bit moments, as parameters per second against fp32 AdamW's.
//   - A loop with AdamW's traffic and no arithmetic (p += g, m += g, v += g):
//     the bandwidth this access pattern gets, a tighter bound than the triad.
// and prints the ratio of AdamW's implied bandwidth to the triad bandwidth
// (goal >= 0.8). Lines starting with "result " are key=value for scripts
// (bench/adamw/run.sh compares them with torch).
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "optim/adamw.h"
#include "optim/adamw8bit.h"

namespace {

using Clock = std::chrono::steady_clock;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "fuyou-bench-adamw: error: %s\n", msg.c_str());
  std::exit(2);
}

int64_t parse_int(const char* flag, const char* s) {
  char* end = nullptr;
  const long long v = std::strtoll(s, &end, 10);
  if (end == s || *end != '\0' || v <= 0) die(std::string(flag) + " expects a positive integer, got '" + s + "'");
  return v;
}

std::string cpu_model() {
  std::ifstream f("/proc/cpuinfo");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind("model name", 0) == 0) {
      const size_t c = line.find(':');
      return c == std::string::npos ? line : line.substr(c + 2);
    }
  return "unknown";
}

// Runs body(lo, hi) on `threads` threads over [0, n) in contiguous slices
// whose bounds are multiples of 1024 elements (4 KiB), so every slice starts
// 64-byte aligned.
void parallel_slices(int threads, int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  if (threads <= 1) {
    body(0, n);
    return;
  }
  auto bound = [&](int t) { return t == threads ? n : std::min(n, (n * t / threads) / 1024 * 1024); };
  std::vector<std::thread> ts;
  for (int t = 1; t < threads; ++t) ts.emplace_back([&, t] { body(bound(t), bound(t + 1)); });
  body(0, bound(1));
  for (auto& t : ts) t.join();
}

__attribute__((noinline)) void triad(float* __restrict a, const float* __restrict b, const float* __restrict c,
                                     float s, int64_t n) {
  for (int64_t i = 0; i < n; ++i) a[i] = b[i] + s * c[i];
}

// Non-temporal stores; a must be 64-byte aligned (slices are).
__attribute__((noinline, target("avx512f"))) void triad_nt512(float* a, const float* b, const float* c, float s,
                                                              int64_t n) {
  const __m512 vs = _mm512_set1_ps(s);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_stream_ps(a + i, _mm512_add_ps(_mm512_loadu_ps(b + i), _mm512_mul_ps(vs, _mm512_loadu_ps(c + i))));
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}
__attribute__((noinline, target("avx2"))) void triad_nt256(float* a, const float* b, const float* c, float s,
                                                           int64_t n) {
  const __m256 vs = _mm256_set1_ps(s);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_stream_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(b + i), _mm256_mul_ps(vs, _mm256_loadu_ps(c + i))));
  for (; i < n; ++i) a[i] = b[i] + s * c[i];
  _mm_sfence();
}

// AdamW's memory traffic without its arithmetic: read p, g, m, v, write p,
// m, v in place. What AdamW would reach if its arithmetic were free.
__attribute__((noinline)) void same_traffic(float* __restrict p, const float* __restrict g, float* __restrict m,
                                            float* __restrict v, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    p[i] += gi;
    m[i] += gi;
    v[i] += gi;
  }
}

// Deterministic pseudo-random floats in [lo, hi), filled in parallel (first
// touch of every page happens here, outside the timed runs).
void fill(float* x, int64_t n, uint64_t seed, float lo, float hi, int threads) {
  parallel_slices(threads, n, [&](int64_t a, int64_t b) {
    for (int64_t i = a; i < b; ++i) {
      uint64_t z = (uint64_t(i) + seed * 0x9E3779B97F4A7C15ull) * 0xBF58476D1CE4E5B9ull;
      z ^= z >> 31;
      z *= 0x94D049BB133111EBull;
      z ^= z >> 29;
      x[i] = lo + (hi - lo) * float(z >> 40) * (1.0f / float(1 << 24));
    }
  });
}

}  // namespace

int main(int argc, char** argv) {
  int64_t n = int64_t(64) << 20;
  int reps = 5;
  int threads = fy::available_cpus();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    auto value = [&]() -> const char* {
      if (i + 1 >= argc) die(a + " needs a value");
      return argv[++i];
    };
    if (a == "--n")
      n = parse_int("--n", value());
    else if (a == "--reps")
      reps = int(parse_int("--reps", value()));
    else if (a == "--threads")
      threads = int(parse_int("--threads", value()));
    else if (a == "-h" || a == "--help") {
      std::printf("usage: fuyou-bench-adamw [--n PARAMS (default 67108864)] [--reps R (5)] [--threads T (all CPUs)]\n");
      return 0;
    } else
      die("unknown argument '" + a + "'");
  }
  n = (n + 15) / 16 * 16;  // whole 64-byte lines per array

  const size_t bytes = size_t(n) * sizeof(float);
  const size_t align = size_t(2) << 20;
  auto alloc = [&](const char* what) {
    void* ptr = std::aligned_alloc(align, (bytes + align - 1) / align * align);
    if (!ptr) die(std::string("cannot allocate ") + std::to_string(bytes >> 20) + " MiB for " + what);
    return static_cast<float*>(ptr);
  };
  float *p = alloc("p"), *g = alloc("g"), *m = alloc("m"), *v = alloc("v");

  std::printf("fuyou-bench-adamw: %lld params (p, g, m, v: 4 x %.0f MiB; 4 more such arrays for the bandwidth kernels), best of %d, threads %d\n", (long long)n,
              double(bytes) / (1 << 20), reps, threads);
  std::printf("machine: %s, %d CPUs available (nproc %ld); AdamW isa: %s\n", cpu_model().c_str(), fy::available_cpus(),
              sysconf(_SC_NPROCESSORS_ONLN), fy::adamw_isa_name(fy::adamw_best_isa()));
  std::printf("result n=%lld threads=%d reps=%d isa=%s\n", (long long)n, threads, reps,
              fy::adamw_isa_name(fy::adamw_best_isa()));
  std::fflush(stdout);

  // The bandwidth kernels get arrays of their own (a, b, c, d), so AdamW's
  // state stays a plausible optimizer state whatever ran before.
  float *a = alloc("a"), *b = alloc("b"), *c = alloc("c"), *d = alloc("d");
  fill(a, n, 1, -1, 1, threads);
  fill(b, n, 2, -1, 1, threads);
  fill(c, n, 3, -1, 1, threads);
  fill(d, n, 4, -1, 1, threads);
  fill(p, n, 5, -1, 1, threads);
  fill(g, n, 6, -1, 1, threads);
  std::memset(m, 0, bytes);
  std::memset(v, 0, bytes);
  const fy::AdamWConfig cfg{1e-3f, 0.9f, 0.999f, 1e-8f, 0.01f};
  int64_t step = 0;
  const bool nt512 = __builtin_cpu_supports("avx512f"), nt256 = __builtin_cpu_supports("avx2");

  // Every kernel of one thread count runs once per round, rounds repeated
  // `reps` times (after a warm-up round), best time kept: kernels compared
  // with each other see the same conditions even when the machine is shared.
  struct Kernel {
    std::string name;
    double bytes_per_elem;
    std::function<void(int)> run;  // argument: thread count
    double best[2] = {1e30, 1e30};
    bool single_only = false;
  };
  std::vector<Kernel> ks;
  ks.push_back({"triad", 12.0, [&](int t) {
                  parallel_slices(t, n, [&](int64_t lo, int64_t hi) { triad(a + lo, b + lo, c + lo, 3.0f, hi - lo); });
                }});
  if (nt512 || nt256)
    ks.push_back({"triad NT stores", 12.0, [&](int t) {
                    parallel_slices(t, n, [&](int64_t lo, int64_t hi) {
                      (nt512 ? triad_nt512 : triad_nt256)(a + lo, b + lo, c + lo, 3.0f, hi - lo);
                    });
                  }});
  ks.push_back({"AdamW's traffic", 28.0, [&](int t) {
                  parallel_slices(t, n, [&](int64_t lo, int64_t hi) { same_traffic(a + lo, b + lo, c + lo, d + lo, hi - lo); });
                }});
  for (auto isa : {fy::AdamWIsa::Scalar, fy::AdamWIsa::Avx2, fy::AdamWIsa::Avx512})
    if (fy::adamw_isa_supported(isa) && isa != fy::adamw_best_isa()) {
      ks.push_back({std::string("adamw ") + fy::adamw_isa_name(isa), 28.0,
                    [&, isa](int) { fy::adamw_step_isa(isa, p, g, m, v, n, cfg, ++step); }});
      ks.back().single_only = true;
    }
  // The entry points: adamw_step with 1 thread, AdamWPool with `threads`.
  fy::AdamWPool pool1(1), pool(threads);
  ks.push_back({"AdamW", 28.0, [&](int t) {
                  if (t == 1)
                    fy::adamw_step(p, g, m, v, n, cfg, ++step);
                  else
                    pool.update(p, g, m, v, n, cfg, ++step);
                }});
  ks.push_back({"AdamWPool", 28.0, [&](int) { pool1.update(p, g, m, v, n, cfg, ++step); }});
  ks.back().single_only = true;  // a pool of one worker: the cost of handing work over
  // 8-bit moments (issue 6): read p, g and two code bytes, write p and the
  // codes back: 16 B/param (plus 4 B of absmax per 256). Own states, zero at start.
  const int64_t q8_block = 256;
  std::vector<uint8_t> m8(fy::q8_state_bytes(n, q8_block), 0), v8(m8.size(), 0);
  ks.push_back({"AdamW8bit", 16.0, [&](int t) {
                  if (t == 1)
                    fy::adamw8bit_step(p, g, m8.data(), v8.data(), n, q8_block, cfg, ++step);
                  else
                    pool.wait(pool.submit_8bit(p, g, m8.data(), v8.data(), n, q8_block, cfg, ++step));
                }});
  const int counts[2] = {1, threads};
  for (int k = 0; k < 2; ++k) {
    if (k == 1 && threads == 1) {
      for (auto& kn : ks) kn.best[1] = kn.best[0];
      break;
    }
    for (int r = -1; r < reps; ++r)
      for (auto& kn : ks) {
        if (kn.single_only && k == 1) continue;
        const auto t0 = Clock::now();
        kn.run(counts[k]);
        const double sec = std::chrono::duration<double>(Clock::now() - t0).count();
        if (r >= 0) kn.best[k] = std::min(kn.best[k], sec);
      }
  }
  auto find = [&](const std::string& name) -> const Kernel& {
    for (auto& kn : ks)
      if (kn.name == name) return kn;
    die("no kernel " + name);
  };
  auto gbs = [&](const Kernel& kn, int k) { return kn.bytes_per_elem * double(n) / kn.best[k] / 1e9; };
  for (int k = 0; k < (threads == 1 ? 1 : 2); ++k) {
    const int t = counts[k];
    const double triad_gbs = gbs(find("triad"), k), same_gbs = gbs(find("AdamW's traffic"), k);
    std::printf("\n-- %d thread%s\n", t, t == 1 ? "" : "s");
    for (auto& kn : ks) {
      if (kn.single_only && k == 1) continue;
      if (kn.bytes_per_elem == 12.0) {
        const bool nt = kn.name != "triad";
        std::printf("%-18s %7.2f GB/s (STREAM's count, 12 B/elem)", kn.name.c_str(), gbs(kn, k));
        if (!nt) std::printf("; DRAM traffic with the RFO of a: %.2f GB/s", gbs(kn, k) * 16.0 / 12.0);
        std::printf("\n");
      } else if (kn.name == "AdamW8bit") {
        std::printf("%-18s %7.1f Mparam/s = %.2fx fp32 AdamW's params/s (goal >= 0.9), %.2f GB/s at 16 B/param\n",
                    (t == 1 ? "adamw8bit_step" : "AdamWPool 8-bit"), double(n) / kn.best[k] / 1e6,
                    find("AdamW").best[k] / kn.best[k], gbs(kn, k));
      } else if (kn.name == "AdamW's traffic") {
        std::printf("%-18s %7.2f GB/s (read p,g,m,v, write p,m,v in place, 28 B/elem, adds only)\n", kn.name.c_str(),
                    gbs(kn, k));
      } else {
        const double x = gbs(kn, k);
        std::printf("%-18s %7.1f Mparam/s = %6.2f GB/s at 28 B/param = %.2fx triad (goal >= 0.8), %.2fx AdamW's traffic\n",
                    (kn.name == "AdamW" ? std::string(t == 1 ? "adamw_step " : "AdamWPool ") +
                                              fy::adamw_isa_name(fy::adamw_best_isa())
                                        : kn.name == "AdamWPool" ? std::string("AdamWPool(") + std::to_string(t) + ")"
                                                                 : kn.name)
                        .c_str(),
                    double(n) / kn.best[k] / 1e6, x, x / triad_gbs, x / same_gbs);
      }
    }
  }
  const Kernel& aw = find("AdamW");
  const char* sfx[2] = {"1t", "all"};
  std::printf("\n");
  for (int k = 0; k < 2; ++k)
    std::printf("result triad_gbs_%s=%.3f triad_nt_gbs_%s=%.3f same_traffic_gbs_%s=%.3f adamw_pps_%s=%.6e "
                "adamw_gbs_%s=%.3f ratio_triad_%s=%.3f ratio_same_traffic_%s=%.3f adamw8bit_pps_%s=%.6e "
                "ratio_8bit_%s=%.3f\n",
                sfx[k], gbs(find("triad"), k), sfx[k], (nt512 || nt256) ? gbs(find("triad NT stores"), k) : 0.0, sfx[k],
                gbs(find("AdamW's traffic"), k), sfx[k], double(n) / aw.best[k], sfx[k], gbs(aw, k), sfx[k],
                gbs(aw, k) / gbs(find("triad"), k), sfx[k], gbs(aw, k) / gbs(find("AdamW's traffic"), k), sfx[k],
                double(n) / find("AdamW8bit").best[k], sfx[k], aw.best[k] / find("AdamW8bit").best[k]);
  std::free(a), std::free(b), std::free(c), std::free(d);
  std::free(p), std::free(g), std::free(m), std::free(v);
  return 0;
}
