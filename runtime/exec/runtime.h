// The state a generated training program runs against: its parameters with
// their AdamW moments, the step counter, the run options and a buffer pool
// for the program's temporaries.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "device/arena.h"
#include "device/device.h"
#include "exec/ssd_spill.h"
#include "exec/async_optimizer.h"
#include "trace/trace.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"

namespace fy {

// Command-line options of a training executable (see train_main).
struct TrainOptions {
  std::string data;
  std::string weights;     // --weights: a checkpoint to start from (else the compile's sources)
  std::string onnx;        // --onnx: the model file instead of the one the compile read
  std::string own_weights; // <executable>.weights.safetensors: what no ONNX file addresses
  std::string log_json;
  std::string save_dir;
  std::string dump_grads;
  int64_t steps = 0;
  std::string val_data;     // held-out tokens for the validation loss ("" none)
  int64_t val_every = 0;    // evaluate every K steps too (0: after the last only)
  int64_t val_batches = 0;  // batches averaged (0: the default)
  int64_t grad_accum = 1;  // micro-batches a step (AsyncOptimizer::set_accumulation)
  int64_t log_every = 1;
  double clip_norm = 0;    // 0: no clipping
  std::string resume_dir;  // continue from this checkpoint
  int64_t save_every = 0;  // also checkpoint every K steps
  int64_t save_shard_bytes = int64_t(5) << 30;  // --save's model.safetensors is sharded past this
  std::vector<std::string> ssd_dirs;  // AdamW state in a TensorStore striped over these
  int64_t ssd_queue_depth = 32;       // I/O operations each store keeps in flight
  bool ssd_read_priority = true;      // activation reads pass the optimizer state's I/O
  int64_t cpu_mem = 0;     // budget for host buffers (0: none)
  int64_t optimizer_threads = 0;  // threads of the CPU optimizer (0: every CPU)
  std::string trace;       // Chrome trace JSON of the run
  int64_t gpu_mem = 0;     // budget for the device arena (on the CPU target, the arena that stands for it)
  // gpu_mem: -1 for "--gpu-mem none" (no bound, not the compiled one);
  // planned: the budget is the one the program was compiled for.
  bool gpu_mem_planned = false;
  uint64_t seed = 0;
  AdamWConfig adamw;       // torch.optim.AdamW defaults; adamw.lr is the schedule's peak
  // Parameters without weight decay: names matching any of these
  // (ECMAScript, full match), and with decay_1d false those of rank < 2.
  std::vector<std::string> no_decay;
  bool decay_1d = true;
  LrSchedule lr_schedule;  // the rate of each step (Runtime::adamw_config)
  LossScaleConfig loss_scale;  // for programs that scale their loss (fp16)
  // "adamw" or "adamw8bit" (block-wise 8-bit moments); "": the program's choice.
  std::string optimizer;
  int64_t adamw8bit_block = 256;       // elements per absmax
  int64_t adamw8bit_min_size = 4096;   // smaller tensors keep fp32 moments
  bool adamw8bit_embedding = false;    // the token embedding (rows == vocab) too
  std::string adamw8bit_flag;          // the first of those flags given (refused without 8-bit AdamW)
  // The CPU target does a started copy at its copy_wait instead of at once:
  // the latest the program allows, so tests see a misplaced wait (from
  // FY_DEFER_COPIES=1 in the environment, not a flag: it only slows a run).
  bool defer_copies = false;
};

class Runtime {
 public:
  struct Param {
    std::string name;
    View value;          // pinned pool storage, loaded from the weights file
    bool trainable = false;
    // AdamW moments (zero at start), in memory unless on SSD; empty when
    // frozen. fp32 (F32, the parameter's shape) or, when q8_block > 0,
    // 8-bit states (U8 [q8_state_bytes]: codes, then per-block absmax).
    View m, v;
    int64_t q8_block = 0;
    bool decay = true;   // AdamW's weight decay applies (train --no-decay, --decay-1d)
    View recorded_grad;  // step-1 gradient copy when recording; else empty
    // The name of the checkpoint tensor it was loaded from (train --weights,
    // a Hugging Face checkpoint's own name): --save's model.safetensors uses
    // it, so that the model's own loader reads what the run wrote.
    std::string checkpoint_name;
  };

