// Fuyou's overlapped CPU optimizer: the AdamW update of a layer group runs on
// a background thread as soon as backward has produced the group's last
// gradient, while backward goes on for the earlier groups. The next step
// waits for a group's update only before it reads that group's parameters,
// so the result is that of a plain synchronous AdamW.
#pragma once

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "core/tensor.h"
#include "optim/adamw.h"
#include "abi/sizes.h"
#include "optim/loss_scaler.h"
#include "exec/moment_store.h"
#include "store/store.h"

namespace fy {

class Runtime;

class AsyncOptimizer {
 public:
  explicit AsyncOptimizer(Runtime& rt);
  ~AsyncOptimizer();
  AsyncOptimizer(const AsyncOptimizer&) = delete;
  AsyncOptimizer& operator=(const AsyncOptimizer&) = delete;

  // A group of trainable parameters (indices into the Runtime); returns its id.
  int64_t declare_group(std::vector<int64_t> params);
  int64_t num_groups() const { return int64_t(groups_.size()); }
  const std::vector<int64_t>& group_params(int64_t group) const { return groups_[size_t(group)].params; }

  // A group's gradient copies in flight: wait() blocks until they have
  // landed; ready() says whether they have, without blocking.
  struct Landing {
    std::function<void()> wait;
    std::function<bool()> ready;
  };
  // How a gradient leaves the device for its host slot (default: memcpy, the
  // CPU target's gradients are host memory). Returns once dst holds it,
  // unless a fence is set too: then it may only issue the copy, and once a
  // group's copies are issued, fence(group) returns their Landing. The
  // optimizer waits on that before it reads the slot, and while one group's
  // copies are still on their way it updates another whose have landed.
  void set_gradient_copy(std::function<void(const View& src, float* dst)> f,
                         std::function<Landing(int64_t group)> fence = {}) {
    copy_out_ = std::move(f);
    copy_fence_ = std::move(fence);
  }
  // Called on the optimizer's thread after a group's update (after its
  // pieces, below), before wait() lets anyone read the group's parameters:
  // a device marks the end of the group's uploads here.
  void set_on_updated(std::function<void(int64_t group)> f) { on_updated_ = std::move(f); }
  // Called on the optimizer's thread as each piece [lo, lo + n) of parameter
  // `param` is updated, in order, before the group's on_updated: a device
  // copies the piece up while the next one is computed, so the upload of a
  // big group (the embedding, first needed by the next step) trails its
  // update by one piece, not by the whole group.
  void set_on_piece_updated(std::function<void(int64_t param, int64_t lo, int64_t n)> f) {
    on_piece_updated_ = std::move(f);
  }
  // ---- rows first ----
  // The token embedding is read first, by a gather of the next step's
  // tokens, but its gradient is complete only at the end of backward: a
  // whole-table update there keeps the next forward waiting. A program
  // names such a table by calling wait_rows before its gather; from then on
  // the group's updates do the rows the next step gathers first (next_ids
  // says which), report them, then do the rest while the forward runs.
  // AdamW is elementwise, so the bits are those of one whole update.
  //
  // Fills the token ids of the step after Runtime step `step` (its first
  // micro-batch's when accumulating); false: there is none. Called by grad_offload of the table's group, on its thread.
  // Set before the first wait_rows, or there is no rows first.
  void set_next_ids(std::function<bool(int64_t step, std::vector<int64_t>& ids)> f) { next_ids_ = std::move(f); }
  // Called on the optimizer's thread once the first part of parameter
  // `param`'s update is done, before wait_rows lets anyone read it: `rows`
  // (sorted, `count` of them) and their new values row after row, both in
  // memory from Runtime::alloc_pinned that stays untouched until the call
  // returns. A device scatters them into its copy here.
  void set_on_rows_updated(
      std::function<void(int64_t group, int64_t param, const int64_t* rows, int64_t count, const float* values)> f) {
    on_rows_updated_ = std::move(f);
  }
  // How a device takes the first part's rows of the table's gradient
  // (`rows`, sorted, `count` of them) to dst, row after row, ahead of the
  // whole gradient's copy (set_gradient_copy): the rows part of the update
  // then waits for only these to land. Only for a table that the first
  // wait_rows names at most half of. rows and dst are from
  // Runtime::alloc_pinned and stay untouched until the copy has landed.
  // Not with clipping or loss scaling, whose updates wait for every
  // gradient anyway.
  void set_gradient_rows_copy(
      std::function<Landing(int64_t group, const View& src, const int64_t* rows, int64_t count, float* dst)> f) {
    copy_rows_out_ = std::move(f);
  }
  // Names parameter `param`, a 2-D table of `group`, as read rows first by
  // a gather of `ids` token ids a step. A program declares it before its
  // first step, so that fixed_host_bytes (and --cpu-mem) count the rows'
  // buffers; the first wait_rows names a table nobody declared.
  void declare_rows(int64_t group, int64_t param, int64_t ids);
  // Returns once the rows of parameter `param` (a 2-D table of `group`)
  // that ids[0, n) name are updated: true when the rest of the group's
  // update may still be running, false when it waited for all of it (the
  // first calls, a batch other than next_ids said, an 8-bit table).
  bool wait_rows(int64_t group, int64_t param, const int64_t* ids, int64_t n);

