// The CUDA target's device: one GPU, one compute stream on which every
// kernel runs in program order, a copy stream each way for the program's
// started copies (activations, streamed weights), a download stream that
// takes each layer group's gradients to the optimizer's host slots, and an
// upload stream on which the background optimizer sends updated parameters
// back.
//
// Memory: the fp32 master weights, AdamW's moments (or their SSD staging) and
// the gradient slots stay in host memory, page-locked; the device holds a
// working copy of every parameter (none when the program streams them) and
// the program's temporaries: at the places the compiler's memory plan gave
// them in one arena, or (a program without offsets) from a pool that reuses
// buffers by size, bounded by --gpu-mem.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "device/arena.h"
#include "device/device.h"
#include "kernels/cuda/kernels.h"

namespace fy::cuda {

// Page-locked host memory: copies from and to it run at full speed and
// asynchronously (the Runtime's host storage, on this target).
void* pinned_alloc(size_t bytes);
void pinned_free(void* p);

// A copy's completion, as the layer-group optimizer waits for it: wait()
// blocks until it is done, ready() says whether it is (and "done" on an
// error, which the wait then reports).
struct Landing {
  std::function<void()> wait;
  std::function<bool()> ready;
};

class CudaDevice : public Device {
 public:
  explicit CudaDevice(DeviceHost& host);
  ~CudaDevice() override;

  const char* name() const override { return name_.c_str(); }
  void prepare() override;
  void run_step(const Step& step, View idx, View tgt, View loss, bool training) override;
  int64_t fixed_bytes() const override;
  int64_t fixed_host_bytes() const override { return host_.gather_up_bytes(); }
  const PoolStats& pool_stats() const override { return stats_; }
  std::string summary() const override;

  // ---- what the program's entry points (api_cuda.cpp) use ----
  View param(int64_t index);
  View alloc(Shape shape, DType dtype);
  // At the memory plan's offset in the arena, allocated once by prepare().
  View alloc_at(int64_t offset, Shape shape, DType dtype);
  // Temporaries of this device, or host buffers of the Runtime (activations
  // waiting for backward).
  void dealloc(View v);
  // Activations to and from host memory (page-locked), on the compute
  // stream in program order.
  void transfer(View src, View dst, cudaMemcpyKind kind);
  // The same on the copy stream of its direction, after every kernel queued
  // so far; copy_wait(ticket) makes the kernels queued after it wait.
  int64_t copy_start(View src, View dst, cudaMemcpyKind kind);
  void copy_wait(int64_t ticket);
  void finish_host_transfers() override;
  void settle_host(const void* data, size_t bytes) override;
  // Host data to a fresh temporary (constants): from the pool when offset
  // is negative, else at that place in the arena.
  View upload_temp(int64_t offset, Shape shape, DType dtype, const void* host);
  // A gather of ids from `table`, a streamed master in host memory, into
  // `out` on the device (fy-rows-first's gather_up): the host gathers the
  // rows into a page-locked buffer, a chunk at a time, each going up on the
  // compute stream while the next is gathered.
  void gather_up(View table, View ids, View out);

  // ---- the optimizer's side of a step, as exec orders it ----
  // Synchronous optimizer: the gradient into a page-locked host buffer of
  // this device (valid until the next call), and after the host's update
  // the parameter's working copy up again (queued on the compute stream).
  View gradient_to_host(View grad);
  void param_up(int64_t index);
  // Copies `grad` (on the device) to `dst` (host) and waits for it.
  void download(View grad, void* dst);
  // fy-device-optimizer's groups: AdamW here on the compute stream, on the
  // fp32 working copy (the master while the device updates it) with the
  // moments in device memory, taken from the host's at the first update;
  // settle_masters() brings all three back.
  void device_adamw(int64_t index, View grad, const AdamWScalars& s);
  void settle_masters() override;

  // Layer groups. Events for `groups` groups, before the first prepare().
  void prepare_groups(int64_t groups);
  // The kernels queued so far wrote the gradients about to go down: the
  // download stream starts behind them.
  void gradients_ready();
  // The group's gradients went to the optimizer (its copies are queued on
  // the download stream): the step must not end before they land.
  void gradients_offloaded(int64_t group);
  // fysched.grad_landed: kernels from here on may reuse the memory of the
  // group's gradients, so they wait on the device for its copy.
  void grad_landed(int64_t group);
  // Kernels after this wait on the device for the group's upload, for one
  // parameter's (its last piece), or for the rows the optimizer updated
  // first (`rows`; else the group's whole upload).
  void wait_group_upload(int64_t group);
  void wait_param_upload(int64_t param);
  void wait_rows_upload(int64_t group, bool rows);
  // The step's token ids in host memory when `ids` is the step's token
  // buffer on the device, else null.
  const int64_t* step_ids(View ids) const;
  // A table's early rows (AsyncOptimizer::offload_early) went down for
  // `group`: kept until that group's gradients_offloaded. early_held says
  // whether they are in flight for it; early_read, that the kernels issued
  // so far read table `param` last, so its uploads wait for them.
  void early_offloaded(int64_t group);
  bool early_held(int64_t group) const { return early_in_flight_ && group == early_group_; }
  void early_read(int64_t param);
  // With streamed weights: before an update lets go that rewrites master
  // `param`, the started uploads reading it have read it.
  void settle_master(int64_t param);