  using PoolStats = ::fy::PoolStats;  // device/device.h

  Runtime() = default;
  ~Runtime();
  Runtime(const Runtime&) = delete;
  Runtime& operator=(const Runtime&) = delete;

  // ---- declarations (the program's fy_declare) ----
  // Returns the parameter index: 0, 1, ... in call order. Trainable
  // parameters must be F32 (the optimiser is fp32).
  int64_t declare_param(const std::string& name, Shape shape, DType dtype, bool trainable);
  // Token and target ids are int64 [B, T] with ids < vocab.
  void declare_inputs(Shape shape, int64_t vocab);

  int64_t num_params() const { return int64_t(params_.size()); }
  int64_t trainable_elements() const;
  // The optimizer the program was compiled with (declare_optimizer).
  void set_program_optimizer(const std::string& name);
  // Settles each trainable parameter's moment format (fp32 or 8-bit, from
  // the options, the program's optimizer and the vocabulary) and allocates
  // the moments unless they live on SSD. Idempotent; parameters can no longer
  // be declared after it. The optimizer calls it when first needed.
  void settle_state();
  // Bytes of one moment of parameter `index` (m and v alike), once settled.
  int64_t state_bytes(int64_t index) const;
  // Both moments of every trainable parameter.
  int64_t state_bytes_total() const;
  const std::string& optimizer_name() const { return optimizer_; }
  int64_t param_bytes() const;  // in the allocator's 64-byte granules
  // The program starts backward from the loss scale (declare_loss_scaling):
  // its updates go through dynamic loss scaling.
  void set_loss_scaling() { loss_scaling_ = true; }
  bool loss_scaling() const { return loss_scaling_; }
  // The program updates these parameters inline (fy-device-optimizer's
  // device_adamw), outside the layer-group optimizer: on a device their
  // moments live there (8 bytes a parameter), and on the host as well.
  void set_inline_updates(std::vector<int64_t> params) { inline_params_ = std::move(params); }
  bool inline_updates() const { return !inline_params_.empty(); }
  int64_t inline_state_bytes() const {
    int64_t n = 0;
    for (int64_t i : inline_params_) n += 2 * param(i).value.nbytes();
    return n;
  }
  // The device budget the compiler planned for (declare_gpu_budget; 0: none).
  void set_planned_gpu_mem(int64_t bytes) { planned_gpu_mem_ = bytes; }
  int64_t planned_gpu_mem() const { return planned_gpu_mem_; }
  // Streamed parameters (declare_streamed_params): no resident device copies.
  void set_streamed_params() { streamed_params_ = true; }
  bool streamed_params() const { return streamed_params_; }
  // The most bytes of rows a gather_up brings up (declare_gather_up).
  void set_gather_up_bytes(int64_t bytes) { gather_up_bytes_ = bytes; }
  int64_t gather_up_bytes() const { return gather_up_bytes_; }
  // What the parameters take on the device for the whole run.
  int64_t resident_param_bytes() const { return streamed_params_ ? 0 : param_bytes(); }
  // The static memory plan (declare_memory_plan): the most bytes of
  // temporaries alive at once, and the size of the arena the program places
  // them in (0 when it places none). -1 when the program declared no plan.
  void set_memory_plan(int64_t peak_temp_bytes, int64_t arena_bytes, int64_t host_arena_bytes = 0);
  int64_t planned_temp_bytes() const { return planned_temp_bytes_; }
  int64_t planned_arena_bytes() const { return planned_arena_bytes_; }
  // The host arena: activations the program keeps in host memory for backward.
  int64_t planned_host_arena_bytes() const { return planned_host_arena_bytes_; }
  // What the temporaries take on the device: the arena when the program
  // places them, else the pool's peak.
  int64_t planned_device_temp_bytes() const {
    return planned_arena_bytes_ > 0 ? planned_arena_bytes_ : planned_temp_bytes_;
  }
  const Param& param(int64_t index) const;
  void set_decay(int64_t index, bool decay) { params_[size_t(index)].decay = decay; }
  void set_checkpoint_name(int64_t index, const std::string& name) { params_[size_t(index)].checkpoint_name = name; }
  // Which run the checkpoints are of: drawn at a fresh run's first save,
  // carried on by --resume (exec/checkpoint.cpp).
  const std::string& run_id() const { return run_id_; }
  void set_run_id(const std::string& id) { run_id_ = id; }
  bool inputs_declared() const { return vocab_ > 0; }
  const Shape& input_shape() const { return input_shape_; }
  int64_t vocab() const { return vocab_; }