  // ---- a table's rows early (fysched.grad_offload_early) ----
  // A tied embedding's gradient is final in every row the step's ids do not
  // name once the logits product's backward has run; the gather's rows are
  // added only at the end of backward. The program hands those rows over
  // there: they leave the device into the group's slot, and the rows of
  // them that the next batch gathers are updated as soon as they land (in
  // queue order, reported through on_rows_updated); the rest goes piece by
  // piece whenever the worker has nothing else to run, before or after
  // the group's update, which the group's grad_offload brings: the step's
  // rows of the table (the rows-first part) and the group's other
  // parameters. So the next forward's gather waits for its rows only, the
  // blocks' updates never wait behind the table's, and the table is whole
  // when the group's update and its early pieces are all done. AdamW is
  // elementwise: the bits are those of one whole update. Declines (false;
  // the grad_offload brings it all) for a table declare_early did not name,
  // before wait_rows has made rows first's buffers, with the state on SSD,
  // clipping, loss scaling, accumulation, an 8-bit table or recorded
  // gradients.
  bool offload_early(int64_t group, int64_t param, const View& grad, const int64_t* ids, int64_t n);
  // Names table `param` of `group` (read rows first) as handed over early
  // by the program, before its first step, so that host memory counts the
  // buffers of the next batch's rows among them. all_chunks: a device
  // (set_gradient_chunk_copy) sends the part's chunks all at once. held: the
  // program reads the table after offload_early, and calls release_early
  // after that read; the part's copies down start at offload_early, its
  // updates (which write the table and call the hooks) only after release.
  void declare_early(int64_t group, int64_t param, bool all_chunks = false, bool held = false);
  // The table handed over held may be written now (nothing if offload_early
  // declined it). The group's grad_offload fails if it never came.
  void release_early(int64_t group, int64_t param);
  // How a device takes elements [lo, lo + n) of a table's gradient to dst,
  // one chunk of an early part (a piece's worth), and that copy's own
  // landing. With it (and set_gradient_rows_copy) a device's early part
  // does not cross the link at once, ahead of the blocks' gradients: the
  // next batch's rows among it go down first (gathered, into their own
  // buffer), one chunk now, one behind each other group's gradients, and
  // the rest behind the table's own rows (all at once where declare_early
  // said all_chunks); each piece waits for its chunk.
  void set_gradient_chunk_copy(
      std::function<Landing(int64_t group, const View& src, int64_t lo, int64_t n, float* dst)> f) {
    copy_chunk_out_ = std::move(f);
  }
  int64_t early_updates() const { return early_updates_; }  // offload_early calls taken

