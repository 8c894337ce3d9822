#include "device/cuda/device.h"

#include <cstdio>
#include <algorithm>
#include <cstring>

#include "abi/sizes.h"
#include "kernels/cuda/check.h"

namespace fy::cuda {

void* pinned_alloc(size_t bytes) {
  void* p = nullptr;
  FY_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocPortable));
  return p;
}
void pinned_free(void* p) { cudaFreeHost(p); }

namespace {

size_t granule(size_t bytes) { return (bytes + 63) / 64 * 64; }

std::string mib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / 1048576.0);
  return buf;
}

}  // namespace

CudaDevice::CudaDevice(DeviceHost& host) : host_(host) {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0)
    fail(std::string("no CUDA GPU is available (cudaGetDeviceCount: ") +
         (err != cudaSuccess ? cudaGetErrorString(err) : "0 devices") + ")");
  FY_CUDA_CHECK(cudaSetDevice(0));
  cudaDeviceProp prop;
  FY_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  name_ = prop.name;
  // Kernels take scratch with cudaMallocAsync; keep freed scratch in the
  // pool instead of returning it to the driver at every synchronize.
  cudaMemPool_t pool;
  FY_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, 0));
  uint64_t keep = UINT64_MAX;
  FY_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep));
  FY_CUDA_CHECK(cudaStreamCreateWithFlags(&compute_, cudaStreamNonBlocking));
  FY_CUDA_CHECK(cudaStreamCreateWithFlags(&upload_, cudaStreamNonBlocking));
  FY_CUDA_CHECK(cudaStreamCreateWithFlags(&download_, cudaStreamNonBlocking));
  FY_CUDA_CHECK(cudaStreamCreateWithFlags(&to_device_, cudaStreamNonBlocking));
  FY_CUDA_CHECK(cudaStreamCreateWithFlags(&to_host_, cudaStreamNonBlocking));
  set_stream(compute_);
}

CudaDevice::~CudaDevice() {
  // Whoever wired the optimizer's thread to this object stopped it first.
  cudaStreamSynchronize(compute_);
  cudaStreamSynchronize(upload_);
  cudaStreamSynchronize(download_);
  cudaStreamSynchronize(to_device_);
  cudaStreamSynchronize(to_host_);
  for (const Started& c : copies_) cudaEventDestroy(c.done);
  if (copy_issued_) cudaEventDestroy(copy_issued_);
  for (cudaEvent_t e : group_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : rows_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : param_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : landed_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : rows_landed_events_) cudaEventDestroy(e);
  if (grads_ready_) cudaEventDestroy(grads_ready_);
  if (early_landed_) cudaEventDestroy(early_landed_);
  if (early_read_) cudaEventDestroy(early_read_);
  for (cudaEvent_t e : chunk_events_) cudaEventDestroy(e);
  for (cudaEvent_t e : trace_events_) cudaEventDestroy(e);
  for (void* p : params_) cudaFree(p);
  for (const Moments& mv : moments_) cudaFree(mv.m), cudaFree(mv.v);
  for (void* p : blocks_) cudaFree(p);
  for (void* p : {idx_, tgt_, loss_}) cudaFree(p);
  if (host_grad_) cudaFreeHost(host_grad_);
  if (gather_stage_) cudaFreeHost(gather_stage_);
  if (gather_sent_) cudaEventDestroy(gather_sent_);
  set_stream(nullptr);
  cudaStreamDestroy(compute_);
  cudaStreamDestroy(upload_);
  cudaStreamDestroy(download_);
  cudaStreamDestroy(to_device_);
  cudaStreamDestroy(to_host_);
}

void CudaDevice::reserve(size_t bytes, const char* what) {
  const int64_t budget = host_.gpu_mem();
  if (budget > 0 && device_bytes_ + int64_t(bytes) > budget)
    fail(std::string("--gpu-mem ") + mib(double(budget)) + " exceeded: " + what + " needs " + mib(double(bytes)) +
         " more with " + mib(double(device_bytes_)) + " already on the device");
  device_bytes_ += int64_t(bytes);
}

int64_t CudaDevice::fixed_bytes() const {
  return int64_t(matmul_scratch_bytes(matmul_precision())) + int64_t(step_io_bytes());
}

