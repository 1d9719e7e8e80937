// The CUDA device as the rest of Tessera sees it: how many there are (0 without a driver or a
// CUDA build, never an error), the compute stream every op runs on, a caching device allocator
// with current/peak counters, and host<->device copies. Compiles in CPU-only builds, where every
// call that would need a device throws a clear tessera::Error.
#pragma once

#include <cstddef>

#include "core/allocator.h"
#include "core/tensor.h"

#ifdef TESSERA_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

namespace tessera {

// Visible CUDA devices; 0 when the build has no CUDA backend, no driver is loaded, or the driver
// is too old for this runtime. Safe to call anywhere.
int cuda_device_count();
// One line for the user: why there is no device ("" when there is one).
std::string cuda_unavailable_reason();
// The current device's name as the driver reports it ("NVIDIA H100 80GB HBM3"); "" without one.
std::string cuda_device_name();
// Makes device local_rank % cuda_device_count() current, so the ranks of a node spread over its GPUs
// (and share one when there is one). Call before any other CUDA work; no-op without a device.
void cuda_select_device_for_local_rank(int local_rank);
// The device this thread's CUDA calls go to (0 without a device).
int cuda_current_device();

// Device memory from a cache of freed blocks (rounded sizes, reused on exact size class);
// cudaMalloc only on a miss. Out of memory empties the cache and retries once, then throws with the
// bytes asked for, the bytes free and the knobs that lower memory. Zero bytes gives a valid block.
void* device_allocate(size_t bytes);
void device_free(void* ptr, size_t bytes);
// current_bytes/peak_bytes count bytes handed out (not the cache), allocations counts cudaMallocs.
AllocatorStats device_allocator_stats();
// The counters of the allocator serving `device`: host_allocator_stats() or device_allocator_stats().
AllocatorStats allocator_stats(Device device);
void device_allocator_reset_peak();
// Bytes held in the cache, not handed out.
size_t device_allocator_cached_bytes();
// Returns every cached block to the driver.
void device_allocator_release_cached();

// A scratch block from the allocator, returned when the scope ends (kernels queued on the compute
// stream may still use it then: the next owner only touches it later in stream order).
class DeviceScratch {
 public:
  explicit DeviceScratch(size_t bytes) : ptr_(device_allocate(bytes)), bytes_(bytes) {}
  ~DeviceScratch() { device_free(ptr_, bytes_); }
  DeviceScratch(const DeviceScratch&) = delete;
  DeviceScratch& operator=(const DeviceScratch&) = delete;
  template <typename T> T* as() const { return static_cast<T*>(ptr_); }

 private:
  void* ptr_;
  size_t bytes_;
};

// Raw copies; both synchronise the compute stream, so the host side may be reused at once.
void copy_to_device(void* device_dst, const void* host_src, size_t bytes);
void copy_to_host(void* host_dst, const void* device_src, size_t bytes);
// Queued on the compute stream (asynchronous).
void copy_device_to_device(void* device_dst, const void* device_src, size_t bytes);
// `rows` rows of `width` bytes, each `dst_pitch` / `src_pitch` bytes after the last (cudaMemcpy2DAsync).
void copy_device_to_device_2d(void* device_dst, size_t dst_pitch, const void* device_src, size_t src_pitch,
                              size_t width, size_t rows);
// Tensor copies: a new tensor with the same shape and dtype on the other side.
Tensor copy_to_device(const Tensor& host);
Tensor copy_to_host(const Tensor& device);
// `t` itself when it already lives on `device`, else a copy there (synchronous).
Tensor tensor_to(const Tensor& t, Device device);
// Copies all of `src` into `dst` (same element count and dtype, either device on either side).
void copy_tensor(Tensor& dst, const Tensor& src);
// With `dst` and `src` seen as `rows` rows (of dst.numel() / rows and src.numel() / rows elements),
// copies columns [src_col, src_col + cols) of every row of src into [dst_col, dst_col + cols) of the
// same row of dst: same dtype, both on the CPU or both on the GPU (queued on the compute stream).
void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t rows, int64_t cols);
// Copies to the host beside the compute stream's kernels: core/cuda/side_copies.h.
// Page-locks a host tensor's memory while this object lives (cudaHostRegister), so copies between it
// and the GPU run as DMA beside the kernels rather than through the driver's staging buffer (which
// holds up the compute stream). Best effort: where the system refuses, the memory stays pageable.
// Must not outlive the tensor's storage; a no-op without a device.
class PinnedHost {
 public:
  explicit PinnedHost(const Tensor& host);
  ~PinnedHost();
  PinnedHost(const PinnedHost&) = delete;
  PinnedHost& operator=(const PinnedHost&) = delete;
  // Whether the system refused to page-lock the memory (never without a device or for no bytes).
  bool refused() const { return refused_; }

 private:
  [[maybe_unused]] void* ptr_ = nullptr;  // unused in a build without CUDA
  bool refused_ = false;
};
// Zero-fills device memory on the compute stream (asynchronous).
void device_memset_zero(void* ptr, size_t bytes);
// Zero-fills all of `t`, wherever it lives (on the GPU asynchronously, on the compute stream).
void zero_tensor(Tensor& t);
// Waits for everything queued on the compute stream.
void cuda_synchronize();

#ifdef TESSERA_WITH_CUDA
// The stream all ops run on (one per process for now, non-blocking; created on first use).
cudaStream_t cuda_compute_stream();
#endif

}  // namespace tessera