  // fp32 updates go to the pool in pieces of this many elements, 8-bit ones whole.
  static constexpr int64_t kPiece = kUpdatePieceElems;
  static_assert(kPiece % AdamWPool::kChunk == 0, "pieces end on the pool's chunk boundaries");

  // A group's update is the program's pipeline of four ops (fysched
  // grad_offload, state_read, group_adamw, state_write). Each returns a
  // token naming its completion, which later ops of the same group take as
  // their dependencies. A background worker runs the queued ones in the
  // order they were issued, as far as their dependencies and the staging
  // buffers allow, except that an update whose gradients are still on their
  // way gives way to one whose have landed (runnable()).
  //
  // Copies the group's gradients (one per parameter, in declaration order)
  // to a host slot owned here, so the caller may free them at once; waits
  // for a free slot when all are taken (backpressure).
  int64_t offload(int64_t group, const View* grads, size_t count);
  // Queues the read of the group's state from the store into a staging
  // buffer, issued once one is free; in memory there is nothing to read.
  int64_t read(int64_t group);
  // Queues AdamW over the group at the Runtime's current step; `deps` are
  // this step's offload token of the group and, optionally, its read token
  // (without one the update reads the state itself).
  int64_t update(int64_t group, const int64_t* deps, size_t count);
  // Queues the write-back of the state `update` (a token of update()) left
  // in its staging buffer.
  void write(int64_t group, int64_t update);
  // All four in a row: what a program without its own pipeline does.
  void start(int64_t group, const View* grads, size_t count);
  // Returns once the group's parameters are up to date: its queued update
  // is done (a micro-batch's accumulation changes none and is not waited
  // for); rethrows a failure.
  void wait(int64_t group);
  // Returns once parameter `param` of the group is up to date: the group's
  // update does its parameters in the group's order (a table read rows
  // first before the rest), so the next forward can read the first while
  // the others are updated (fy-param-waits). The device's copy of it is
  // then under way (on_piece_updated has had its last piece).
  void wait_param(int64_t group, int64_t param);
  // Returns once every queued op (updates and write-backs) is done.
  void wait_all();
  // For an owner going away, also after a failure: drops the updates still
  // queued or held for clipping and waits for the one running, so that no
  // hook is called afterwards. Never throws; leaves the state mid-step.
  void quiesce() noexcept;

  // Gradient clipping by global L2 norm (torch.nn.utils.clip_grad_norm_):
  // every gradient must be in before any update, so updates are held until
  // the step's last group has started, then released in forward order (the
  // reverse of backward's) so that the next forward waits as little as
  // possible. They still overlap the next step's forward, not the backward.
  void set_clip_norm(double max_norm) { clip_norm_ = max_norm; }
  double last_grad_norm() const { return last_norm_; }

  // Dynamic loss scaling (fp16 programs): updates are held the same way, the
  // worker checks each group's gradients as they land, and once the step's
  // last group is in, a gradient with an inf or NaN skips the whole step's
  // update (LossScaler). Otherwise the gradients are unscaled first.
  void set_loss_scaling(const LossScaleConfig& c) {
    scaler_ = std::make_unique<LossScaler>(c);
    verdict_ = Verdict{false, c.init, c.init};
  }
  struct Verdict {
    bool skipped = false;  // the step's gradients held an inf or NaN
    float scale = 1.f;     // the scale the step's backward ran at
    float next = 1.f;      // the scale from the next step on
  };
  // Blocks until the last step whose updates were issued has its verdict.
  Verdict wait_verdict();
  // The scale for the backward about to start (after the last verdict).
  float loss_scale() { return wait_verdict().next; }
  // What backward starts from: the scale, over k when accumulating, as
  // torch's (loss / k * scale).backward() (combine() then only sums).
  float backward_scale() {
    const float s = loss_scale();
    return accum_ > 1 ? s / float(accum_) : s;
  }
  // Checkpoints (after wait_all): the scaler's whole state.
  const LossScaler* loss_scaler() const { return scaler_.get(); }
  void restore_loss_scaler(float scale, int64_t growth_tracker, int64_t skipped);