  // ---- buffers ----
  // Temporaries: 64-byte aligned, uninitialised, reused by size.
  View alloc(Shape shape, DType dtype);
  // A temporary at the place the memory plan gave it in the arena; fails if
  // it would overlap a live one (device/arena.h).
  View alloc_at(int64_t offset, Shape shape, DType dtype);
  // The same in the host arena, from the host allocator (page-locked when a
  // device set it so), on every target.
  View alloc_host_at(int64_t offset, Shape shape, DType dtype);
  int64_t host_arena_live_buffers() const { return host_arena_.live_buffers() + (ssd_ ? ssd_->live_buffers() : 0); }
  // Activations on SSD (declare_ssd_arena): the arena's bytes, opened in the
  // --ssd directories; null when the program keeps none there.
  void set_ssd_arena(int64_t bytes);
  SsdSpill* ssd() const { return ssd_.get(); }
  // Options for a store over --ssd's directories; when tracing, its busy
  // periods become slices of the trace's "ssd" track.
  // `critical`: the activations' store, whose reads compute waits on; the
  // others yield to its unfinished reads (unless --ssd-read-priority no).
  store::StoreOptions store_options(const std::string& file_name, bool truncate, bool critical = false) const;
  // Only for buffers from alloc() or alloc_at(); fails on anything else or
  // on a second call.
  void dealloc(View v);
  // Whether `p` lies in one of the plan's arenas (device, host or SSD-backed):
  // a range check, for a device that must tell its own buffers from ours.
  bool in_arenas(const void* p) const {
    return arena_.contains(p) || host_arena_.contains(p) || (ssd_ && ssd_->contains(p));
  }
  // Storage that lives as long as the Runtime (parameters, moments, the
  // step's arguments); zero-initialised; dealloc() refuses it.
  View alloc_pinned(Shape shape, DType dtype);
  const PoolStats& pool_stats() const { return stats_; }
  // Where host storage comes from (default: aligned_alloc / free). A device
  // sets page-locked memory before anything is declared; the blocks must be
  // at least 64-byte aligned.
  using HostAlloc = void* (*)(size_t bytes);
  using HostFree = void (*)(void* p);
  void set_host_allocator(HostAlloc alloc, HostFree free);

  // The device the program's kernels run on (null on the CPU target); the
  // Runtime does not own it.
  Device* device() const { return device_; }
  void set_device(Device* d) { device_ = d; }

  // ---- optimisation ----
  // One AdamW step of parameter `index` with gradient `grad` at step().
  // While recording, the first step also keeps a copy of the gradient.
  void adamw(int64_t index, View grad);
  // The same update from a host copy of the gradient at a given step. Touches
  // only that parameter and its moments, so the background optimizer may
  // call it while the program runs.
  void adamw_at(int64_t index, const float* grad, int64_t step);
  // AdamW's hyper-parameters for training step `step`: the schedule's rate.
  AdamWConfig adamw_config(int64_t step) const;
  // `cfg` for parameter `index`: without weight decay when it is exempt.
  AdamWConfig param_config(AdamWConfig cfg, int64_t index) const {
    if (!params_[size_t(index)].decay) cfg.weight_decay = 0;
    return cfg;
  }
  // Keeps a copy of a step-1 gradient, times `factor`, when recording (no-op otherwise).
  void record_grad(int64_t index, View grad, float factor = 1.f);
  void set_record_grads(bool on) { record_grads_ = on; }
  // Whether record_grad() keeps this step's gradients (it reads them at once).
  bool recording_grads() const { return record_grads_ && step_ == 1; }

