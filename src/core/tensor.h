// Tensor: a shape, an element type and a device over a shared storage, possibly a view into a
// larger one (parameters and gradients are views into one flat buffer each, so sharding a model
// is an offset). Tensors are row-major and contiguous; a view never outlives nothing: it holds
// its storage alive.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/error.h"

namespace tessera {

enum class Device { cpu, cuda };
// "cpu" or "cuda", as the --device flag and messages spell them.
constexpr const char* device_name(Device d) { return d == Device::cuda ? "cuda" : "cpu"; }

using Shape = std::vector<int64_t>;

int64_t shape_numel(const Shape& shape);
std::string shape_string(const Shape& shape);

// Owns one allocation on one device: host memory, or device memory from the caching allocator
// (core/cuda/device.h) on a build with the CUDA backend. Both start zero-filled.
class Storage {
 public:
  Storage(size_t bytes, Device device);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device device_;
};

class Tensor {
 public:
  Tensor() = default;
  // A new zero-filled tensor.
  static Tensor zeros(Shape shape, DType dtype = DType::f32, Device device = Device::cpu);

  // A view of `shape` starting `element_offset` elements into this tensor's storage region.
  Tensor view(int64_t element_offset, Shape shape) const;
  // The same elements under another shape with the same element count.
  Tensor reshape(Shape shape) const;

  template <typename T> T* data() {
    check_dtype(dtype_of<T>());
    return reinterpret_cast<T*>(raw());
  }
  template <typename T> const T* data() const {
    check_dtype(dtype_of<T>());
    return reinterpret_cast<const T*>(raw());
  }
  // The first byte of this tensor, untyped (for copies and memset); on Device::cuda a device pointer.
  void* raw_data() const { return raw(); }
  float* f32() { return data<float>(); }
  const float* f32() const { return data<float>(); }

  const Shape& shape() const { return shape_; }
  int64_t size(int dim) const;
  int ndim() const { return int(shape_.size()); }
  int64_t numel() const { return shape_numel(shape_); }
  size_t bytes() const { return size_t(numel()) * dtype_size(dtype_); }
  DType dtype() const { return dtype_; }
  Device device() const { return storage_ ? storage_->device() : Device::cpu; }
  bool defined() const { return storage_ != nullptr; }

 private:
  void check_dtype(DType expected) const;
  char* raw() const { return static_cast<char*>(storage_->data()) + byte_offset_; }

  std::shared_ptr<Storage> storage_;
  size_t byte_offset_ = 0;
  Shape shape_;
  DType dtype_ = DType::f32;
};

}  // namespace tessera