size_t CudaDevice::step_io_bytes() const { return cuda::step_io_bytes(size_t(host_.input_shape().numel())); }

void CudaDevice::prepare() {
  const double t0 = tracing() ? host_.trace_now_us() : 0;
  if (!prepared_) {
    // Taken by the first matrix product on the compute stream.
    reserve(matmul_scratch_bytes(matmul_precision()),
            "the matrix products' scratch (cuBLASLt workspace, bf16 operand copies)");
    reserve(step_io_bytes(), "the step's token ids, targets and loss");
    const Shape in = host_.input_shape();
    FY_CUDA_CHECK(cudaMalloc(&idx_, size_t(in.numel()) * 8));
    FY_CUDA_CHECK(cudaMalloc(&tgt_, size_t(in.numel()) * 8));
    FY_CUDA_CHECK(cudaMalloc(&loss_, sizeof(float)));
    params_.assign(size_t(host_.num_params()), nullptr);
    // Streamed parameters have no resident copies: the program fills arena
    // buffers from the masters (param_host, copy_to_device) as it goes.
    for (int64_t i = 0; i < host_.num_params() && !host_.streamed_params(); ++i) {
      const View v = host_.param(i).value;
      reserve(granule(v.nbytes()), ("parameter '" + host_.param_name(i) + "'").c_str());
      FY_CUDA_CHECK(cudaMalloc(&params_[size_t(i)], v.nbytes() ? v.nbytes() : 1));
    }
    // The memory plan's arena: every temporary the program places, in one block.
    if (int64_t bytes = host_.planned_arena_bytes(); bytes > 0) {
      reserve(size_t(bytes), "the temporaries' arena");
      void* base = nullptr;
      FY_CUDA_CHECK(cudaMalloc(&base, size_t(bytes)));
      blocks_.push_back(base);
      stats_.mallocs++;
      stats_.reserved_bytes += bytes;
      arena_.reset(base, bytes);
    }
    // gather_up's rows, gathered on the host on their way up.
    if (int64_t bytes = host_.gather_up_bytes(); bytes > 0) {
      gather_stage_ = static_cast<char*>(pinned_alloc(size_t(bytes)));
      gather_stage_bytes_ = size_t(bytes);
      FY_CUDA_CHECK(cudaEventCreateWithFlags(&gather_sent_, cudaEventDisableTiming));
    }
    prepared_ = true;
  }
  // The masters are final (loaded or restored): every working copy up.
  settle_masters();  // (any this device updated itself first come back)
  for (int64_t i = 0; i < host_.num_params() && !host_.streamed_params(); ++i) {
    const View v = host_.param(i).value;
    FY_CUDA_CHECK(cudaMemcpyAsync(params_[size_t(i)], v.data, v.nbytes(), cudaMemcpyHostToDevice, compute_));
  }
  synchronize();
  if (tracing()) host_.trace_slice("device", "parameters up", t0, host_.trace_now_us(), -1);
}

void CudaDevice::prepare_groups(int64_t groups) {
  if (prepared_ || !group_events_.empty()) fail("prepare_groups: called after prepare() or twice (a runtime bug)");
  auto events = [](std::vector<cudaEvent_t>& list, size_t n) {
    list.resize(n);
    for (cudaEvent_t& e : list) FY_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  };
  events(group_events_, size_t(groups));
  events(rows_events_, size_t(groups));
  events(param_events_, size_t(host_.num_params()));
  events(landed_events_, size_t(groups));
  events(rows_landed_events_, 2 * size_t(groups));
  rows_copies_.assign(size_t(groups), 0);
  FY_CUDA_CHECK(cudaEventCreateWithFlags(&grads_ready_, cudaEventDisableTiming));
  FY_CUDA_CHECK(cudaEventCreateWithFlags(&early_landed_, cudaEventDisableTiming));
  FY_CUDA_CHECK(cudaEventCreateWithFlags(&early_read_, cudaEventDisableTiming));
}

namespace {
// ready() says "landed" on an error too: the wait that follows reports it.
Landing landing(cudaEvent_t e) {
  return Landing{[e] { FY_CUDA_CHECK(cudaEventSynchronize(e)); },
                 [e] { return cudaEventQuery(e) != cudaErrorNotReady; }};
}
}  // namespace