  // The run's timeline (--trace), or null.
  Trace* trace() const { return trace_.get(); }
  void set_trace(std::unique_ptr<Trace> t) { trace_ = std::move(t); }

  // Layer groups whose updates run in the background (group_adamw).
  AsyncOptimizer& async_optimizer();
  bool has_async_optimizer() const { return async_ != nullptr; }


  // Step number, from 1 during the first step.
  int64_t step() const { return step_; }
  void set_step(int64_t s) {
    step_ = s;
    micro_ = 0;
  }
  // Which micro-batch of the step runs (gradient accumulation, from 0): its
  // own dropout masks, and the optimizer's updates before the last only add.
  int64_t micro_step() const { return micro_; }
  void set_micro_step(int64_t m) { micro_ = m; }
  const TrainOptions& options() const { return opts_; }
  void set_options(const TrainOptions& o) { opts_ = o; }

  // Seed for a random op of the program: a hash of the run's --seed, the
  // step number and the op's own seed, so masks differ from step to step and
  // op to op but a rerun reproduces them (and a recompute of the same op in
  // the same step draws the same mask).
  uint64_t op_seed(int64_t program_seed) const;

 private:
  void* pool_get(size_t bytes, uint64_t state);

  std::vector<Param> params_;
  std::string run_id_;
  Shape input_shape_;
  int64_t vocab_ = 0;
  int64_t planned_temp_bytes_ = -1;
  bool streamed_params_ = false;
  bool loss_scaling_ = false;
  std::vector<int64_t> inline_params_;
  int64_t planned_gpu_mem_ = 0;
  int64_t planned_arena_bytes_ = 0, planned_host_arena_bytes_ = 0, gather_up_bytes_ = 0;
  Arena arena_, host_arena_;  // their memory is allocated at their first placement
  void* host_arena_raw_ = nullptr;  // what the host allocator returned; host_arena_ starts at its first page
  std::string optimizer_ = "adamw";
  bool state_settled_ = false;
  TrainOptions opts_;
  int64_t step_ = 0;
  int64_t micro_ = 0;
  bool record_grads_ = false;

  std::unique_ptr<Trace> trace_;
  std::unique_ptr<AsyncOptimizer> async_;
  std::unordered_map<size_t, std::vector<void*>> free_;  // capacity -> headers
  std::vector<void*> blocks_;                            // every malloc, for the destructor
  HostAlloc host_alloc_ = nullptr;  // null: aligned_alloc / free
  std::unique_ptr<SsdSpill> ssd_;
  // Unfinished activation reads, which the optimizer state's store yields to.
  std::shared_ptr<std::atomic<int>> activation_reads_ = std::make_shared<std::atomic<int>>(0);
  HostFree host_free_ = nullptr;
  Device* device_ = nullptr;
  PoolStats stats_;
};

// libgomp's idle threads spin up to 300,000 times before they sleep, on
// cores shared with the background optimizer's and the SSD store's threads.
// At 1,000 the kernels' threads fell asleep between kernels (a 256 x 128
// layer norm: 46 us back to back, 103 us after a 20 us pause); 10,000 ran
// the small programs of bench/planner as fast as the default on two cores.
// libgomp reads its settings before main, so this starts the process again
// with GOMP_SPINCOUNT=10000 unless the user chose a spin; it returns when it
// has done so already or cannot.
void settle_openmp(char** argv);

// Defined by each target's runtime library: null on the CPU target (api.cpp),
// the GPU on the CUDA target (cuda_target.cpp). Called before the program
// declares anything, so a device can make the Runtime's long-lived host
// storage page-locked for fast copies.
std::unique_ptr<Device> make_device(Runtime& rt);

}  // namespace fy
