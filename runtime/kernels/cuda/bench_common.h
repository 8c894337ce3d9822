// What the kernel benchmarks (fuyou-bench-*-cuda) share: checked CUDA calls,
// a median of timed calls, and a main that reads --reps and reports errors.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/kernels.h"

namespace fy::bench {

inline void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) fy::fail(std::string(what) + ": " + cudaGetErrorString(e));
}

// Median milliseconds of fn over `reps` timed calls on the default stream,
// after one warm-up.
inline double median_ms(const std::function<void()>& fn, int reps) {
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "cudaEventCreate");
  check(cudaEventCreate(&e1), "cudaEventCreate");
  fn();
  std::vector<double> ms;
  for (int r = 0; r < reps; ++r) {
    check(cudaEventRecord(e0, nullptr), "cudaEventRecord");
    fn();
    check(cudaEventRecord(e1, nullptr), "cudaEventRecord");
    check(cudaEventSynchronize(e1), "cudaEventSynchronize");
    float t = 0;
    check(cudaEventElapsedTime(&t, e0, e1), "cudaEventElapsedTime");
    ms.push_back(t);
  }
  fy::cuda::synchronize();
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}

// main for a benchmark `name` [--reps N]: run(reps) on the default stream;
// an error is one line on stderr and exit status 1.
inline int bench_main(const char* name, int argc, char** argv, int default_reps, int (*run)(int reps)) {
  try {
    int reps = default_reps;
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--reps") == 0 && i + 1 < argc && std::atoi(argv[i + 1]) > 0)
        reps = std::atoi(argv[++i]);
      else
        fy::fail(std::string("unknown or bad flag '") + argv[i] + "' (usage: " + name + " [--reps N])");
    }
    fy::cuda::set_stream(nullptr);
    return run(reps);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: error: %s\n", name, e.what());
  }
  return 1;
}

}  // namespace fy::bench
