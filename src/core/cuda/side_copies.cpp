// Side-stream copies to the host, ordered by two events (see side_copies.h): `queued_` after the
// compute stream's work at each add, `copied_` after the side stream's last copy. An event's wait
// takes its latest record, so one pair serves any number of copies.
#include "core/cuda/side_copies.h"

#include "core/cuda/device.h"
#include "core/error.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/cuda_check.h"
#endif

namespace tessera {

#ifdef TESSERA_WITH_CUDA

namespace {

cudaStream_t side_stream() {
  static const cudaStream_t stream = [] {
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

}  // namespace

SideCopies::~SideCopies() {
  if (!copied_) return;
  cudaSetDevice(device_);
  cudaEventSynchronize(copied_);  // no throwing here: the copies land or the process is going down
  cudaEventDestroy(copied_);
  cudaEventDestroy(queued_);
}

void SideCopies::add(const Tensor& host_dst, const Tensor& device_src) {
  TS_CHECK(host_dst.device() == Device::cpu && device_src.device() == Device::cuda &&
               host_dst.numel() == device_src.numel() && host_dst.dtype() == device_src.dtype(),
           "SideCopies::add: ", shape_string(device_src.shape()), " ", dtype_name(device_src.dtype()), " on the ",
           device_src.device() == Device::cuda ? "GPU" : "CPU", " into ", shape_string(host_dst.shape()), " ",
           dtype_name(host_dst.dtype()), " on the ", host_dst.device() == Device::cuda ? "GPU" : "CPU",
           "; it copies a GPU tensor into a host one of its size");
  if (device_src.bytes() == 0) return;
  const cudaStream_t compute = cuda_compute_stream();
  if (!copied_) {
    device_ = cuda_current_device();
    CUDA_CHECK(cudaEventCreateWithFlags(&queued_, cudaEventDisableTiming));
    // A blocking event: wait() sleeps rather than spinning a core the training's launches need.
    CUDA_CHECK(cudaEventCreateWithFlags(&copied_, cudaEventDisableTiming | cudaEventBlockingSync));
  }
  CUDA_CHECK(cudaEventRecord(queued_, compute));
  CUDA_CHECK(cudaStreamWaitEvent(side_stream(), queued_, 0));
  CUDA_CHECK(cudaMemcpyAsync(host_dst.raw_data(), device_src.raw_data(), device_src.bytes(), cudaMemcpyDeviceToHost,
                             side_stream()));
  CUDA_CHECK(cudaEventRecord(copied_, side_stream()));
  compute_must_wait_ = true;
}

void SideCopies::compute_waits() {
  if (!compute_must_wait_) return;
  CUDA_CHECK(cudaStreamWaitEvent(cuda_compute_stream(), copied_, 0));
  compute_must_wait_ = false;
}

void SideCopies::wait() {
  if (!copied_) return;
  CUDA_CHECK(cudaSetDevice(device_));  // this thread's current device, which may be another
  CUDA_CHECK(cudaEventSynchronize(copied_));
}

#else  // no CUDA backend in this build

SideCopies::~SideCopies() = default;

void SideCopies::add(const Tensor&, const Tensor&) {
  TS_FAIL("SideCopies::add: this build has no CUDA backend; rebuild with CUDA to copy GPU tensors");
}

void SideCopies::compute_waits() {}
void SideCopies::wait() {}

#endif

}  // namespace tessera
