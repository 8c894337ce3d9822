#include "exec/runtime.h"

#include "optim/adamw8bit.h"

#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace fy {

namespace {

// Every pool buffer is preceded by one cache line holding its state and
// capacity, so dealloc needs no lookup table (whose nodes would malloc each
// step) and can tell a pool buffer from a parameter or a stale pointer.
struct alignas(64) BlockHeader {
  uint64_t state;
  uint64_t capacity;
};
static_assert(sizeof(BlockHeader) == 64, "header must keep the payload 64-byte aligned");

constexpr uint64_t kLive = 0x4659'4c49'5645'0001ull;
constexpr uint64_t kFree = 0x4659'4652'4545'0002ull;
constexpr uint64_t kPinned = 0x4659'5049'4e00'0003ull;

BlockHeader* header_of(const void* p) {
  return static_cast<BlockHeader*>(const_cast<void*>(p)) - 1;
}

uint64_t splitmix64(uint64_t z) {
  z += 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

}  // namespace

Runtime::~Runtime() {
  async_.reset();  // the optimizer thread writes into parameter storage
  ssd_.reset();    // reads in flight land in the host arena
  for (void* b : blocks_) host_free_ ? host_free_(b) : std::free(b);
  std::free(arena_.base());
  if (host_arena_raw_) host_free_ ? host_free_(host_arena_raw_) : std::free(host_arena_raw_);
}

void Runtime::set_memory_plan(int64_t peak_temp_bytes, int64_t arena_bytes, int64_t host_arena_bytes) {
  if (peak_temp_bytes < 0 || arena_bytes < 0 || host_arena_bytes < 0 ||
      (arena_bytes > 0 && arena_bytes < peak_temp_bytes))
    fail("declare_memory_plan: a peak of " + std::to_string(peak_temp_bytes) + " bytes cannot fit an arena of " +
         std::to_string(arena_bytes));
  planned_temp_bytes_ = peak_temp_bytes;
  planned_arena_bytes_ = arena_bytes;
  planned_host_arena_bytes_ = host_arena_bytes;
}

void Runtime::set_ssd_arena(int64_t bytes) {
  if (bytes <= 0) fail("declare_ssd_arena: the SSD arena must be positive, got " + std::to_string(bytes));
  if (opts_.ssd_dirs.empty())
    fail("this program keeps activations on SSD (fuyou-compile --activations ssd): give --ssd DIR");
  // Truncated: nothing in it outlives a step.
  ssd_ = std::make_unique<SsdSpill>(store_options("fuyou.activations", true, true), bytes, trace_.get());
}

store::StoreOptions Runtime::store_options(const std::string& file_name, bool truncate, bool critical) const {
  store::StoreOptions so;
  so.dirs = opts_.ssd_dirs;
  so.file_name = file_name;
  so.truncate = truncate;
  so.remove_on_close = truncate;  // a run's scratch: nothing to reopen
  so.reserve = true;               // a full SSD found before the first step
  so.queue_depth = unsigned(opts_.ssd_queue_depth);
  if (opts_.ssd_read_priority) {
    if (critical)
      so.count_reads = activation_reads_;
    else
      so.yield_to = activation_reads_;
  }
  if (Trace* t = trace_.get()) {
    using TP = std::chrono::steady_clock::time_point;
    so.on_busy = [t](TP b, TP e, uint64_t rd, uint64_t wr) {
      t->slice("ssd", "io", t->us_at(b), t->us_at(e), int64_t(rd + wr));
    };
  }
  return so;
}

View Runtime::alloc_host_at(int64_t offset, Shape shape, DType dtype) {
  if (!host_arena_.base() && planned_host_arena_bytes_ > 0) {
    // Page-aligned: buffers that go on to SSD move by O_DIRECT. A pinned
    // allocator may hand out small blocks from a pool on weaker alignment, so
    // one page more is taken and the base rounded up.
    size_t bytes = size_t(planned_host_arena_bytes_ + 4095) / 4096 * 4096;
    host_arena_raw_ = host_alloc_ ? host_alloc_(bytes + 4096) : std::aligned_alloc(4096, bytes);
    if (!host_arena_raw_) fail("alloc_host_at: cannot allocate the " + std::to_string(bytes) + "-byte host arena");
    uintptr_t base = (reinterpret_cast<uintptr_t>(host_arena_raw_) + 4095) / 4096 * 4096;
    host_arena_.reset(reinterpret_cast<void*>(base), planned_host_arena_bytes_);
  }
  int64_t bytes = 0;
  View v = host_arena_.place(offset, shape, dtype, 64, &bytes);
  // A transfer to or from SSD may still use this memory (its buffer freed).
  if (ssd_) ssd_->settle(v.data, static_cast<char*>(v.data) + std::max<int64_t>(bytes, 4096));
  return v;
}

View Runtime::alloc_at(int64_t offset, Shape shape, DType dtype) {
  if (!arena_.base() && planned_arena_bytes_ > 0) {
    // On the CPU target the arena stands for device memory.
    void* base = std::aligned_alloc(64, size_t(planned_arena_bytes_ + 63) / 64 * 64);
    if (!base) fail("alloc_at: cannot allocate the " + std::to_string(planned_arena_bytes_) + "-byte arena");
    arena_.reset(base, planned_arena_bytes_);
  }
  int64_t bytes = 0;
  View v = arena_.place(offset, shape, dtype, 64, &bytes);
  stats_.add(bytes);
  return v;
}

void Runtime::set_host_allocator(HostAlloc alloc, HostFree free) {
  if (!blocks_.empty()) fail("set_host_allocator: host buffers were already allocated");
  host_alloc_ = alloc;
  host_free_ = free;
}

int64_t Runtime::declare_param(const std::string& name, Shape shape, DType dtype, bool trainable) {
  if (name.empty()) fail("declare_param: empty parameter name");
  if (state_settled_) fail("declare_param: parameter '" + name + "' declared after the optimizer state was settled");
  for (const Param& p : params_)
    if (p.name == name) fail("declare_param: parameter '" + name + "' declared twice");
  for (int i = 0; i < shape.rank; ++i)
    if (shape[i] < 0) fail("declare_param: parameter '" + name + "' has negative dim in " + shape.str());
  if (trainable && dtype != DType::F32)
    fail("declare_param: trainable parameter '" + name + "' must be F32, not " + dtype_name(dtype));
  Param p;
  p.name = name;
  p.value = alloc_pinned(shape, dtype);
  p.trainable = trainable;
  params_.push_back(std::move(p));
  return int64_t(params_.size()) - 1;
}

void Runtime::declare_inputs(Shape shape, int64_t vocab) {
  if (shape.rank != 2 || shape[0] <= 0 || shape[1] <= 0)
    fail("declare_inputs: token ids must be [B, T] with B, T > 0, got " + shape.str());
  if (vocab <= 0) fail("declare_inputs: vocabulary size must be positive, got " + std::to_string(vocab));
  input_shape_ = shape;
  vocab_ = vocab;
}

void Runtime::set_program_optimizer(const std::string& name) {
  if (name != "adamw" && name != "adamw8bit")
    fail("the program asks for optimizer '" + name + "', which this runtime does not have (adamw, adamw8bit)");
  if (state_settled_) fail("declare_optimizer: called after the optimizer state was settled (a compiler bug)");
  optimizer_ = name;
}

void Runtime::settle_state() {
  if (state_settled_) return;
  state_settled_ = true;
  if (!opts_.optimizer.empty()) optimizer_ = opts_.optimizer;
  for (Param& p : params_) {
    if (!p.trainable) continue;
    const Shape& s = p.value.shape;
    const bool embedding = vocab_ > 0 && s.rank == 2 && s[0] == vocab_;
    if (optimizer_ == "adamw8bit" && s.numel() >= opts_.adamw8bit_min_size &&
        (!embedding || opts_.adamw8bit_embedding))
      p.q8_block = opts_.adamw8bit_block;
    if (!opts_.ssd_dirs.empty()) continue;  // out of core, the store holds them
    if (p.q8_block) {
      const int64_t bytes = int64_t(q8_state_bytes(s.numel(), p.q8_block));
      p.m = alloc_pinned(Shape{bytes}, DType::U8);
      p.v = alloc_pinned(Shape{bytes}, DType::U8);
    } else {
      p.m = alloc_pinned(s, DType::F32);
      p.v = alloc_pinned(s, DType::F32);
    }
  }
}

int64_t Runtime::state_bytes(int64_t index) const {
  const Param& p = param(index);
  if (!p.trainable) return 0;
  return p.q8_block ? int64_t(q8_state_bytes(p.value.numel(), p.q8_block)) : p.value.numel() * 4;
}

int64_t Runtime::state_bytes_total() const {
  int64_t n = 0;
  for (int64_t i = 0; i < num_params(); ++i) n += 2 * state_bytes(i);
  return n;
}

const Runtime::Param& Runtime::param(int64_t index) const {
  if (index < 0 || index >= num_params())
    fail("param: index " + std::to_string(index) + " out of range (" + std::to_string(num_params()) +
         " parameters declared)");
  return params_[size_t(index)];
}

void* Runtime::pool_get(size_t bytes, uint64_t state) {
  // Exact 64-byte granularity: a program's shapes are static, so each step
  // asks for the same sizes and finds them on the free lists.
  const size_t cap = (bytes + 63) / 64 * 64;
  std::vector<void*>& list = free_[cap];
  BlockHeader* h;
  if (!list.empty()) {
    h = static_cast<BlockHeader*>(list.back());
    list.pop_back();
  } else {
    const size_t total = sizeof(BlockHeader) + (cap ? cap : 64);
    h = static_cast<BlockHeader*>(host_alloc_ ? host_alloc_(total) : std::aligned_alloc(64, total));
    if (!h) fail("out of memory allocating " + std::to_string(bytes) + " bytes");
    h->capacity = cap;
    blocks_.push_back(h);
    stats_.mallocs++;
    stats_.reserved_bytes += int64_t(cap);
  }
  h->state = state;
  return h + 1;
}

View Runtime::alloc(Shape shape, DType dtype) {
  if (shape.numel() < 0) fail("alloc: negative dim in " + shape.str());
  View v{nullptr, shape, dtype};
  v.data = pool_get(v.nbytes(), kLive);
  stats_.add(int64_t(header_of(v.data)->capacity));
  return v;
}

void Runtime::dealloc(View v) {
  if (!v.data) fail("dealloc: null buffer");
  if (arena_.contains(v.data)) {
    stats_.remove(arena_.release(v));
    return;
  }
  if (host_arena_.contains(v.data)) {
    host_arena_.release(v);  // a write to SSD may still read it: see alloc_host_at
    return;
  }
  if (ssd_ && ssd_->contains(v.data)) {
    ssd_->release(v);
    return;
  }
  BlockHeader* h = header_of(v.data);
  if (h->state == kPinned) fail("dealloc: buffer " + v.shape.str() + " is a parameter or argument, not a temporary");
  if (h->state == kFree) fail("dealloc: buffer " + v.shape.str() + " deallocated twice");
  if (h->state != kLive) fail("dealloc: buffer " + v.shape.str() + " did not come from alloc");
  if (v.nbytes() > h->capacity)
    fail("dealloc: view " + v.shape.str() + " is larger than its buffer (" + std::to_string(h->capacity) + " bytes)");
  h->state = kFree;
  free_[h->capacity].push_back(h);
  stats_.remove(int64_t(h->capacity));
}

View Runtime::alloc_pinned(Shape shape, DType dtype) {
  if (shape.numel() < 0) fail("alloc: negative dim in " + shape.str());
  View v{nullptr, shape, dtype};
  v.data = pool_get(v.nbytes(), kPinned);
  std::memset(v.data, 0, v.nbytes());
  return v;
}

void Runtime::adamw(int64_t index, View grad) {
  const Param& cp = param(index);
  if (!cp.trainable) fail("cpu_adamw: parameter '" + cp.name + "' is not trainable");
  if (grad.dtype != DType::F32 || grad.numel() != cp.value.numel())
    fail("cpu_adamw: gradient of '" + cp.name + "' is " + dtype_name(grad.dtype) + " " + grad.shape.str() +
         ", parameter is F32 " + cp.value.shape.str());
  if (step_ < 1) fail("cpu_adamw: step number must start at 1, got " + std::to_string(step_));
  record_grad(index, grad);
  adamw_at(index, grad.as<float>(), step_);
}

void Runtime::record_grad(int64_t index, View grad, float factor) {
  if (!record_grads_ || step_ != 1) return;
  Param& p = params_[size_t(index)];
  if (p.recorded_grad.data) fail("cpu_adamw: parameter '" + p.name + "' updated twice in step 1");
  p.recorded_grad = alloc_pinned(p.value.shape, DType::F32);
  std::memcpy(p.recorded_grad.data, grad.data, grad.nbytes());
  if (factor != 1.f) {
    float* x = p.recorded_grad.as<float>();
    for (int64_t i = 0; i < p.value.numel(); ++i) x[i] *= factor;
  }
}

void Runtime::adamw_at(int64_t index, const float* grad, int64_t step) {
  settle_state();
  Param& p = params_[size_t(index)];
  if (!p.m.data) fail("cpu_adamw: --ssd needs the layer-group optimizer (compile without --sync-optimizer)");
  if (p.q8_block)
    adamw8bit_step(p.value.as<float>(), grad, p.m.data, p.v.data, p.value.numel(), p.q8_block,
                   param_config(adamw_config(step), index), step);
  else
    adamw_step(p.value.as<float>(), grad, p.m.as<float>(), p.v.as<float>(), p.value.numel(),
               param_config(adamw_config(step), index), step);
}

AdamWConfig Runtime::adamw_config(int64_t step) const {
  AdamWConfig cfg = opts_.adamw;
  cfg.lr = opts_.lr_schedule.at(opts_.adamw.lr, step);
  return cfg;
}

int64_t Runtime::param_bytes() const {
  int64_t n = 0;
  for (const Param& p : params_) n += (p.value.nbytes() + 63) / 64 * 64;
  return n;
}

int64_t Runtime::trainable_elements() const {
  int64_t n = 0;
  for (const Param& p : params_)
    if (p.trainable) n += p.value.numel();
  return n;
}

AsyncOptimizer& Runtime::async_optimizer() {
  if (!async_) async_ = std::make_unique<AsyncOptimizer>(*this);
  return *async_;
}


uint64_t Runtime::op_seed(int64_t program_seed) const {
  uint64_t h = splitmix64(opts_.seed);
  h = splitmix64(h ^ uint64_t(step_));
  if (micro_ > 0) h = splitmix64(h ^ (uint64_t(micro_) << 32));  // micro-batch 0 draws as a plain step
  return splitmix64(h ^ uint64_t(program_seed));
}

void settle_openmp(char** argv) {
  if (std::getenv("GOMP_SPINCOUNT") || std::getenv("OMP_WAIT_POLICY") || std::getenv("FY_REEXEC")) return;
  ::setenv("GOMP_SPINCOUNT", "10000", 1);
  ::setenv("FY_REEXEC", "1", 1);
  ::execv("/proc/self/exe", argv);  // returns only on failure: then run as we are
}

}  // namespace fy
