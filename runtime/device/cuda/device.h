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
#include <string>
#include <unordered_map>
#include <vector>

#include "exec/device.h"
#include "exec/runtime.h"

namespace fy::cuda {

class CudaDevice final : public Device {
 public:
  explicit CudaDevice(Runtime& rt);
  ~CudaDevice() override;

  const char* name() const override { return name_.c_str(); }
  void prepare() override;
  void run_step(TrainStepFn step, View idx, View tgt, View loss, bool training) override;
  int64_t fixed_bytes() const override;
  int64_t fixed_host_bytes() const override { return rt_.gather_up_bytes(); }
  const Runtime::PoolStats& pool_stats() const override { return stats_; }
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
  // Synchronous optimizer: the gradient to the host, AdamW there, the
  // parameter back (queued on the compute stream).
  void adamw(int64_t index, View grad);
  // fy-device-optimizer's groups: AdamW here on the compute stream, on the
  // fp32 working copy (the master while the device updates it) with the
  // moments in device memory, taken from the host's at the first update;
  // settle_masters() brings all three back.
  void device_adamw(int64_t index, View grad);
  void settle_masters() override;
  // Layer groups: gradients out through the optimizer's slots; before a
  // group's parameters are read again, its upload must be done.
  int64_t grad_offload(int64_t group, const View* grads, size_t count);
  // fysched.grad_landed: kernels from here on may reuse the memory of the
  // group's gradients, so they wait on the device for its copy.
  void grad_landed(int64_t group);
  void group_wait(int64_t group);
  // One parameter of the group (fy-param-waits): the kernels after it wait
  // for its upload only, the last piece's event.
  void group_wait_param(int64_t group, int64_t param);
  // Before a gather of ids from a table of the group: when ids are the
  // step's tokens, the kernels after it wait only for the rows the
  // optimizer updated first (scattered up on the upload stream).
  void group_wait_rows(int64_t group, int64_t param, View ids);
  // A gather of ids from `table`, a streamed master in host memory, into
  // `out` on the device (fy-rows-first's gather_up): the host gathers the
  // rows into a page-locked buffer, a chunk at a time, each going up on the
  // compute stream while the next is gathered.
  void gather_up(View table, View ids, View out);
  // The table's rows the step's ids do not name go down and are updated
  // early (AsyncOptimizer::offload_early); until the group's grad_offload
  // later kernels may not reuse `grad`'s memory.
  void grad_offload_early(int64_t group, int64_t param, View grad, View ids);
  // The kernels issued so far read the table last (fysched.early_release):
  // its updated rows go up behind them.
  void early_release(int64_t group, int64_t param);

  // --trace: each kernel's time on the GPU, from events around it on the
  // compute stream, written to the "gpu" track when the step is over (the
  // started copies to "gpu copies").
  bool tracing() const { return rt_.trace() != nullptr; }
  void kernel_start(const char* name, int64_t bytes = -1);
  void kernel_end() noexcept;

 private:
  size_t trace_event(cudaStream_t s);  // records the next trace event on `s`
  void end_copies();                    // after the step's synchronize
  // On the optimizer's thread, after the group's pieces were queued on the
  // upload stream: records the event group_wait makes the compute stream wait on.
  void upload_group(int64_t group);
  void flush_kernel_trace();         // after the step's synchronize
  void reserve(size_t bytes, const char* what);
  void trim();  // frees every cached temporary
  size_t step_io_bytes() const;  // the step's token ids, targets and loss
  // Waits for the step's started copies that touch [data, data + bytes).
  void settle_started(const void* data, size_t bytes);
  // With streamed weights: before an update lets go that rewrites master
  // `param`, the started uploads reading it have read it.
  void settle_master(int64_t param);

  Runtime& rt_;
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
  Runtime::PoolStats stats_;
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

// The Runtime's device (fails if the program runs without one).
CudaDevice& device_of(Runtime* rt);

}  // namespace fy::cuda
