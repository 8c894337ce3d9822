// AdamW's moments in host memory, or on SSD staged through host buffers
// (exec/moment_store.h).
#include "exec/moment_store.h"

#include <cstring>
#include <string>

#include "exec/runtime.h"
#include "store/store.h"
#include "trace/trace.h"

namespace fy {

namespace {

class InMemory final : public MomentStore {
 public:
  explicit InMemory(Runtime& rt) : rt_(rt) {}

  void declare_group(int64_t, const std::vector<int64_t>& params) override {
    groups_.push_back(params);
  }
  bool staged() const override { return false; }
  Where begin_update(int64_t group) override {
    const std::vector<int64_t>& params = groups_[size_t(group)];
    return [this, &params](size_t i) {
      const Runtime::Param& p = rt_.param(params[i]);
      return std::pair<void*, void*>(p.m.data, p.v.data);
    };
  }
  void read(int64_t param, void* m, void* v) override {
    const Runtime::Param& p = rt_.param(param);
    if (m) std::memcpy(m, p.m.data, size_t(p.m.nbytes()));
    if (v) std::memcpy(v, p.v.data, size_t(p.v.nbytes()));
  }
  void write(int64_t param, const void* m, const void* v) override {
    const Runtime::Param& p = rt_.param(param);
    if (m) std::memcpy(p.m.data, m, size_t(p.m.nbytes()));
    if (v) std::memcpy(p.v.data, v, size_t(p.v.nbytes()));
  }
  size_t host_bytes(size_t) const override {
    size_t n = 0;
    for (const auto& params : groups_)
      for (int64_t p : params) n += 2 * size_t(rt_.state_bytes(p));
    return n;
  }

 private:
  Runtime& rt_;
  std::vector<std::vector<int64_t>> groups_;
};

size_t page_round(size_t n) { return (n + store::kPageBytes - 1) / store::kPageBytes * store::kPageBytes; }

class OnSsd final : public MomentStore {
 public:
  explicit OnSsd(Runtime& rt)
      : rt_(rt), store_(std::make_unique<store::TensorStore>(rt.store_options("fuyou.store", true))) {}
  ~OnSsd() override { settle(); }  // writes in flight still read the staging buffers

  void declare_group(int64_t, const std::vector<int64_t>& params) override {
    // Regions never written read as zeros: AdamW's initial moments (in either format).
    Group g;
    for (int64_t p : params) {
      const std::string& name = rt_.param(p).name;
      const size_t bytes = size_t(rt_.state_bytes(p));
      g.m_regions.push_back(store_->allocate("adam_m/" + name, bytes));
      g.v_regions.push_back(store_->allocate("adam_v/" + name, bytes));
      g.m_offsets.push_back(g.bytes);
      g.bytes += page_round(bytes);
      g.v_offsets.push_back(g.bytes);
      g.bytes += page_round(bytes);
    }
    if (g.bytes > buffer_bytes_) buffer_bytes_ = g.bytes;
    groups_.push_back(std::move(g));
  }
  bool staged() const override { return true; }

  bool can_read_ahead(int64_t group) const override {
    if (staging_.empty()) return true;
    for (const Staging& st : staging_)
      if (st.group == group || (st.consumed && !st.dirty)) return true;
    return false;
  }
  void read_ahead(int64_t group) override {
    TraceSpan span(rt_.trace(), "cpu optimizer", "state read, group ", group);
    stage(group, /*force=*/false);  // can_read_ahead saw a buffer for it
  }
  Where begin_update(int64_t group) override {
    Staging& cur = *stage(group, /*force=*/true);
    cur.consumed = false;
    {
      // The state arrives; an earlier write-back of the same bytes must land
      // before they change under it.
      TraceSpan span(rt_.trace(), "cpu optimizer", "state read wait, group ", group);
      drain(cur.reads);
      drain(cur.writes);
    }
    char* base = static_cast<char*>(cur.buffer.data());
    const Group& g = groups_[size_t(group)];
    return [base, &g](size_t i) { return std::pair<void*, void*>(base + g.m_offsets[i], base + g.v_offsets[i]); };
  }
  void end_update(int64_t group) override {
    Staging* cur = staged_copy(group);
    cur->dirty = true;
    cur->last_use = ++clock_;
  }
  void write_back(int64_t group) override {
    Staging* cur = staged_copy(group);
    if (!cur || !cur->dirty) return;  // written back already (a later update's write)
    const Group& g = groups_[size_t(group)];
    char* base = static_cast<char*>(cur->buffer.data());
    for (size_t i = 0; i < g.m_regions.size(); ++i) {
      cur->writes.push_back(store_->write(g.m_regions[i], base + g.m_offsets[i]));
      cur->writes.push_back(store_->write(g.v_regions[i], base + g.v_offsets[i]));
    }
    // The staged copy stays valid: a later step may find it here without a read.
    cur->dirty = false;
    cur->consumed = true;
    cur->last_use = ++clock_;
  }