  // Gradient accumulation: a step of k micro-batches runs the program k
  // times. In all but the last, a group's update only adds its gradients
  // into a host accumulator of the group's (no state I/O, no AdamW, the
  // parameters stay); the last adds them in too, scales the sum by 1/k and
  // updates as usual (clipping and the loss scale's check see the sum).
  // Set before the first step; which micro-batch runs is the Runtime's
  // micro_step().
  void set_accumulation(int64_t k);
  size_t accum_host_bytes() const;  // the accumulators: one fp32 gradient of every group

  // Out of core (--ssd): AdamW's moments live in the store, one region each,
  // and only the staging buffers' worth of groups (2 to 8) sit in host
  // memory, filled where the program's state_read ops say.
  bool on_ssd() const { return moments_->staged(); }
  // The moments of one parameter, wherever they live (checkpoints), in their
  // format (Runtime::state_bytes each); either pointer may be null.
  void read_state(int64_t param, void* m, void* v);
  void write_state(int64_t param, const void* m, const void* v);
  const store::TensorStore* store() const { return moments_->tensor_store(); }
  size_t staging_bytes() const { return moments_->buffer_bytes(); }
  // Staging buffers for the moments out of core (at least 2); set before the first step.
  void set_staging(size_t n) { moments_->set_buffers(n); }
  size_t staging() const { return moments_->buffers(); }

  // Host memory: what the optimizer holds besides its gradient slots, the
  // size of one slot, and the fewest slots it can run with (clipping and
  // loss scaling hold every group's gradients until all are in). Rows-first
  // buffers count once the table is declared and the callbacks that need
  // them are set.
  size_t fixed_host_bytes() const;
  size_t rows_host_bytes() const;
  size_t slot_bytes() const { return slot_elems_ * sizeof(float); }
  size_t min_slots() const { return holds() ? groups_.size() : 1; }
  size_t min_fixed_host_bytes() const {
    return moments_->host_bytes(2) + rows_host_bytes() + accum_host_bytes();
  }
  // How many slots to use (default: one per group, never waiting).
  void set_slots(size_t n) { wanted_slots_ = n; }
  size_t slots() const { return slots_.size(); }

  double busy_seconds() const;  // time the worker spent updating
  double wait_seconds() const { return wait_seconds_; }  // time callers blocked in wait