// On their own stream, behind the kernels that made them (gradients_ready):
// the copies overlap the next group's backward, and only the optimizer waits
// for them.
void CudaDevice::gradient_out(const View& src, float* dst) {
  FY_CUDA_CHECK(cudaMemcpyAsync(dst, src.data, src.nbytes(), cudaMemcpyDeviceToHost, download_));
  copy_out_bytes_ += int64_t(src.nbytes());
}

Landing CudaDevice::gradients_out_landing(int64_t group) {
  cudaEvent_t e = landed_events_[size_t(group)];
  FY_CUDA_CHECK(cudaEventRecord(e, download_));
  return landing(e);
}

// The rows of the embedding's gradient that the next step gathers go down
// first, gathered straight into the optimizer's page-locked buffer: its
// update of those rows need not wait for the whole table's copy (154 MB on
// GPT-2 124M, ~3 ms), the GPU's idle time at the next step's start.
Landing CudaDevice::gradient_rows_out(int64_t group, const View& src, const int64_t* rows, int64_t count,
                                      float* dst) {
  const int64_t d = src.shape[1];
  gather_rows(src, View{const_cast<int64_t*>(rows), Shape{count}, DType::I64}, View{dst, Shape{count, d}, DType::F32},
              download_);
  copy_out_bytes_ += count * d * int64_t(sizeof(float));
  // Two events a group, taken in turn: a table's early rows and its step's
  // own rows are two copies of one update, each waited for alone (an event
  // is recorded again only once the update it served is done).
  cudaEvent_t e = rows_landed_events_[2 * size_t(group) + size_t(rows_copies_[size_t(group)]++ % 2)];
  FY_CUDA_CHECK(cudaEventRecord(e, download_));
  return landing(e);
}

// A tied table's early part goes down chunk by chunk behind the blocks'
// gradients, each chunk with an event of its own: the piece that needs it
// waits for it alone. A chunk's event is recorded again a step later, when
// that step's early part has long been done.
Landing CudaDevice::gradient_chunk_out(size_t k, const View& src, int64_t lo, int64_t n, float* dst) {
  FY_CUDA_CHECK(cudaMemcpyAsync(dst, static_cast<const float*>(src.data) + lo, size_t(n) * sizeof(float),
                                cudaMemcpyDeviceToHost, download_));
  copy_out_bytes_ += n * int64_t(sizeof(float));
  while (chunk_events_.size() <= k) {
    chunk_events_.emplace_back();
    FY_CUDA_CHECK(cudaEventCreateWithFlags(&chunk_events_.back(), cudaEventDisableTiming));
  }
  FY_CUDA_CHECK(cudaEventRecord(chunk_events_[k], download_));
  return landing(chunk_events_[k]);
}

// Each piece of an update goes up as soon as it is done.
void CudaDevice::piece_up(int64_t param, int64_t lo, int64_t n) {
  const View master = host_.param(param).value;
  // A held table's update runs only once early_read recorded this.
  if (param == early_read_param_.load()) FY_CUDA_CHECK(cudaStreamWaitEvent(upload_, early_read_, 0));
  FY_CUDA_CHECK(cudaMemcpyAsync(static_cast<float*>(params_[size_t(param)]) + lo, master.as<float>() + lo,
                                size_t(n) * sizeof(float), cudaMemcpyHostToDevice, upload_));
  upload_bytes_ += n * int64_t(sizeof(float));
  // Its last piece: what wait_param_upload makes the kernels wait on.
  if (lo + n == master.numel()) FY_CUDA_CHECK(cudaEventRecord(param_events_[size_t(param)], upload_));
}

// The rows the next step gathers, as soon as they are done: the kernel reads
// them straight from the optimizer's page-locked buffer, which it reuses next
// step, so the call returns once they are in.
void CudaDevice::rows_up(int64_t group, int64_t param, const int64_t* rows, int64_t count, const float* values) {
  const View master = host_.param(param).value;
  const int64_t d = master.shape[1];
  if (param == early_read_param_.load()) FY_CUDA_CHECK(cudaStreamWaitEvent(upload_, early_read_, 0));
  scatter_rows(View{const_cast<float*>(values), Shape{count, d}, DType::F32},
               View{const_cast<int64_t*>(rows), Shape{count}, DType::I64},
               View{params_[size_t(param)], master.shape, DType::F32}, upload_);
  cudaEvent_t e = rows_events_[size_t(group)];
  FY_CUDA_CHECK(cudaEventRecord(e, upload_));
  upload_bytes_ += count * d * int64_t(sizeof(float));
  FY_CUDA_CHECK(cudaEventSynchronize(e));
}

