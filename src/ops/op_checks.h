// Argument checks shared by the op entry points: dtype, shape and device rules whose messages name
// the op and the argument, and the one failure an op raises on a device it has no kernel for yet.
#pragma once

#include <initializer_list>

#include "core/tensor.h"

namespace tessera::detail {

struct Arg {
  const char* name;
  const Tensor& tensor;
  DType dtype = DType::f32;
  bool optional = false;  // an undefined optional argument is skipped
};

// Each argument is defined (unless optional) and holds its dtype, and all defined arguments live
// on one device, which is returned.
Device check_args(const char* op, std::initializer_list<Arg> args);
// t has exactly `shape`.
void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape);
// All dimensions of t but the last: the rows of a (..., C) tensor.
Shape leading_shape(const Tensor& t);
// The compute dtype of an op's activations: f32 on any device, bf16 or f16 on the GPU only (CPU kernels
// are the fp32 reference). Throws naming the op and the argument otherwise.
void check_float_dtype(const char* op, const char* name, const Tensor& t);
// Every class id in targets (i32, on the host) lies in the vocabulary [0, vocab_size) or is
// kIgnoredTarget.
void check_targets(const char* op, const Tensor& targets, int64_t vocab_size);
// A soft cap (Gemma 2's on attention scores and logits, x -> softcap tanh(x / softcap)) is 0 (none) or
// finite and positive, and 0 on the GPU, where no kernel caps yet.
void check_softcap(const char* op, float softcap, Device device);
// Raised by an op's Device::cuda branch until its CUDA kernel lands.
[[noreturn]] void fail_no_cuda_kernel(const char* op);

}  // namespace tessera::detail