  // What the optimizer's thread calls (exec wires them): gradients down on
  // the download stream, behind gradients_ready();
  void gradient_out(const View& src, float* dst);
  // ...the group's copies issued: their landing;
  Landing gradients_out_landing(int64_t group);
  // ...the rows of a table's gradient that the next step gathers, into the
  // optimizer's page-locked buffer `dst`; and a chunk [lo, lo + n) of an
  // early part, whose event is its own (k: its index in the part);
  Landing gradient_rows_out(int64_t group, const View& src, const int64_t* rows, int64_t count, float* dst);
  Landing gradient_chunk_out(size_t k, const View& src, int64_t lo, int64_t n, float* dst);
  // parameters up on the upload stream as the update finishes them: a
  // piece of a master, the group's last (an event group waits take), and
  // the updated rows the next step gathers (returns once they are in, as
  // the optimizer reuses `values`).
  void piece_up(int64_t param, int64_t lo, int64_t n);
  void group_uploaded(int64_t group);
  void rows_up(int64_t group, int64_t param, const int64_t* rows, int64_t count, const float* values);

  // --trace: each kernel's time on the GPU, from events around it on the
  // compute stream, written to the "gpu" track when the step is over (the
  // started copies to "gpu copies").
  bool tracing() const { return host_.tracing(); }
  void kernel_start(const char* name, int64_t bytes = -1);
  void kernel_end() noexcept;

 private:
  size_t trace_event(cudaStream_t s);  // records the next trace event on `s`
  void end_copies();                    // after the step's synchronize
  void flush_kernel_trace();         // after the step's synchronize
  void reserve(size_t bytes, const char* what);
  void trim();  // frees every cached temporary
  size_t step_io_bytes() const;  // the step's token ids, targets and loss
  // Waits for the step's started copies that touch [data, data + bytes).
  void settle_started(const void* data, size_t bytes);

  DeviceHost& host_;
  std::string name_;
  // Kernels; parameters up (the optimizer's thread); gradients down.
  cudaStream_t compute_ = nullptr, upload_ = nullptr, download_ = nullptr;
  cudaStream_t to_device_ = nullptr, to_host_ = nullptr;  // started copies
  // Started copies of this step, by ticket: the copy done (on its stream).
  struct Started {
    cudaEvent_t done;
    const char* host;  // the host memory it reads or writes, until settled
    size_t bytes;
  };
  std::vector<Started> copies_;
  size_t copies_used_ = 0;
  bool queued_transfers_ = false;  // transfer() since the last synchronize
  std::vector<void*> params_;               // device copies, by parameter index
  std::vector<cudaEvent_t> group_events_;   // uploads done, by group
  std::vector<cudaEvent_t> rows_events_;    // the rows-first part's scatter done, by group
  std::vector<cudaEvent_t> param_events_;   // a parameter's upload done, by parameter
  const int64_t* step_ids_ = nullptr;       // the step's tokens in host memory
  std::vector<cudaEvent_t> landed_events_;  // gradient copies done, by group
  std::vector<cudaEvent_t> rows_landed_events_;  // the rows-first part's gradient copy done, two by group
  std::vector<int64_t> rows_copies_;             // rows copies a group has made (which of its two events)
  cudaEvent_t grads_ready_ = nullptr;       // the kernels before a grad_offload done
  cudaEvent_t copy_issued_ = nullptr;       // the kernels before a started copy done
  std::vector<int64_t> unlanded_;           // groups offloaded this step whose copy no kernel waits for yet
  bool early_in_flight_ = false;            // a table's early chunks are going down (until its grad_offload)
  int64_t early_group_ = -1;                // that table's group
  cudaEvent_t early_landed_ = nullptr;      // behind its last chunk
  cudaEvent_t early_read_ = nullptr;        // the held table's last read done
  std::atomic<int64_t> early_read_param_{-1};  // that table (its uploads wait for the read)
  std::vector<cudaEvent_t> chunk_events_;   // one per chunk of an early part
  std::unordered_map<size_t, std::vector<void*>> free_;  // pool: capacity -> buffers
  std::unordered_map<void*, size_t> live_;               // pool: buffer -> capacity
  std::vector<void*> blocks_;
  Arena arena_;  // the memory plan's, when the program places its temporaries
  PoolStats stats_;
  int64_t device_bytes_ = 0;  // everything cudaMalloc'ed here
  int64_t trims_ = 0;        // cached temporaries freed to fit --gpu-mem
  void *idx_ = nullptr, *tgt_ = nullptr, *loss_ = nullptr;
  float* host_grad_ = nullptr;  // page-locked, for the synchronous optimizer
  char* gather_stage_ = nullptr;  // page-locked, gather_up's rows on their way up
  size_t gather_stage_bytes_ = 0;
  cudaEvent_t gather_sent_ = nullptr;  // its last copy up done: it may be refilled
  struct Moments {
    float *m = nullptr, *v = nullptr;
    bool host_stale = false;  // updated here since the host last had the values
  };
  std::vector<Moments> moments_;  // device_adamw's, by parameter index
  size_t host_grad_elems_ = 0;
  int64_t copy_out_bytes_ = 0;
  std::atomic<int64_t> upload_bytes_{0};  // the optimizer's thread adds to it
  int64_t steps_ = 0;
  struct KernelTiming {
    const char* name;
    int64_t bytes;      // its operands'
    size_t start, end;  // indices into trace_events_
    const char* track;
  };
  std::vector<cudaEvent_t> trace_events_;  // reused step after step
  size_t trace_used_ = 0;
  std::vector<KernelTiming> trace_kernels_;
  double trace_base_us_ = 0;
  bool prepared_ = false;
};

}  // namespace fy::cuda