 private:
  // Check: the norms of a held group's gradients, once they have landed.
  // Early: a table's rows that offload_early handed over.
  enum class Op { Offload, Read, Update, Write, Check, Early };
  // A queued op of the pipeline; offloads run on the caller's thread.
  struct Item {
    Op op;
    int64_t group;
    // Which of the group's ops it is (reads and updates count from 1); a
    // write names the update it follows.
    int64_t seq;
    int64_t after_read = 0;  // an update: the read it needs (0: none)
    // An update of a micro-batch before the step's last: its gradients go
    // into the accumulator (the first one's replace it).
    bool accumulate = false, first_micro = false;
  };
  struct Token {
    Op op;
    int64_t group, seq;
  };
  struct Group {
    std::vector<int64_t> params;
    std::vector<size_t> grad_offsets;       // where each gradient sits in a slot
    size_t grad_elems = 0;
    int slot = -1;                          // the host slot holding its gradients
    Landing landed;                         // the slot's copies, while they may be running
    int64_t offloaded = 0;                  // when its copies were issued (grad_offload count)
    std::vector<double> sq_norms;  // per parameter, of this step's gradients
    int64_t step = 0;              // AdamW's step count
    int64_t iteration = 0;         // the training step it belongs to: its learning rate
    float* acc = nullptr;          // accumulated gradients (set_accumulation), like a slot
    bool combine = false;          // the slot still needs the accumulator added and the 1/k
    float unscale = 1.f;           // 1 / loss scale, applied first
    float scale = 1.f;             // clipping coefficient applied before AdamW
    bool pending = false;          // its update or accumulation is queued, held or running: the slot is taken
    bool updating = false;         // its update is (the parameters will change)
    std::vector<uint8_t> updated;  // per parameter, while updating: done (wait_param)
    bool held = false;             // started, waiting for the global norm
    int64_t reads = 0, reads_done = 0;      // read() calls issued and run
    int64_t updates = 0, updates_done = 0;  // update() calls issued and run
    // Rows first (declare_rows, wait_rows): the table, its buffers made by
    // the first wait_rows, the rows of the pending update's first part (a
    // mask over the table's rows, and the list), whether that part is done,
    // and room for the rows' new values for on_rows_updated.
    // The rows are chosen at grad_offload (plan_rows): rows_index is the
    // table's place in params for this update (-1: no rows first), and
    // row_grads, when the device copied the rows' gradient there ahead of
    // the whole one, lands with rows_landed.
    int64_t rows_param = -1;
    bool rows_made = false;
    int rows_index = -1;
    bool rows_ready = false;
    std::vector<uint8_t> row_mask;
    int64_t* rows = nullptr;
    float* row_values = nullptr;
    float* row_grads = nullptr;
    Landing rows_landed;
    bool rows_from_copy = false;
    // The rows part of the queued update is done and its item queued again
    // for the rest (in memory only: see run).
    bool rows_done = false;
    int64_t rows_capacity = 0, row_count = 0;
    // The first rows_next of rows are the next batch's: all of them, but
    // after an early part, where rows are the step's own, those the next
    // batch also names (next_mask), ahead of the others.
    int64_t rows_next = 0;
    std::vector<uint8_t> next_mask;
    // offload_early took this update's table rows that the step's ids do
    // not name (the slot is taken, and rows/row_mask name the step's ids),
    // their copy landing with early_landed. First the next batch's rows
    // among them (early_mask; early_rows, early_count of them, their new
    // values into early_values for on_rows_updated), then the rest piece by
    // piece (early_chunks: each piece's copy), early_piece done so far; the
    // group's update may run in between, and whichever of the two ends last
    // finishes the group (final_seq: the update's, once it has run).
    bool early_declared = false, early_all_chunks = false;
    // Held (declare_early): the step reads the table after handing it over;
    // nothing of the part runs until release_early says that read is done.
    bool early_held = false, early_released = true;
    bool early = false, early_first_done = false, early_done = false;
    // The program's thread's own note that this step's offload_early took the
    // slot (its grad_offload and group_adamw then leave what it set alone).
    bool early_taken = false;
    int64_t early_piece = 0, final_seq = 0;
    Landing early_landed;
    std::vector<uint8_t> early_mask;
    int64_t* early_rows = nullptr;
    float* early_values = nullptr;
    int64_t early_count = 0;
    // In chunks (set_gradient_chunk_copy): the next batch's rows among the
    // early ones come down into early_grads (early_landed), and the part
    // from early_src chunk by chunk, early_sent of them so far.
    float* early_grads = nullptr;
    View early_src;
    std::vector<Landing> early_chunks;
    int64_t early_sent = 0;
  };
  void worker();
  // Blocks until the group's slot is free (`slot`: nothing of it queued)
  // or its parameters are up to date; rethrows a failure.
  void wait_group(int64_t group, bool slot);
  // The first queued item whose dependencies are met (under mu_); -1 if none.
  // An update whose gradients are still copying gives way to a later one
  // whose have landed, or else to the one whose copies land first.
  int runnable() const;
  bool landed(const Item& it) const;  // its group's gradients are in the slot
  void run(const Item& item);
  int64_t new_token(Op op, int64_t group, int64_t seq);
  // The live token `token` of `group`; fails naming `who` if the program
  // names something else. The caller retires it once the op is accepted.
  Token peek_token(int64_t token, int64_t group, const char* who) const;
  void release_updates();  // the step's last update is in: order or unhold them
  // A group's update of sequence `seq` is over (run, or skipped): its slot is free (under mu_).
  void finish_update(Group& g, int64_t seq);
  // After a table's early part and the group's update are both done: the
  // table's wait_param may return.
  void finish_table(Group& g);
  bool holds() const { return clip_norm_ > 0 || scaler_; }
  // Takes a free host slot for the group's gradients (waits for one).
  void take_slot(Group& g);
  // An early item that runs only when nothing else can: the table's pieces
  // (the next batch's rows among the early ones go in queue order).
  bool early_filler(const Item& it) const {
    return it.op == Op::Early && groups_[size_t(it.group)].early_first_done;
  }
  // A filler whose chunk has been sent for (under mu_).
  bool early_sent(const Item& it) const {
    const Group& g = groups_[size_t(it.group)];
    return g.early_piece < g.early_sent;
  }
  // Sends up to n more chunks of the group's early part (the program's thread).
  void send_early_chunks(Group& g, int64_t n);
  // The group, checked, and `param` one of its parameters (`op` names the caller in the error).
  Group& table_group(int64_t group, int64_t param, const char* op);
  int64_t early_sending_ = -1;  // the group whose early chunks are being sent (the program's thread)
  mutable bool filler_waiting_ = false;  // runnable() found only a piece whose chunk is on its way
  // One turn of a table's early part: its next batch's rows, or one piece
  // of the rest; false when that was the last.
  bool run_early(Group& g);
  // Queues AdamW over the table's rest within [lo, lo + len) of its
  // elements: the rows that neither the step's ids (row_mask) nor, with
  // `early`, the next batch's early rows (early_mask) name.
  AdamWPool::Handle submit_rest_piece(Group& g, int64_t lo, int64_t len, bool early, void* m, void* v,
                                      const AdamWConfig& cfg);
  // On the pool: one thread took 4 ms per 28 MB of gradients on an H100 host.
  void check_norms(Group& g);
  // Blocks until a landing of group `group`'s gradients (g.landed: all of
  // them in its slot; g.rows_landed: the first part's rows) is in; adds the
  // seconds waited to landed_wait_. `what` names the trace's wait slice.
  void await(Landing& l, const char* what, int64_t group);
  // Waits out every landing (the first `chunks` early ones), ignoring errors: before a slot is freed on a
  // failure or a drop (the device's teardown reports its errors).
  static void settle_landings(Group& g, int64_t chunks) noexcept;
  // Which part of an update to do: all of it, or (rows_from_copy) the
  // table's rows, or the rest once they are done.
  enum class Part { All, Rows, Rest };
  // The group's update over its moments (moments_: staged first, if on SSD).
  void update_moments(int64_t group, Part part);
  // An update's bytes in its trace slice: 16 a parameter (a Rest's lacks the rows).
  int64_t update_bytes(const Group& g, Part part) const;
  // A queued piece of a parameter's update.
  struct Piece {
    AdamWPool::Handle job;
    int64_t param, lo, n;
  };
  // AdamW's settings for the group's update: the gradient times its
  // unscale, then times its clipping coefficient.
  AdamWConfig adamw_config(const Group& g) const;
  // Queues parameter `param`'s AdamW on the pool, in its moments' format.
  void submit(int64_t param, const float* g, void* m, void* v, const AdamWConfig& cfg, int64_t step,
              std::vector<Piece>& pieces);
  // Queues each of the group's parameters, then waits for each piece in
  // turn, reporting it to on_piece_updated.
  // state(i) gives the moments of the group's i-th parameter. A table
  // updated rows first goes to the pool before the rest (submit_rows) and
  // is reported when done; Part::Rows stops there, Part::Rest skips it.
  void update_pieces(Group& g, const std::function<std::pair<void*, void*>(size_t)>& state, Part part);
  // At grad_offload, on the caller's thread: which of the group's
  // parameters goes rows first in this update (g.rows_index; -1: none),
  // after filling g.rows and g.row_mask (nobody reads them until the update
  // is queued, or before rows_ready).
  void plan_rows(Group& g, int64_t step);
  // Whether the device copies the rows' gradient into g.row_grads: it pays
  // when the rows are at most half the table's bytes (the compiler's cost
  // model has the same rule), and the update has no other gradient to wait for.
  bool copies_row_grads(const Group& g) const;
  // Queues rows[from, to) of the table's rows part (one job) and returns
  // it; from the rows' own gradient copy when there is one.
  AdamWPool::Handle submit_rows(Group& g, int64_t from, int64_t to, void* m, void* v, const AdamWConfig& cfg);
  // Waits for the rows job (the first rows_next rows), reports them and
  // lets wait_rows return; then the same for the others' job, if any.
  void finish_rows(Group& g, AdamWPool::Handle rows_job, AdamWPool::Handle others_job);
  // Marks the group's parameter at `index` updated and wakes wait_param.
  void param_updated(Group& g, size_t index);
  // Queues the table's rest, in pieces.
  void submit_rest(Group& g, void* m, void* v, const AdamWConfig& cfg, std::vector<Piece>& pieces);
  float* grad(const Group& g, size_t i) { return slots_[size_t(g.slot)] + g.grad_offsets[i]; }
  void make_slots();
  bool accumulating() const;  // a micro-batch before the step's last runs
  void accumulate(Group& g, bool first);  // the slot into the accumulator
  void combine(Group& g);                 // the accumulator into the slot, times 1/k

