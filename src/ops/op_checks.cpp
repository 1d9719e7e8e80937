// Argument checks shared by the op entry points.
#include "ops/op_checks.h"

#include <cmath>

#include "core/ignored_target.h"

namespace tessera::detail {

Device check_args(const char* op, std::initializer_list<Arg> args) {
  Device device = Device::cpu;
  bool first = true;
  for (const Arg& a : args) {
    if (a.optional && !a.tensor.defined()) continue;
    TS_CHECK(a.tensor.defined(), op, ": ", a.name, " is undefined");
    TS_CHECK(a.tensor.dtype() == a.dtype, op, ": ", a.name, " must be ", dtype_name(a.dtype), ", got ",
             dtype_name(a.tensor.dtype()));
    TS_CHECK(first || a.tensor.device() == device, op, ": ", a.name,
             " lives on another device than the arguments before it; put all of them on one device");
    device = a.tensor.device();
    first = false;
  }
  return device;
}

void check_shape(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  TS_CHECK(t.shape() == shape, op, ": ", name, " has shape ", shape_string(t.shape()), " but must be ",
           shape_string(shape));
}

Shape leading_shape(const Tensor& t) {
  if (t.ndim() == 0) return {};
  return Shape(t.shape().begin(), t.shape().end() - 1);
}

void check_float_dtype(const char* op, const char* name, const Tensor& t) {
  const bool half = t.dtype() == DType::bf16 || t.dtype() == DType::f16;
  TS_CHECK(t.dtype() == DType::f32 || (half && t.device() == Device::cuda), op, ": ", name, " is ",
           dtype_name(t.dtype()), t.device() == Device::cpu ? " on the CPU" : " on the GPU",
           "; ops compute in f32 on the CPU and in f32, bf16 or f16 on the GPU");
}

void check_targets(const char* op, const Tensor& targets, int64_t vocab_size) {
  const int32_t* ids = targets.data<int32_t>();
  for (int64_t n = 0; n < targets.numel(); n++)
    TS_CHECK((ids[n] >= 0 && ids[n] < vocab_size) || ids[n] == kIgnoredTarget, op, ": target ", ids[n], " of row ",
             n, " is outside the vocabulary [0, ", vocab_size, ") and is not ", kIgnoredTarget, " (an ignored target)");
}

void check_softcap(const char* op, float softcap, Device device) {
  TS_CHECK(std::isfinite(softcap) && softcap >= 0.0f, op, ": softcap is ", softcap,
           ", expected 0 (not capped) or a positive cap");
  TS_CHECK(softcap == 0.0f || device == Device::cpu, op, ": soft-capping (Gemma 2's attention scores and ",
           "logits) has no GPU kernel yet; run this model with --device cpu");
}

void fail_no_cuda_kernel(const char* op) {
  TS_FAIL(op, ": this build has no CUDA kernel for this op yet; run it on CPU tensors");
}

}  // namespace tessera::detail
