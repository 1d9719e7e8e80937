// The attention-block op: shape, position and dtype checks, then the CPU kernels or, on the GPU, the
// kernels of qkv's storage type (the positions copied to the device for the call).
#include "ops/attention_block.h"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/cuda/device.h"
#include "ops/attention.h"
#include "ops/cpu/attention_block_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/attention_block_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

#ifdef TESSERA_WITH_CUDA
// The positions as a device i32 tensor, for the CUDA kernels.
Tensor device_positions(std::span<const int32_t> positions) {
  Tensor host = Tensor::zeros({int64_t(positions.size())}, DType::i32);
  std::copy(positions.begin(), positions.end(), host.data<int32_t>());
  return copy_to_device(host);
}

cuda::BlockShape device_shape(const cpu::AttentionBlock& a, const Tensor& q_pos, const Tensor& kv_pos,
                              const Tensor& doc_starts) {
  return {a.B,
          a.Tq,
          a.Tk,
          a.NH,
          a.NKV,
          a.HS,
          q_pos.data<int32_t>(),
          kv_pos.data<int32_t>(),
          doc_starts.defined() ? doc_starts.data<int32_t>() : nullptr};
}
#else
[[noreturn]] void no_cuda(const char* op) { detail::fail_no_cuda_kernel(op); }
#endif

void check_positions(const char* op, const char* name, std::span<const int32_t> positions, int64_t T) {
  TS_CHECK(int64_t(positions.size()) == T, op, ": ", name, " holds ", positions.size(), " positions for ", T,
           " tokens");
  TS_CHECK(std::adjacent_find(positions.begin(), positions.end(), std::greater_equal<int32_t>()) == positions.end(),
           op, ": ", name, " positions must be strictly increasing (tokens in sequence order)");
}

// The dimensions of a (query block, kv block) pair; kv (B, Tk, 2*NKV*HS) against qkv's B, NKV and HS;
// the document starts (B, Tq) against the query positions; the soft cap against the device.
cpu::AttentionBlock block_dims(const char* op, const Tensor& qkv, const Tensor& kv, BlockPositions positions,
                               int num_heads, int num_kv_heads, const Tensor& doc_starts, float softcap) {
  const detail::AttentionDims d = detail::attention_dims(op, qkv, num_heads, num_kv_heads);
  const int64_t HS = d.head_size();
  TS_CHECK(kv.ndim() == 3 && kv.size(0) == d.B && kv.size(2) == 2 * d.NKV * HS, op, ": kv has shape ",
           shape_string(kv.shape()), " but must be (", d.B, ", Tk, ", 2 * d.NKV * HS,
           "): the k and v heads of the key block's tokens (attention_block_kv)");
  check_positions(op, "positions.q", positions.q, d.T);
  check_positions(op, "positions.kv", positions.kv, kv.size(1));
  detail::check_doc_starts(op, doc_starts, d.B, d.T, positions.q);
  detail::check_softcap(op, softcap, qkv.device());
  return {d.B,
          d.T,
          kv.size(1),
          d.NH,
          d.NKV,
          HS,
          positions.q.data(),
          positions.kv.data(),
          doc_starts.defined() && doc_starts.device() == Device::cpu ? doc_starts.data<int32_t>() : nullptr,
          softcap};
}

// rows rows of `width` floats, from rows `from_ld` floats apart to rows `to_ld` floats apart.
void copy_rows(float* to, int64_t to_ld, const float* from, int64_t from_ld, int64_t rows, int64_t width) {
  for (int64_t r = 0; r < rows; r++) std::memcpy(to + r * to_ld, from + r * from_ld, size_t(width) * sizeof(float));
}

}  // namespace

void attention_block_forward(Tensor& out, Tensor& lse, const Tensor& qkv, const Tensor& kv,
                             BlockPositions positions, int num_heads, int num_kv_heads, bool first,
                             const Tensor& doc_starts, float softcap) {
  const char* op = "attention_block_forward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device = detail::check_args(op, {{"out", out, dtype},
                                                {"lse", lse},
                                                {"qkv", qkv, dtype},
                                                {"kv", kv},
                                                {"doc_starts", doc_starts, DType::i32, true}});
  const cpu::AttentionBlock a = block_dims(op, qkv, kv, positions, num_heads, num_kv_heads, doc_starts, softcap);
  detail::check_shape(op, "out", out, {a.B, a.Tq, a.NH * a.HS});
  detail::check_shape(op, "lse", lse, {a.B, a.NH, a.Tq});
  if (device == Device::cpu) return cpu::attention_block_forward(out.f32(), lse.f32(), qkv.f32(), kv.f32(), a, first);
#ifdef TESSERA_WITH_CUDA
  const Tensor q_pos = device_positions(positions.q), kv_pos = device_positions(positions.kv);
  cuda::with_storage_type(dtype, [&]<typename T>(T) {
    cuda::attention_block_forward(cuda::typed_data<T>(out), lse.f32(), cuda::typed_data<T>(qkv), kv.f32(),
                                  device_shape(a, q_pos, kv_pos, doc_starts), first, cuda_compute_stream());
  });
#else
  no_cuda(op);
#endif
}

