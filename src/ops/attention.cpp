// Causal self-attention: shape and dtype checks, then dispatch by device.
#include "ops/attention.h"

#include "ops/cpu/attention_cpu.h"
#include "ops/op_checks.h"

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
  const Device device = detail::check_args(op, {{"out", out}, {"lse", lse}, {"qkv", qkv}});
  const AttentionDims d = attention_dims(op, qkv, num_heads);
  detail::check_shape(op, "out", out, {d.B, d.T, d.C});
  detail::check_shape(op, "lse", lse, {d.B, d.NH, d.T});
  switch (device) {
    case Device::cpu:
      cpu::attention_forward(out.f32(), lse.f32(), qkv.f32(), d.B, d.T, d.C, d.NH);
      return;
    case Device::cuda:
      detail::fail_no_cuda_kernel(op);
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int num_heads) {
  const char* op = "attention_backward";
  const Device device =
      detail::check_args(op, {{"dqkv", dqkv}, {"dout", dout}, {"qkv", qkv}, {"out", out}, {"lse", lse}});
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
      detail::fail_no_cuda_kernel(op);
  }
}

}  // namespace tessera
