// Tensor storage and views.
#include "core/tensor.h"

#include "core/allocator.h"
#include "core/cuda/device.h"

namespace tessera {

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string shape_string(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + ")";
}

Storage::Storage(size_t bytes, Device device) : bytes_(bytes), device_(device) {
  if (device == Device::cpu) {
    data_ = host_allocate(bytes);
    return;
  }
#ifdef TESSERA_WITH_CUDA
  data_ = device_allocate(bytes);
  device_memset_zero(data_, bytes);
#else
  TS_FAIL("CUDA tensors need a build with the CUDA backend (configure with -DTESSERA_CUDA=ON); run on CPU tensors");
#endif
}

Storage::~Storage() {
  if (device_ == Device::cpu)
    host_free(data_, bytes_);
  else
    device_free(data_, bytes_);
}

Tensor Tensor::zeros(Shape shape, DType dtype, Device device) {
  for (int64_t d : shape) TS_CHECK(d >= 0, "tensor shape ", shape_string(shape), " has a negative size");
  Tensor t;
  t.storage_ = std::make_shared<Storage>(size_t(shape_numel(shape)) * dtype_size(dtype), device);
  t.shape_ = std::move(shape);
  t.dtype_ = dtype;
  return t;
}

Tensor Tensor::view(int64_t element_offset, Shape shape) const {
  TS_CHECK(defined(), "view of an undefined tensor");
  size_t begin = byte_offset_ + size_t(element_offset) * dtype_size(dtype_);
  size_t end = begin + size_t(shape_numel(shape)) * dtype_size(dtype_);
  TS_CHECK(element_offset >= 0 && end <= storage_->bytes(), "view ", shape_string(shape), " at element ",
           element_offset, " runs past its storage of ", storage_->bytes(), " bytes");
  Tensor t = *this;
  t.byte_offset_ = begin;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::reshape(Shape shape) const {
  TS_CHECK(shape_numel(shape) == numel(), "cannot reshape ", shape_string(shape_), " to ", shape_string(shape));
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

int64_t Tensor::size(int dim) const {
  if (dim < 0) dim += ndim();
  TS_CHECK(dim >= 0 && dim < ndim(), "dimension ", dim, " out of range for shape ", shape_string(shape_));
  return shape_[size_t(dim)];
}

void Tensor::check_dtype(DType expected) const {
  TS_CHECK(defined(), "access to an undefined tensor");
  TS_CHECK(dtype_ == expected, "tensor holds ", dtype_name(dtype_), " but was read as ", dtype_name(expected));
}

}  // namespace tessera