void attention_block_delta(Tensor& delta, const Tensor& dout, const Tensor& out, int num_heads) {
  const char* op = "attention_block_delta";
  detail::check_float_dtype(op, "out", out);
  const DType dtype = out.dtype();
  const Device device = detail::check_args(op, {{"delta", delta}, {"dout", dout, dtype}, {"out", out, dtype}});
  TS_CHECK(num_heads > 0 && out.ndim() == 3 && out.size(2) % num_heads == 0, op, ": out ",
           shape_string(out.shape()), " must be (B, T, num_heads * HS) for num_heads = ", num_heads);
  const int64_t B = out.size(0), T = out.size(1), NH = num_heads, HS = out.size(2) / NH;
  detail::check_shape(op, "dout", dout, out.shape());
  detail::check_shape(op, "delta", delta, {B, NH, T});
  if (device == Device::cpu) return cpu::attention_block_delta(delta.f32(), dout.f32(), out.f32(), B, T, NH, HS);
#ifdef TESSERA_WITH_CUDA
  cuda::with_storage_type(dtype, [&]<typename S>(S) {
    cuda::attention_block_delta(delta.f32(), cuda::typed_data<S>(dout), cuda::typed_data<S>(out), B, T, NH, HS,
                                cuda_compute_stream());
  });
#else
  no_cuda(op);
#endif
}

void attention_block_backward(Tensor& dqkv, Tensor& dkv, const Tensor& dout, const Tensor& qkv, const Tensor& kv,
                              const Tensor& lse, const Tensor& delta, BlockPositions positions, int num_heads,
                              int num_kv_heads, const Tensor& doc_starts, float softcap) {
  const char* op = "attention_block_backward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device =
      detail::check_args(op, {{"dqkv", dqkv, dtype}, {"dkv", dkv}, {"dout", dout, dtype}, {"qkv", qkv, dtype},
                              {"kv", kv}, {"lse", lse}, {"delta", delta}, {"doc_starts", doc_starts, DType::i32, true}});
  const cpu::AttentionBlock a = block_dims(op, qkv, kv, positions, num_heads, num_kv_heads, doc_starts, softcap);
  detail::check_shape(op, "dqkv", dqkv, qkv.shape());
  detail::check_shape(op, "dkv", dkv, kv.shape());
  detail::check_shape(op, "dout", dout, {a.B, a.Tq, a.NH * a.HS});
  detail::check_shape(op, "lse", lse, {a.B, a.NH, a.Tq});
  detail::check_shape(op, "delta", delta, {a.B, a.NH, a.Tq});
  if (device == Device::cpu)
    return cpu::attention_block_backward(dqkv.f32(), dkv.f32(), dout.f32(), qkv.f32(), kv.f32(), lse.f32(),
                                         delta.f32(), a);
#ifdef TESSERA_WITH_CUDA
  const Tensor q_pos = device_positions(positions.q), kv_pos = device_positions(positions.kv);
  cuda::with_storage_type(dtype, [&]<typename T>(T) {
    cuda::attention_block_backward(cuda::typed_data<T>(dqkv), dkv.f32(), cuda::typed_data<T>(dout),
                                   cuda::typed_data<T>(qkv), kv.f32(), lse.f32(), delta.f32(),
                                   device_shape(a, q_pos, kv_pos, doc_starts), cuda_compute_stream());
  });
#else
  no_cuda(op);
#endif
}

Tensor attention_block_kv(const Tensor& qkv, int num_heads, int num_kv_heads) {
  const char* op = "attention_block_kv";
  detail::check_float_dtype(op, "qkv", qkv);
  const detail::AttentionDims d = detail::attention_dims(op, qkv, num_heads, num_kv_heads);
  Tensor kv = Tensor::zeros({d.B, d.T, 2 * d.NKV * d.head_size()}, DType::f32, qkv.device());
  if (qkv.device() == Device::cpu) {
    copy_rows(kv.f32(), kv.size(2), qkv.f32() + d.C, qkv.size(2), d.B * d.T, kv.size(2));
    return kv;
  }
#ifdef TESSERA_WITH_CUDA
  cuda::with_storage_type(qkv.dtype(), [&]<typename T>(T) {
    cuda::attention_block_kv(kv.f32(), cuda::typed_data<T>(qkv), d.B * d.T, d.NH, d.NKV, d.head_size(),
                             cuda_compute_stream());
  });
#else
  no_cuda(op);
#endif
  return kv;
}

void attention_block_kv_to_qkv(Tensor& dqkv, const Tensor& dkv, int num_heads, int num_kv_heads) {
  const char* op = "attention_block_kv_to_qkv";
  detail::check_float_dtype(op, "dqkv", dqkv);
  const Device device = detail::check_args(op, {{"dqkv", dqkv, dqkv.dtype()}, {"dkv", dkv}});
  const detail::AttentionDims d = detail::attention_dims(op, dqkv, num_heads, num_kv_heads);
  detail::check_shape(op, "dkv", dkv, {d.B, d.T, 2 * d.NKV * d.head_size()});
  if (device == Device::cpu)
    return copy_rows(dqkv.f32() + d.C, dqkv.size(2), dkv.f32(), dkv.size(2), d.B * d.T, dkv.size(2));
#ifdef TESSERA_WITH_CUDA
  cuda::with_storage_type(dqkv.dtype(), [&]<typename T>(T) {
    cuda::attention_block_kv_to_qkv(cuda::typed_data<T>(dqkv), dkv.f32(), d.B * d.T, d.NH, d.NKV, d.head_size(),
                                    cuda_compute_stream());
  });
#else
  no_cuda(op);
#endif
}

}  // namespace tessera