  Runtime& rt_;
  std::vector<Group> groups_;
  std::deque<Item> queue_;
  std::vector<Item> held_;  // updates waiting for the step's global norm (clipping)
  bool running_ = false;  // the worker is running an item it took off queue_
  size_t started_ = 0;  // groups updated in this step
  // Live tokens: what each names, until the op that depends on it is issued.
  std::unordered_map<int64_t, Token> tokens_;
  int64_t next_token_ = 1;
  mutable std::mutex mu_;
  std::condition_variable work_cv_, done_cv_;
  std::exception_ptr error_;
  bool stop_ = false;
  bool quiescing_ = false;  // quiesce: the worker takes no item
  int64_t early_updates_ = 0;
  double clip_norm_ = 0;
  double last_norm_ = 0;
  std::unique_ptr<LossScaler> scaler_;
  Verdict verdict_;
  bool awaiting_ = false;  // updates are held for a verdict not yet made
  bool all_in_ = false;    // and the step's last group has started
  size_t checked_ = 0;     // held groups whose norms are in
  double busy_seconds_ = 0;
  double wait_seconds_ = 0;
  // Host slots for gradients that left the device, each as big as the
  // largest group; start() waits for a free one (backpressure), so their
  // number bounds host memory.
  std::vector<float*> slots_;  // Runtime::alloc_pinned storage
  std::vector<int> free_slots_;
  size_t slot_elems_ = 0;
  int64_t accum_ = 1;  // micro-batches a step
  size_t wanted_slots_ = 0;
  // The updates, gradient norms and unscaling, on every core it may use.
  std::unique_ptr<AdamWPool> pool_;
  std::unique_ptr<MomentStore> moments_;  // AdamW's moments: in memory or on SSD
  std::function<void(const View&, float*)> copy_out_;
  std::function<Landing(int64_t)> copy_fence_;
  int64_t offloads_ = 0;  // grad_offload calls so far: copies land in this order
  std::function<void(int64_t)> on_updated_;
  std::function<void(int64_t, int64_t, int64_t)> on_piece_updated_;
  std::function<bool(int64_t, std::vector<int64_t>&)> next_ids_;
  std::vector<int64_t> next_ids_buf_;  // grad_offload's
  std::function<void(int64_t, int64_t, const int64_t*, int64_t, const float*)> on_rows_updated_;
  std::function<Landing(int64_t, const View&, const int64_t*, int64_t, float*)> copy_rows_out_;
  std::function<Landing(int64_t, const View&, int64_t, int64_t, float*)> copy_chunk_out_;
  double landed_wait_ = 0;  // the worker's, for the item it runs
  std::thread thread_;
};

}  // namespace fy
