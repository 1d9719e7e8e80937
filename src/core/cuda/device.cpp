// CUDA device runtime: device count, compute stream, caching allocator, copies. Without the CUDA
// backend (no TESSERA_WITH_CUDA) the count is 0 and everything else throws a one-line Error.
// The cache keeps freed blocks by size class; all ops run on one stream, so a block freed and
// handed out again is only touched in stream order and needs no event.
#include "core/cuda/device.h"

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/cuda_check.h"
#endif

namespace tessera {

#ifdef TESSERA_WITH_CUDA

namespace {

struct DeviceProbe {
  int count = 0;
  std::string reason;
};

const DeviceProbe& probe() {
  static const DeviceProbe result = [] {
    DeviceProbe p;
    const cudaError_t status = cudaGetDeviceCount(&p.count);
    if (status != cudaSuccess) {
      p.count = 0;
      const std::string cuda = "CUDA " + std::to_string(CUDART_VERSION / 1000);
      // cudaErrorInsufficientDriver is also what a machine without any NVIDIA driver reports.
      p.reason = status == cudaErrorInsufficientDriver
                     ? "no usable CUDA device: no NVIDIA driver is loaded, or it is older than " + cuda + " needs"
                     : std::string("no usable CUDA device: ") + cudaGetErrorString(status) +
                           " (is the NVIDIA driver installed and new enough for " + cuda + "?)";
      cudaGetLastError();  // clear the sticky error the probe left
    } else if (p.count == 0) {
      p.reason = "no CUDA device is visible (check CUDA_VISIBLE_DEVICES)";
    }
    return p;
  }();
  return result;
}

void require_device() {
  TS_CHECK(probe().count > 0, probe().reason, "; run on CPU tensors (--device cpu)");
}

// Size classes: 512-byte steps below 1 MiB, 2 MiB steps above, so a freed block fits every later
// request of its class.
size_t size_class(size_t bytes) {
  constexpr size_t kSmall = 512, kLarge = size_t(2) << 20, kLargeFrom = size_t(1) << 20;
  if (bytes == 0) return kSmall;
  if (bytes < kLargeFrom) return (bytes + kSmall - 1) / kSmall * kSmall;
  return (bytes + kLarge - 1) / kLarge * kLarge;
}

struct DeviceCache {
  std::mutex mutex;
  std::unordered_map<size_t, std::vector<void*>> free_blocks;  // size class -> blocks
  size_t cached_bytes = 0;
  AllocatorStats stats;

