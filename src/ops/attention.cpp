// Causal self-attention: shape and dtype checks, then dispatch by device and, on the GPU, by storage
// type (f32, bf16) of qkv, out, dout and dqkv; lse is f32 on every device. bf16 runs on the tensor
// cores (attention_tc) for the head sizes and alignments they cover, else on the CUDA-core kernels.
#include "ops/attention.h"

#include "ops/cpu/attention_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_tc_cuda.h"
#include "ops/cuda/bf16_tensor.h"
#endif

namespace tessera {
namespace {

struct AttentionDims {
  int64_t B, T, C, NH;
};

// qkv (B,T,3C) with C split evenly over num_heads.
AttentionDims attention_dims(const char* op, const Tensor& qkv, int num_heads) {
  TS_CHECK(qkv.ndim() == 3 && qkv.size(2) % 3 == 0, op, ": qkv must be (B,T,3C), got ",
           shape_string(qkv.shape()));
  const int64_t C = qkv.size(2) / 3;
  TS_CHECK(num_heads > 0 && C > 0 && C % num_heads == 0, op, ": ", num_heads,
           " heads do not split the C = ", C, " channels of qkv ", shape_string(qkv.shape()), " evenly");
  return {qkv.size(0), qkv.size(1), C, num_heads};
}

}  // namespace

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads) {
  const char* op = "attention_forward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype}, {"lse", lse}, {"qkv", qkv, dtype}});
  const AttentionDims d = attention_dims(op, qkv, num_heads);
  detail::check_shape(op, "out", out, {d.B, d.T, d.C});
  detail::check_shape(op, "lse", lse, {d.B, d.NH, d.T});
  switch (device) {
    case Device::cpu:
      cpu::attention_forward(out.f32(), lse.f32(), qkv.f32(), d.B, d.T, d.C, d.NH);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      if (dtype == DType::bf16 && cuda::attention_tc_supported(d.C / d.NH, {qkv.raw_data(), out.raw_data()}))
        cuda::attention_tc_forward(cuda::bf16_data(out), lse.f32(), cuda::bf16_data(qkv), d.B, d.T, d.C, d.NH,
                                   cuda_compute_stream());
      else if (dtype == DType::bf16)
        cuda::attention_forward(cuda::bf16_data(out), lse.f32(), cuda::bf16_data(qkv), d.B, d.T, d.C, d.NH,
                                cuda_compute_stream());
      else
        cuda::attention_forward(out.f32(), lse.f32(), qkv.f32(), d.B, d.T, d.C, d.NH, cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int num_heads) {
  const char* op = "attention_backward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device = detail::check_args(
      op, {{"dqkv", dqkv, dtype}, {"dout", dout, dtype}, {"qkv", qkv, dtype}, {"out", out, dtype}, {"lse", lse}});
  const AttentionDims d = attention_dims(op, qkv, num_heads);
  detail::check_shape(op, "dqkv", dqkv, qkv.shape());
  detail::check_shape(op, "dout", dout, {d.B, d.T, d.C});
  detail::check_shape(op, "out", out, {d.B, d.T, d.C});
  detail::check_shape(op, "lse", lse, {d.B, d.NH, d.T});
  switch (device) {
    case Device::cpu:
      cpu::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d.B, d.T, d.C, d.NH);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      if (dtype == DType::bf16 && cuda::attention_tc_supported(d.C / d.NH, {dqkv.raw_data(), dout.raw_data(),
                                                                             qkv.raw_data(), out.raw_data()}))
        cuda::attention_tc_backward(cuda::bf16_data(dqkv), cuda::bf16_data(dout), cuda::bf16_data(qkv),
                                    cuda::bf16_data(out), lse.f32(), d.B, d.T, d.C, d.NH, cuda_compute_stream());
      else if (dtype == DType::bf16)
        cuda::attention_backward(cuda::bf16_data(dqkv), cuda::bf16_data(dout), cuda::bf16_data(qkv),
                                 cuda::bf16_data(out), lse.f32(), d.B, d.T, d.C, d.NH, cuda_compute_stream());
      else
        cuda::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d.B, d.T, d.C, d.NH,
                                 cuda_compute_stream());
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