void CudaDevice::run_step(const Step& step, View idx, View tgt, View loss, bool training) {
  if (tracing()) {
    // The stream is idle here (the last step synchronised), so this base
    // event's time on the GPU is close to this moment on the host.
    trace_kernels_.clear();
    trace_used_ = 0;
    kernel_start(nullptr);
    trace_base_us_ = host_.trace_now_us();
  }
  FY_CUDA_CHECK(cudaMemcpyAsync(idx_, idx.data, idx.nbytes(), cudaMemcpyHostToDevice, compute_));
  step_ids_ = idx.as<int64_t>();
  FY_CUDA_CHECK(cudaMemcpyAsync(tgt_, tgt.data, tgt.nbytes(), cudaMemcpyHostToDevice, compute_));
  // A program that forgot to write its loss logs NaN, as on the CPU.
  FY_CUDA_CHECK(cudaMemcpyAsync(loss_, loss.data, sizeof(float), cudaMemcpyHostToDevice, compute_));
  unlanded_.clear();
  step(View{idx_, idx.shape, idx.dtype}, View{tgt_, tgt.shape, tgt.dtype}, View{loss_, loss.shape, loss.dtype});
  // The step's gradients are the step's to free (a compiled step lands
  // each before it returns): the next step's kernels come after every copy.
  for (int64_t g : unlanded_) FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, landed_events_[size_t(g)], 0));
  unlanded_.clear();
  FY_CUDA_CHECK(cudaMemcpyAsync(loss.data, loss_, sizeof(float), cudaMemcpyDeviceToHost, compute_));
  synchronize();
  end_copies();
  if (tracing()) flush_kernel_trace();
  steps_ += training;
}

size_t CudaDevice::trace_event(cudaStream_t s) {
  if (trace_used_ + 2 > trace_events_.size()) {
    cudaEvent_t e;
    for (int k = 0; k < 2; ++k) {
      FY_CUDA_CHECK(cudaEventCreate(&e));
      trace_events_.push_back(e);
    }
  }
  FY_CUDA_CHECK(cudaEventRecord(trace_events_[trace_used_], s));
  return trace_used_++;
}

void CudaDevice::kernel_start(const char* name, int64_t bytes) {
  size_t at = trace_event(compute_);
  // A kernel's end takes the next event (kernel_end); the base has none.
  if (name) trace_kernels_.push_back({name, bytes, at, at + 1, "gpu"});
}

void CudaDevice::kernel_end() noexcept {
  // Called from a destructor: a failure shows up at the next checked call.
  cudaEventRecord(trace_events_[trace_used_], compute_);
  ++trace_used_;
}

void CudaDevice::flush_kernel_trace() {
  for (const KernelTiming& k : trace_kernels_) {
    float t0 = 0, t1 = 0;
    FY_CUDA_CHECK(cudaEventElapsedTime(&t0, trace_events_[0], trace_events_[k.start]));
    FY_CUDA_CHECK(cudaEventElapsedTime(&t1, trace_events_[0], trace_events_[k.end]));
    host_.trace_slice(k.track, k.name, trace_base_us_ + 1000.0 * t0, trace_base_us_ + 1000.0 * t1, k.bytes);
  }
  trace_kernels_.clear();
  trace_used_ = 0;
}

View CudaDevice::param(int64_t index) {
  if (!prepared_) fail("param: the device is not prepared (a runtime bug)");
  if (host_.streamed_params())
    fail("param: this program streams its parameters, so the device keeps no copy of '" + host_.param_name(index) +
         "'");
  const View host = host_.param(index).value;
  return View{params_[size_t(index)], host.shape, host.dtype};
}