  void release_all_locked() {
    for (auto& [cls, blocks] : free_blocks)
      for (void* p : blocks) CUDA_CHECK(cudaFree(p));
    free_blocks.clear();
    cached_bytes = 0;
  }
};

DeviceCache& cache() {
  static DeviceCache* c = new DeviceCache;  // never destroyed: frees may come from static destructors
  return *c;
}

[[noreturn]] void fail_out_of_memory(size_t bytes, const DeviceCache& c) {
  size_t free_bytes = 0, total_bytes = 0;
  cudaGetLastError();
  cudaMemGetInfo(&free_bytes, &total_bytes);
  int device = 0;
  cudaGetDevice(&device);
  constexpr double kMiB = 1024.0 * 1024.0;
  TS_FAIL("out of GPU memory on device ", device, ": asked for ", bytes, " bytes (", double(bytes) / kMiB,
          " MiB) with ", free_bytes, " bytes (", double(free_bytes) / kMiB, " MiB) free of ", total_bytes,
          " and ", c.stats.current_bytes, " bytes in use by Tessera; lower --micro-batch-size, turn on activation "
          "recomputation (--recompute), halve the optimizer state (--optimizer-moments bf16), or shard it and the "
          "gradients with --zero (tessera plan memory shows which fits)");
}

}  // namespace

int cuda_device_count() { return probe().count; }

std::string cuda_unavailable_reason() { return probe().reason; }

std::string cuda_device_name() {
  if (cuda_device_count() == 0) return "";
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp props{};
  CUDA_CHECK(cudaGetDeviceProperties(&props, device));
  return props.name;
}

void cuda_select_device_for_local_rank(int local_rank) {
  const int count = cuda_device_count();
  if (count > 0) CUDA_CHECK(cudaSetDevice(local_rank % count));
}

int cuda_current_device() {
  int device = 0;
  if (cuda_device_count() > 0) CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

cudaStream_t cuda_compute_stream() {
  static const cudaStream_t stream = [] {
    require_device();
    cudaStream_t s = nullptr;
    CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    return s;
  }();
  return stream;
}

void* device_allocate(size_t bytes) {
  require_device();
  const size_t cls = size_class(bytes);
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  void* ptr = nullptr;
  auto it = c.free_blocks.find(cls);
  if (it != c.free_blocks.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    c.cached_bytes -= cls;
  } else {
    cudaError_t status = cudaMalloc(&ptr, cls);
    if (status == cudaErrorMemoryAllocation) {  // give the cache back and try once more
      cudaGetLastError();
      cuda_synchronize();
      c.release_all_locked();
      status = cudaMalloc(&ptr, cls);
    }
    if (status == cudaErrorMemoryAllocation) fail_out_of_memory(bytes, c);
    CUDA_CHECK(status);
    c.stats.allocations++;
  }
  c.stats.current_bytes += bytes;
  if (c.stats.current_bytes > c.stats.peak_bytes) c.stats.peak_bytes = c.stats.current_bytes;
  return ptr;
}

void device_free(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  const size_t cls = size_class(bytes);
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.free_blocks[cls].push_back(ptr);
  c.cached_bytes += cls;
  c.stats.current_bytes -= bytes;
}

AllocatorStats device_allocator_stats() {
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.stats;
}

void device_allocator_reset_peak() {
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.stats.peak_bytes = c.stats.current_bytes;
}

size_t device_allocator_cached_bytes() {
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.cached_bytes;
}

void device_allocator_release_cached() {
  if (cuda_device_count() == 0) return;
  cuda_synchronize();
  DeviceCache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  c.release_all_locked();
}

void copy_to_device(void* device_dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = cuda_compute_stream();
  CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_to_host(void* host_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  const cudaStream_t stream = cuda_compute_stream();
  CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream));
  CUDA_CHECK(cudaStreamSynchronize(stream));
}

void copy_device_to_device(void* device_dst, const void* device_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(device_dst, device_src, bytes, cudaMemcpyDeviceToDevice, cuda_compute_stream()));
}

void copy_device_to_device_2d(void* device_dst, size_t dst_pitch, const void* device_src, size_t src_pitch,
                              size_t width, size_t rows) {
  if (width == 0 || rows == 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(device_dst, dst_pitch, device_src, src_pitch, width, rows, cudaMemcpyDeviceToDevice,
                               cuda_compute_stream()));
}

PinnedHost::PinnedHost(const Tensor& host) {
  TS_CHECK(host.device() == Device::cpu, "PinnedHost: the tensor lives on the GPU; only host memory is page-locked");
  if (cuda_device_count() == 0 || host.bytes() == 0) return;
  // Best effort: where the system refuses to lock this much memory, copies stay correct, only slower.
  if (cudaHostRegister(host.raw_data(), host.bytes(), cudaHostRegisterDefault) == cudaSuccess) {
    ptr_ = host.raw_data();
  } else {
    cudaGetLastError();  // clears the error, which is not this program's to report
    refused_ = true;
  }
}

PinnedHost::~PinnedHost() {
  if (ptr_ != nullptr) cudaHostUnregister(ptr_);
}

void device_memset_zero(void* ptr, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemsetAsync(ptr, 0, bytes, cuda_compute_stream()));
}

void cuda_synchronize() { CUDA_CHECK(cudaStreamSynchronize(cuda_compute_stream())); }

#else  // no CUDA backend in this build

namespace {
[[noreturn]] void fail_no_backend() {
  TS_FAIL("this build has no CUDA backend (configured with TESSERA_CUDA=OFF or without nvcc); run on CPU tensors "
          "(--device cpu)");
}
}  // namespace

int cuda_device_count() { return 0; }
std::string cuda_unavailable_reason() { return "this build has no CUDA backend"; }
std::string cuda_device_name() { return ""; }
void cuda_select_device_for_local_rank(int) {}
int cuda_current_device() { return 0; }
void* device_allocate(size_t) { fail_no_backend(); }
void device_free(void*, size_t) {}
AllocatorStats device_allocator_stats() { return {}; }
void device_allocator_reset_peak() {}
size_t device_allocator_cached_bytes() { return 0; }
void device_allocator_release_cached() {}
void copy_to_device(void*, const void*, size_t) { fail_no_backend(); }
void copy_to_host(void*, const void*, size_t) { fail_no_backend(); }
void copy_device_to_device(void*, const void*, size_t) { fail_no_backend(); }
void copy_device_to_device_2d(void*, size_t, const void*, size_t, size_t, size_t) { fail_no_backend(); }
PinnedHost::PinnedHost(const Tensor&) {}
PinnedHost::~PinnedHost() = default;
void device_memset_zero(void*, size_t) { fail_no_backend(); }
void cuda_synchronize() {}

