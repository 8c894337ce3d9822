#include "exec/ssd_spill.h"

#include <sys/mman.h>

namespace fy {

namespace {
int64_t pages(int64_t bytes) {
  const int64_t p = int64_t(store::kPageBytes);
  return (bytes + p - 1) / p * p;
}
}  // namespace

SsdSpill::SsdSpill(const store::StoreOptions& so, int64_t bytes, Trace* trace) : bytes_(pages(bytes)), trace_(trace) {
  store_ = std::make_unique<store::TensorStore>(so);
  region_ = store_->allocate("activations", uint64_t(bytes_));
  // Addresses only: PROT_NONE pages take no memory and fault if touched.
  base_ = ::mmap(nullptr, size_t(bytes_), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (base_ == MAP_FAILED) fail("cannot reserve addresses for the " + std::to_string(bytes_) + "-byte SSD arena");
  arena_.reset(base_, bytes_);
}

SsdSpill::~SsdSpill() {
  try {
    settle_all();
  } catch (...) {
    // A destructor cannot report; a run that reaches its end settled every step.
  }
  store_.reset();
  if (base_) ::munmap(base_, size_t(bytes_));
}

View SsdSpill::place(int64_t offset, Shape shape, DType dtype) {
  int64_t n = 0;
  return arena_.place(offset, shape, dtype, int64_t(store::kPageBytes), &n);
}

void SsdSpill::release(const View& ssd) { arena_.release(ssd); }

int64_t SsdSpill::offset_of(const View& ssd) const {
  if (!contains(ssd.data)) fail("ssd transfer: the buffer is not in the SSD arena");
  return static_cast<const char*>(ssd.data) - static_cast<const char*>(base_);
}

int64_t SsdSpill::write(View host, View ssd) {
  if (host.nbytes() != ssd.nbytes()) fail("copy to SSD: " + host.shape.str() + " and " + ssd.shape.str() + " differ");
  settle(host.data);
  int64_t off = offset_of(ssd), n = pages(int64_t(host.nbytes()));
  store::Ticket t = store_->write(region_, host.data, uint64_t(off), uint64_t(n));
  in_flight_.push_back({t, static_cast<const char*>(host.data), n, off, true, ++writes_});
  return writes_;
}

void SsdSpill::wait(int64_t ticket) {
  if (ticket < 1 || ticket > writes_) fail("ssd_wait: no write to SSD started with ticket " + std::to_string(ticket));
  for (size_t i = 0; i < in_flight_.size(); ++i)
    if (in_flight_[i].id == ticket) return finish(i);
}

void SsdSpill::read(View ssd, View host) {
  if (host.nbytes() != ssd.nbytes()) fail("copy from SSD: " + ssd.shape.str() + " and " + host.shape.str() + " differ");
  int64_t off = offset_of(ssd);
  // The store may reorder requests: a write still filling these pages lands first.
  for (size_t i = in_flight_.size(); i-- > 0;)
    if (in_flight_[i].write && in_flight_[i].offset == off) finish(i);
  settle(host.data);
  int64_t n = pages(int64_t(host.nbytes()));
  store::Ticket t = store_->read(region_, host.data, uint64_t(off), uint64_t(n));
  in_flight_.push_back({t, static_cast<const char*>(host.data), n, off, false, 0});
}

void SsdSpill::finish(size_t i) {
  store::Ticket t = in_flight_[i].ticket;
  in_flight_.erase(in_flight_.begin() + long(i));
  if (store_->ready(t)) {
    store_->wait(t);
    return;
  }
  TraceSpan span(trace_, "compute", "wait for ssd");
  store_->wait(t);
}

void SsdSpill::settle(const void* host) { settle(host, static_cast<const char*>(host) + 1); }

void SsdSpill::settle(const void* begin, const void* end) {
  for (size_t i = in_flight_.size(); i-- > 0;)
    if (in_flight_[i].host < static_cast<const char*>(end) && static_cast<const void*>(in_flight_[i].host + in_flight_[i].bytes) > begin)
      finish(i);
}

void SsdSpill::settle_all() {
  while (!in_flight_.empty()) finish(in_flight_.size() - 1);
}

}  // namespace fy