View CudaDevice::alloc(Shape shape, DType dtype) {
  if (shape.numel() < 0) fail("alloc: negative dim in " + shape.str());
  View v{nullptr, shape, dtype};
  const size_t cap = granule(v.nbytes());
  std::vector<void*>& list = free_[cap];
  if (!list.empty()) {
    v.data = list.back();
    list.pop_back();
  } else {
    // Buffers are reused by exact size, so the cache can hold more than the
    // plan's peak; under --gpu-mem, give the cached ones back before failing.
    const int64_t budget = host_.gpu_mem();
    if (budget > 0 && device_bytes_ + int64_t(cap) > budget) trim();
    reserve(cap, ("a temporary " + shape.str()).c_str());
    // Without a budget the device itself is the limit: on its out-of-memory
    // error, give the cache back and ask once more (the error is not sticky).
    const cudaError_t e = cudaMalloc(&v.data, cap ? cap : 64);
    if (e == cudaErrorMemoryAllocation && budget <= 0) {
      (void)cudaGetLastError();
      trim();
      FY_CUDA_CHECK(cudaMalloc(&v.data, cap ? cap : 64));
    } else {
      FY_CUDA_CHECK(e);
    }
    blocks_.push_back(v.data);
    stats_.mallocs++;
    stats_.reserved_bytes += int64_t(cap);
  }
  live_[v.data] = cap;
  stats_.add(int64_t(cap));
  return v;
}

void CudaDevice::trim() {
  // cudaFree waits for the device, so no queued kernel still uses them.
  for (auto& [cap, list] : free_) {
    for (void* p : list) {
      FY_CUDA_CHECK(cudaFree(p));
      blocks_.erase(std::find(blocks_.begin(), blocks_.end(), p));
      device_bytes_ -= int64_t(cap);
      stats_.reserved_bytes -= int64_t(cap);
      trims_++;
    }
    list.clear();
  }
}

View CudaDevice::alloc_at(int64_t offset, Shape shape, DType dtype) {
  int64_t bytes = 0;
  View v = arena_.place(offset, shape, dtype, 64, &bytes);
  stats_.add(bytes);
  return v;
}

void CudaDevice::dealloc(View v) {
  // Kernels that still read a buffer are queued before any later use of its
  // memory: the stream orders them.
  if (arena_.contains(v.data)) {
    stats_.remove(arena_.release(v));
    return;
  }
  auto it = live_.find(v.data);
  if (it == live_.end()) {
    // Device memory that is not live here (freed twice, or never ours) would
    // crash the host-side check below, which reads a header before the buffer
    // (the arenas' buffers, most of a step's, need no driver query).
    cudaPointerAttributes a{};
    const bool device = !host_.in_host_arenas(v.data) && cudaPointerGetAttributes(&a, v.data) == cudaSuccess &&
                        a.type == cudaMemoryTypeDevice;
    (void)cudaGetLastError();
    if (device) fail("dealloc: device buffer " + v.shape.str() + " was deallocated twice or did not come from alloc");
    // Not the device's: the Runtime's host buffers, which it checks itself.
    // Copies that use them are queued before this (a started copy's wait
    // comes before its buffers' deallocs), so reuse is ordered too.
    host_.dealloc_host(v);
    return;
  }
  if (v.nbytes() > it->second)
    fail("dealloc: view " + v.shape.str() + " is larger than its buffer (" + std::to_string(it->second) + " bytes)");
  free_[it->second].push_back(v.data);
  stats_.remove(int64_t(it->second));
  live_.erase(it);
}

void CudaDevice::transfer(View src, View dst, cudaMemcpyKind kind) {
  if (src.nbytes() != dst.nbytes())
    fail("copy: " + src.shape.str() + " and " + dst.shape.str() + " differ in size");
  if (src.nbytes()) FY_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind, compute_));
  queued_transfers_ = true;
}