  void read(int64_t param, void* m, void* v) override {
    for (Staging& st : staging_) drain(st.writes);
    const std::string& name = rt_.param(param).name;
    const size_t bytes = size_t(rt_.state_bytes(param));
    store::AlignedBuffer tmp(bytes);  // O_DIRECT wants aligned memory; once, so not registered
    if (m) {
      store_->read_sync(store_->find("adam_m/" + name), tmp.data());
      std::memcpy(m, tmp.data(), bytes);
    }
    if (v) {
      store_->read_sync(store_->find("adam_v/" + name), tmp.data());
      std::memcpy(v, tmp.data(), bytes);
    }
  }
  void write(int64_t param, const void* m, const void* v) override {
    for (Staging& st : staging_) {
      drain(st.writes);
      drain(st.reads);
      st.group = -1;  // staged copies are stale now
      st.consumed = true;
    }
    const std::string& name = rt_.param(param).name;
    const size_t bytes = size_t(rt_.state_bytes(param));
    store::AlignedBuffer tmp(bytes);
    if (m) {
      std::memcpy(tmp.data(), m, bytes);
      store_->write_sync(store_->find("adam_m/" + name), tmp.data());
    }
    if (v) {
      std::memcpy(tmp.data(), v, bytes);
      store_->write_sync(store_->find("adam_v/" + name), tmp.data());
    }
  }
  void settle() noexcept override {
    try {
      store_->wait_all();
    } catch (...) {
      // Dropped on purpose: an owner going away cannot report; a run that
      // cares waited (and checkpointed) before.
    }
  }

  size_t host_bytes(size_t buffers) const override { return buffers * buffer_bytes_; }
  size_t buffer_bytes() const override { return buffer_bytes_; }
  const store::TensorStore* tensor_store() const override { return store_.get(); }
  void set_buffers(size_t n) override { buffers_ = n < 2 ? 2 : n; }
  size_t buffers() const override { return buffers_; }

 private:
  // The moments' regions, and where each sits in a staging buffer.
  struct Group {
    std::vector<store::Region> m_regions, v_regions;
    std::vector<size_t> m_offsets, v_offsets;
    size_t bytes = 0;
  };
  // Host room for one group's moments, filled by reads issued ahead.
  struct Staging {
    store::AlignedBuffer buffer;
    int64_t group = -1;
    bool consumed = true;   // its group's update ran (or it holds nothing): reusable
    bool dirty = false;     // updated, the write-back not yet issued: never evicted
    uint64_t last_use = 0;  // least recently used goes first
    std::vector<store::Ticket> reads, writes;
  };

  Staging* staged_copy(int64_t group) {
    for (Staging& st : staging_)
      if (st.group == group) return &st;
    return nullptr;
  }
  void drain(std::vector<store::Ticket>& tickets) {
    for (store::Ticket t : tickets) store_->wait(t);
    tickets.clear();
  }
  // The buffer holding (or now reading) `group`'s moments; null when it is
  // not staged and `force` is false and every buffer holds a read not yet
  // used or an update not yet written back.
  Staging* stage(int64_t group, bool force) {
    if (staging_.empty()) {
      staging_.resize(buffers_);
      for (Staging& st : staging_) st.buffer = store_->buffer(buffer_bytes_);
    }
    if (Staging* st = staged_copy(group)) return st;
    // The least recently used buffer whose group no longer needs it (forced:
    // also one holding a read ahead, which its update will issue again), but
    // never one whose update is not yet written back.
    Staging* pick = nullptr;
    for (Staging& st : staging_)
      if ((st.consumed || force) && !st.dirty && (!pick || st.last_use < pick->last_use)) pick = &st;
    if (!pick) {
      if (force) fail("optimizer: every staging buffer holds an update not yet written back (no state_write?)");
      return nullptr;
    }
    {
      // Its previous group's write-back must land first.
      TraceSpan span(rt_.trace(), "cpu optimizer", "state write wait, group ", pick->group);
      drain(pick->writes);
      drain(pick->reads);
    }
    const Group& g = groups_[size_t(group)];
    char* base = static_cast<char*>(pick->buffer.data());
    for (size_t i = 0; i < g.m_regions.size(); ++i) {
      pick->reads.push_back(store_->read(g.m_regions[i], base + g.m_offsets[i]));
      pick->reads.push_back(store_->read(g.v_regions[i], base + g.v_offsets[i]));
    }
    pick->group = group;
    pick->consumed = false;
    pick->last_use = ++clock_;
    return pick;
  }

  Runtime& rt_;
  std::unique_ptr<store::TensorStore> store_;
  std::vector<Group> groups_;
  std::vector<Staging> staging_;  // allocated at the first update
  size_t buffers_ = 4;            // reads can run buffers_ - 1 groups ahead
  size_t buffer_bytes_ = 0;
  uint64_t clock_ = 0;
};

}  // namespace

std::unique_ptr<MomentStore> moments_in_memory(Runtime& rt) { return std::make_unique<InMemory>(rt); }
std::unique_ptr<MomentStore> moments_on_ssd(Runtime& rt) { return std::make_unique<OnSsd>(rt); }

}  // namespace fy
