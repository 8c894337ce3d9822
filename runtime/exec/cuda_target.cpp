#include "exec/cuda_target.h"

#include "abi/sizes.h"

namespace fy {

// The CUDA target's runtime library runs every program on the GPU.
std::unique_ptr<Device> make_device(Runtime& rt) { return std::make_unique<cuda::CudaTarget>(rt); }

}  // namespace fy

namespace fy::cuda {

CudaTarget::CudaTarget(Runtime& rt) : WithHost(rt), CudaDevice(host) {
  rt.set_host_allocator(pinned_alloc, pinned_free);
}

CudaTarget::~CudaTarget() {
  // A failed step may have left updates queued or held.
  if (!wired_) return;
  AsyncOptimizer& opt = runtime().async_optimizer();
  opt.quiesce();
  opt.set_on_updated(nullptr);
  opt.set_on_piece_updated(nullptr);
  opt.set_on_rows_updated(nullptr);
  opt.set_gradient_copy(nullptr);
  opt.set_gradient_rows_copy(nullptr);
  opt.set_gradient_chunk_copy(nullptr);
}

void CudaTarget::prepare() {
  if (!wired_ && runtime().has_async_optimizer()) {
    prepare_groups(runtime().async_optimizer().num_groups());
    wire(runtime().async_optimizer());
    wired_ = true;
  }
  CudaDevice::prepare();
}

namespace {
AsyncOptimizer::Landing to_optimizer(Landing l) { return {std::move(l.wait), std::move(l.ready)}; }
}  // namespace

void CudaTarget::wire(AsyncOptimizer& opt) {
  opt.set_gradient_copy([this](const View& src, float* dst) { gradient_out(src, dst); },
                        [this](int64_t group) { return to_optimizer(gradients_out_landing(group)); });
  opt.set_gradient_rows_copy([this](int64_t group, const View& src, const int64_t* rows, int64_t count, float* dst) {
    return to_optimizer(gradient_rows_out(group, src, rows, count, dst));
  });
  opt.set_gradient_chunk_copy([this](int64_t, const View& src, int64_t lo, int64_t n, float* dst) {
    return to_optimizer(gradient_chunk_out(size_t(lo / kUpdatePieceElems), src, lo, n, dst));
  });
  opt.set_on_updated([this](int64_t group) { group_uploaded(group); });
  // Streamed parameters have no working copies (the program copies the
  // masters, and gathers a table's rows from its master): then neither the
  // pieces nor the rows go up, and the optimizer does not keep the rows.
  if (runtime().streamed_params()) return;
  opt.set_on_piece_updated([this](int64_t param, int64_t lo, int64_t n) { piece_up(param, lo, n); });
  opt.set_on_rows_updated([this](int64_t group, int64_t param, const int64_t* rows, int64_t count,
                                 const float* values) { rows_up(group, param, rows, count, values); });
}

CudaTarget& device_of(Runtime* rt) {
  auto* d = dynamic_cast<CudaTarget*>(rt->device());
  if (!d) fail("this program was built for the CUDA target but runs without its device");
  return *d;
}

}  // namespace fy::cuda