int64_t CudaDevice::copy_start(View src, View dst, cudaMemcpyKind kind) {
  if (src.nbytes() != dst.nbytes())
    fail("copy: " + src.shape.str() + " and " + dst.shape.str() + " differ in size");
  if (!copy_issued_) FY_CUDA_CHECK(cudaEventCreateWithFlags(&copy_issued_, cudaEventDisableTiming));
  if (copies_used_ == copies_.size()) {
    Started c{};
    FY_CUDA_CHECK(cudaEventCreateWithFlags(&c.done, cudaEventDisableTiming));
    copies_.push_back(c);
  }
  const bool up = kind == cudaMemcpyHostToDevice;
  cudaStream_t s = up ? to_device_ : to_host_;
  Started& c = copies_[copies_used_];
  // After the kernels queued so far: they wrote the source, or last used
  // the memory the target now takes. (The wait takes the event as recorded
  // now, so one event serves every copy.)
  FY_CUDA_CHECK(cudaEventRecord(copy_issued_, compute_));
  FY_CUDA_CHECK(cudaStreamWaitEvent(s, copy_issued_, 0));
  size_t mark = tracing() ? trace_event(s) : 0;
  if (src.nbytes()) FY_CUDA_CHECK(cudaMemcpyAsync(dst.data, src.data, src.nbytes(), kind, s));
  if (tracing())
    trace_kernels_.push_back({up ? "copy to device" : "copy to host", int64_t(src.nbytes()), mark, trace_event(s),
                              "gpu copies"});
  FY_CUDA_CHECK(cudaEventRecord(c.done, s));
  c.host = static_cast<const char*>(up ? src.data : dst.data);
  c.bytes = src.nbytes();
  return int64_t(copies_used_++);
}

void CudaDevice::copy_wait(int64_t ticket) {
  if (ticket < 0 || size_t(ticket) >= copies_used_)
    fail("copy_wait: no copy started with ticket " + std::to_string(ticket) + " in this step");
  FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, copies_[size_t(ticket)].done, 0));
}

void CudaDevice::end_copies() {
  // The step's synchronize waited for the kernels, and they for every copy.
  copies_used_ = 0;
  queued_transfers_ = false;
}

void CudaDevice::finish_host_transfers() {
  FY_CUDA_CHECK(cudaStreamSynchronize(compute_));
  FY_CUDA_CHECK(cudaStreamSynchronize(to_host_));
  FY_CUDA_CHECK(cudaStreamSynchronize(to_device_));
}

void CudaDevice::settle_host(const void* data, size_t bytes) {
  if (queued_transfers_) {
    FY_CUDA_CHECK(cudaStreamSynchronize(compute_));
    queued_transfers_ = false;
  }
  settle_started(data, bytes);
}

void CudaDevice::settle_master(int64_t param) {
  if (!host_.streamed_params()) return;
  const View master = host_.param(param).value;
  settle_started(master.data, size_t(master.nbytes()));
}

void CudaDevice::settle_started(const void* data, size_t bytes) {
  const char* lo = static_cast<const char*>(data);
  for (size_t i = 0; i < copies_used_; ++i) {
    Started& c = copies_[i];
    if (c.host && c.host < lo + bytes && lo < c.host + c.bytes) {
      FY_CUDA_CHECK(cudaEventSynchronize(c.done));
      c.host = nullptr;
    }
  }
}

View CudaDevice::upload_temp(int64_t offset, Shape shape, DType dtype, const void* host) {
  View v = offset < 0 ? alloc(shape, dtype) : alloc_at(offset, shape, dtype);
  // On the compute stream, ordered with the kernels around it; from pageable
  // memory the call returns once the values are staged, so the caller's copy
  // may go away.
  if (v.nbytes()) FY_CUDA_CHECK(cudaMemcpyAsync(v.data, host, v.nbytes(), cudaMemcpyHostToDevice, compute_));
  return v;
}