#endif

Tensor copy_to_device(const Tensor& host) {
  TS_CHECK(host.device() == Device::cpu, "copy_to_device: the source tensor already lives on the GPU");
  Tensor t = Tensor::zeros(host.shape(), host.dtype(), Device::cuda);
  copy_to_device(t.raw_data(), host.raw_data(), host.bytes());
  return t;
}

Tensor copy_to_host(const Tensor& device) {
  TS_CHECK(device.device() == Device::cuda, "copy_to_host: the source tensor already lives on the CPU");
  Tensor t = Tensor::zeros(device.shape(), device.dtype(), Device::cpu);
  copy_to_host(t.raw_data(), device.raw_data(), device.bytes());
  return t;
}

AllocatorStats allocator_stats(Device device) {
  return device == Device::cuda ? device_allocator_stats() : host_allocator_stats();
}

void zero_tensor(Tensor& t) {
  if (t.device() == Device::cpu) {
    std::memset(t.raw_data(), 0, t.bytes());
    return;
  }
  device_memset_zero(t.raw_data(), t.bytes());
}

Tensor tensor_to(const Tensor& t, Device device) {
  if (t.device() == device) return t;
  return device == Device::cuda ? copy_to_device(t) : copy_to_host(t);
}

void copy_tensor(Tensor& dst, const Tensor& src) {
  TS_CHECK(dst.numel() == src.numel() && dst.dtype() == src.dtype(), "copy_tensor: ", shape_string(src.shape()),
           " ", dtype_name(src.dtype()), " into ", shape_string(dst.shape()), " ", dtype_name(dst.dtype()));
  const bool to_gpu = dst.device() == Device::cuda, from_gpu = src.device() == Device::cuda;
  if (!to_gpu && !from_gpu) {
    if (src.bytes() > 0) std::memcpy(dst.raw_data(), src.raw_data(), src.bytes());
  } else if (to_gpu && !from_gpu) {
    copy_to_device(dst.raw_data(), src.raw_data(), src.bytes());
  } else if (!to_gpu) {
    copy_to_host(dst.raw_data(), src.raw_data(), src.bytes());
  } else {
    copy_device_to_device(dst.raw_data(), src.raw_data(), src.bytes());
  }
}

void copy_columns(Tensor& dst, int64_t dst_col, const Tensor& src, int64_t src_col, int64_t rows, int64_t cols) {
  TS_CHECK(rows > 0 && dst.numel() % rows == 0 && src.numel() % rows == 0 && dst.dtype() == src.dtype() &&
               dst.device() == src.device(),
           "copy_columns: ", rows, " rows of ", shape_string(src.shape()), " ", dtype_name(src.dtype()), " into ",
           shape_string(dst.shape()), " ", dtype_name(dst.dtype()), " on one device");
  const int64_t dst_width = dst.numel() / rows, src_width = src.numel() / rows;
  TS_CHECK(cols >= 0 && dst_col >= 0 && src_col >= 0 && dst_col + cols <= dst_width && src_col + cols <= src_width,
           "copy_columns: columns [", src_col, ", ", src_col + cols, ") of ", src_width, " into [", dst_col, ", ",
           dst_col + cols, ") of ", dst_width);
  const size_t element = dtype_size(dst.dtype()), width = size_t(cols) * element;
  char* to = static_cast<char*>(dst.raw_data()) + size_t(dst_col) * element;
  const char* from = static_cast<const char*>(src.raw_data()) + size_t(src_col) * element;
  const size_t dst_pitch = size_t(dst_width) * element, src_pitch = size_t(src_width) * element;
  if (dst.device() == Device::cuda) return copy_device_to_device_2d(to, dst_pitch, from, src_pitch, width, size_t(rows));
  if (width == 0) return;
  for (int64_t r = 0; r < rows; ++r) std::memcpy(to + size_t(r) * dst_pitch, from + size_t(r) * src_pitch, width);
}

}  // namespace tessera