void CudaDevice::gather_up(View table, View ids, View out) {
  if (table.dtype != DType::F32 || table.shape.rank != 2 || ids.dtype != DType::I64 || out.dtype != DType::F32 ||
      out.numel() != ids.numel() * table.shape[1])
    fail(std::string("gather_up: wants an F32 table [V, d], I64 ids and an F32 output of ids x d, got table ") +
         dtype_name(table.dtype) + " " + table.shape.str() + ", ids " + dtype_name(ids.dtype) + " " + ids.shape.str() +
         ", output " + dtype_name(out.dtype) + " " + out.shape.str());
  const int64_t n = ids.numel(), d = table.shape[1], vocab = table.shape[0];
  if (out.nbytes() == 0) return;
  // The step's tokens are in host memory already; other ids come down first.
  std::vector<int64_t> own;
  const int64_t* host_ids = ids.data == idx_ && step_ids_ ? step_ids_ : nullptr;
  if (!host_ids) {
    own.resize(size_t(n));
    FY_CUDA_CHECK(cudaMemcpyAsync(own.data(), ids.data, ids.nbytes(), cudaMemcpyDeviceToHost, compute_));
    FY_CUDA_CHECK(cudaStreamSynchronize(compute_));
    host_ids = own.data();
  }
  if (out.nbytes() > gather_stage_bytes_)
    fail("gather_up: " + std::to_string(out.nbytes()) + " bytes of rows, more than the " +
         std::to_string(gather_stage_bytes_) + " the program declared (declare_gather_up; recompile it)");
  // The buffer's last rows must have gone up before it is refilled.
  FY_CUDA_CHECK(cudaEventSynchronize(gather_sent_));
  const size_t row = size_t(d) * sizeof(float);
  const int64_t chunk = std::max<int64_t>(1, int64_t((size_t(1) << 20) / std::max<size_t>(row, 1)));
  const char* src = static_cast<const char*>(table.data);
  for (int64_t lo = 0; lo < n; lo += chunk) {
    const int64_t hi = std::min(n, lo + chunk);
    for (int64_t i = lo; i < hi; ++i) {
      const int64_t id = host_ids[i];
      if (id < 0 || id >= vocab)
        fail("gather_up: id " + std::to_string(id) + " at " + std::to_string(i) + " is outside the table's " +
             std::to_string(vocab) + " rows");
      std::memcpy(gather_stage_ + size_t(i) * row, src + size_t(id) * row, row);
    }
    FY_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(out.data) + size_t(lo) * row, gather_stage_ + size_t(lo) * row,
                                  size_t(hi - lo) * row, cudaMemcpyHostToDevice, compute_));
  }
  FY_CUDA_CHECK(cudaEventRecord(gather_sent_, compute_));
  upload_bytes_ += int64_t(out.nbytes());
}

View CudaDevice::gradient_to_host(View grad) {
  if (size_t(grad.numel()) > host_grad_elems_) {
    if (host_grad_) FY_CUDA_CHECK(cudaFreeHost(host_grad_));
    host_grad_ = nullptr;
    host_grad_elems_ = 0;
    host_grad_ = static_cast<float*>(pinned_alloc(grad.nbytes()));
    host_grad_elems_ = size_t(grad.numel());
  }
  FY_CUDA_CHECK(cudaMemcpyAsync(host_grad_, grad.data, grad.nbytes(), cudaMemcpyDeviceToHost, compute_));
  synchronize();
  copy_out_bytes_ += int64_t(grad.nbytes());
  return View{host_grad_, grad.shape, grad.dtype};
}

void CudaDevice::param_up(int64_t index) {
  const View master = host_.param(index).value;
  FY_CUDA_CHECK(cudaMemcpyAsync(params_[size_t(index)], master.data, master.nbytes(), cudaMemcpyHostToDevice,
                                compute_));
  upload_bytes_ += int64_t(master.nbytes());
}

void CudaDevice::download(View grad, void* dst) {
  FY_CUDA_CHECK(cudaMemcpyAsync(dst, grad.data, grad.nbytes(), cudaMemcpyDeviceToHost, compute_));
  synchronize();
}

void CudaDevice::device_adamw(int64_t index, View grad, const AdamWScalars& s) {
  const DeviceHost::Param p = host_.param(index);
  if (moments_.empty()) moments_.resize(size_t(host_.num_params()));
  Moments& mv = moments_[size_t(index)];
  const size_t bytes = size_t(p.value.nbytes());
  if (!mv.m) {
    const int64_t budget = host_.gpu_mem();
    if (budget > 0 && device_bytes_ + 2 * int64_t(granule(bytes)) > budget) trim();
    reserve(2 * granule(bytes), ("AdamW's moments of '" + host_.param_name(index) + "' on the device").c_str());
    FY_CUDA_CHECK(cudaMalloc(&mv.m, bytes ? bytes : 1));
    FY_CUDA_CHECK(cudaMalloc(&mv.v, bytes ? bytes : 1));
    FY_CUDA_CHECK(cudaMemcpyAsync(mv.m, p.m.data, bytes, cudaMemcpyHostToDevice, compute_));
    FY_CUDA_CHECK(cudaMemcpyAsync(mv.v, p.v.data, bytes, cudaMemcpyHostToDevice, compute_));
  }
  cuda::adamw(s, View{params_[size_t(index)], p.value.shape, DType::F32}, grad, View{mv.m, p.value.shape, DType::F32},
              View{mv.v, p.value.shape, DType::F32});
  mv.host_stale = true;
}

void CudaDevice::settle_masters() {
  bool any = false;
  for (size_t i = 0; i < moments_.size(); ++i) {
    Moments& mv = moments_[i];
    if (!mv.host_stale) continue;
    const DeviceHost::Param p = host_.param(int64_t(i));
    const size_t bytes = size_t(p.value.nbytes());
    FY_CUDA_CHECK(cudaMemcpyAsync(p.value.data, params_[i], bytes, cudaMemcpyDeviceToHost, compute_));
    FY_CUDA_CHECK(cudaMemcpyAsync(p.m.data, mv.m, bytes, cudaMemcpyDeviceToHost, compute_));
    FY_CUDA_CHECK(cudaMemcpyAsync(p.v.data, mv.v, bytes, cudaMemcpyDeviceToHost, compute_));
    mv.host_stale = false;
    any = true;
  }
  if (any) synchronize();
}

void CudaDevice::gradients_ready() {
  FY_CUDA_CHECK(cudaEventRecord(grads_ready_, compute_));
  FY_CUDA_CHECK(cudaStreamWaitEvent(download_, grads_ready_, 0));
}

void CudaDevice::gradients_offloaded(int64_t group) {
  unlanded_.push_back(group);
  // An early table's gradient is kept up to its own group's offload, which
  // has sent its last chunks: behind them.
  if (early_held(group)) {
    FY_CUDA_CHECK(cudaEventRecord(early_landed_, download_));
    FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, early_landed_, 0));
    early_in_flight_ = false;
  }
}

void CudaDevice::grad_landed(int64_t group) {
  auto it = std::find(unlanded_.begin(), unlanded_.end(), group);
  if (it == unlanded_.end()) fail("grad_landed: group " + std::to_string(group) + " has no gradient copy in flight");
  FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, landed_events_[size_t(group)], 0));
  unlanded_.erase(it);
}

const int64_t* CudaDevice::step_ids(View ids) const { return ids.data == idx_ ? step_ids_ : nullptr; }

void CudaDevice::early_offloaded(int64_t group) {
  early_in_flight_ = true;
  early_group_ = group;
}

void CudaDevice::early_read(int64_t param) {
  FY_CUDA_CHECK(cudaEventRecord(early_read_, compute_));
  early_read_param_.store(param);
}

void CudaDevice::group_uploaded(int64_t group) {
  // The group's pieces are queued on the upload stream already.
  FY_CUDA_CHECK(cudaEventRecord(group_events_[size_t(group)], upload_));
}

// Kernels after these wait for the uploads on the device, not here.
void CudaDevice::wait_group_upload(int64_t group) {
  FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, group_events_[size_t(group)], 0));
}

void CudaDevice::wait_param_upload(int64_t param) {
  FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, param_events_[size_t(param)], 0));
}

void CudaDevice::wait_rows_upload(int64_t group, bool rows) {
  FY_CUDA_CHECK(cudaStreamWaitEvent(compute_, (rows ? rows_events_ : group_events_)[size_t(group)], 0));
}

std::string CudaDevice::summary() const {
  char buf[256];
  double n = steps_ > 0 ? double(steps_) : 1.0;
  std::snprintf(buf, sizeof buf,
                "device %s: %s on the device (parameters and temporaries), gradients out %.1f MiB/step, "
                "parameters up %.1f MiB/step, %lld cached temporaries freed to fit --gpu-mem",
                name_.c_str(), mib(double(device_bytes_)).c_str(), double(copy_out_bytes_) / n / 1048576.0,
                double(upload_bytes_.load()) / n / 1048576.0, (long long)trims_);
  return buf;
}

}  // namespace fy::cuda
