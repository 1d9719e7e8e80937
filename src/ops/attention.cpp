// Causal self-attention: shape and dtype checks, then dispatch by device and, on the GPU, by storage
// type (f32, bf16, f16) of qkv, out, dout and dqkv; lse is f32 on every device. bf16 and f16 run on
// cuDNN's fused attention when the kernel choice allows it, cuDNN covers the case and (auto) its
// backward's workspace stays within the limit, else on the tensor cores (attention_tc) for the head
// sizes and alignments they cover, else on the CUDA-core kernels. Both
// devices cover grouped-query attention (num_kv_heads < num_heads) and document masks (not cuDNN).
#include "ops/attention.h"

#include <atomic>
#include <string>
#include <type_traits>

#include "ops/cpu/attention_cpu.h"
#include "ops/deterministic_kernels.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/attention_cuda.h"
#include "ops/cuda/attention_tc_cuda.h"
#include "ops/cuda/storage_types.h"
#endif
#ifdef TESSERA_WITH_CUDNN
#include "ops/cuda/attention_cudnn_cuda.h"
#endif

namespace tessera {
namespace {

std::atomic<AttentionKernel> chosen_attention_kernel{AttentionKernel::automatic};

#ifdef TESSERA_WITH_CUDNN
// Whether cuDNN runs a 16-bit GPU attention call of these dims on these tensors (an empty list: any
// 16-byte aligned ones). Both directions decide alike, so a backward runs on the forward's kernels.
bool cudnn_takes(bool document_mask, const detail::AttentionDims& d, std::initializer_list<const void*> pointers) {
  const AttentionKernel kernel = attention_kernel();
  if (kernel == AttentionKernel::tessera || document_mask || !cuda::attention_cudnn_supported(d.head_size(), pointers))
    return false;
  if (kernel == AttentionKernel::automatic && !cuda::attention_cudnn_release_usable()) return false;
  return cudnn_attention_allowed(
      kernel, cudnn_attention_workspace_bytes(d.B, d.NH, d.T, d.head_size(), deterministic_kernels()));
}
#endif

}  // namespace

void set_attention_kernel(AttentionKernel kernel) {
#ifndef TESSERA_WITH_CUDNN
  TS_CHECK(kernel != AttentionKernel::cudnn,
           "attention kernel 'cudnn': this build of Tessera has no cuDNN (CMake found no cudnn.h and libcudnn beside "
           "the CUDA toolkit, or the CUDA backend is off); rebuild with cuDNN 9 installed, or use 'tessera'");
#endif
  chosen_attention_kernel = kernel;
}

AttentionKernel attention_kernel() { return chosen_attention_kernel; }

AttentionKernel parse_attention_kernel(std::string_view name) {
  for (const AttentionKernel kernel : {AttentionKernel::automatic, AttentionKernel::tessera, AttentionKernel::cudnn})
    if (name == attention_kernel_name(kernel)) return kernel;
  TS_FAIL("unknown attention kernel '", std::string(name), "': valid kernels are auto, tessera, cudnn");
}

int64_t cudnn_attention_workspace_bytes(int64_t B, int64_t NH, int64_t T, int64_t HS, bool deterministic) {
  const int64_t padded = (T + 63) / 64 * 64;
  return deterministic ? B * NH * padded * padded * 2 : B * NH * T * HS * int64_t(sizeof(float));
}

bool cudnn_attention_allowed(AttentionKernel kernel, int64_t workspace) {
  return kernel == AttentionKernel::cudnn ||
         (kernel == AttentionKernel::automatic && workspace <= kCudnnAttentionWorkspaceLimit);
}

AttentionKernel attention_kernel_for(int64_t B, int64_t NH, int64_t T, int64_t HS, bool document_mask) {
#ifdef TESSERA_WITH_CUDNN
  if (cudnn_takes(document_mask, detail::AttentionDims{B, T, NH * HS, NH, NH}, {})) return AttentionKernel::cudnn;
#endif
  return AttentionKernel::tessera;
}

std::string_view attention_kernel_name(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::automatic: return "auto";
    case AttentionKernel::tessera: return "tessera";
    case AttentionKernel::cudnn: return "cudnn";
  }
  return "?";
}

namespace detail {

AttentionDims attention_dims(const char* op, const Tensor& qkv, int num_heads, int num_kv_heads) {
  TS_CHECK(num_heads > 0, op, ": num_heads = ", num_heads, " must be positive");
  TS_CHECK(num_kv_heads >= 0, op, ": num_kv_heads = ", num_kv_heads,
           " must be positive (or 0 for num_heads, i.e. multi-head attention)");
  const int64_t NH = num_heads, NKV = num_kv_heads == 0 ? num_heads : num_kv_heads;
  TS_CHECK(NH % NKV == 0, op, ": num_kv_heads = ", NKV, " must divide num_heads = ", NH,
           " (each kv head serves num_heads / num_kv_heads query heads); pick a divisor of num_heads");
  TS_CHECK(qkv.ndim() == 3, op, ": qkv must be (B, T, (num_heads + 2*num_kv_heads) * HS), got ",
           shape_string(qkv.shape()));
  const int64_t heads = NH + 2 * NKV, width = qkv.size(2);
  TS_CHECK(width > 0 && width % heads == 0, op, ": the last dim of qkv ", shape_string(qkv.shape()),
           " must be (num_heads + 2*num_kv_heads) * HS = ", heads, " * HS for num_heads = ", NH,
           " and num_kv_heads = ", NKV, " (q, k and v heads of HS channels)");
  return {qkv.size(0), qkv.size(1), NH * (width / heads), NH, NKV};
}

void check_doc_starts(const char* op, const Tensor& doc_starts, int64_t B, int64_t T,
                      std::span<const int32_t> positions) {
  if (!doc_starts.defined()) return;
  check_shape(op, "doc_starts", doc_starts, {B, T});
  if (doc_starts.device() != Device::cpu) return;
  // Each token's first visible key lies between the entry before it and the token itself (documents
  // begin, windows slide; a context-parallel share skips other ranks' chunks).
  const int32_t* starts = doc_starts.data<int32_t>();
  for (int64_t b = 0; b < B; b++)
    for (int64_t t = 0; t < T; t++) {
      const int32_t s = starts[b * T + t], at = positions.empty() ? int32_t(t) : positions[size_t(t)];
      const int32_t before = t == 0 ? 0 : starts[b * T + t - 1];
      TS_CHECK(s >= before && s <= at, op, ": doc_starts[", b, ", ", t, "] = ", s,
               " is not a first visible key: it must lie between the entry before it (", before,
               ") and the token's own position (", at, ")");
    }
}

}  // namespace detail

void attention_forward(Tensor& out, Tensor& lse, const Tensor& qkv, int num_heads, int num_kv_heads,
                       const Tensor& doc_starts, float softcap) {
  const char* op = "attention_forward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device = detail::check_args(
      op, {{"out", out, dtype}, {"lse", lse}, {"qkv", qkv, dtype}, {"doc_starts", doc_starts, DType::i32, true}});
  const detail::AttentionDims d = detail::attention_dims(op, qkv, num_heads, num_kv_heads);
  detail::check_shape(op, "out", out, {d.B, d.T, d.C});
  detail::check_shape(op, "lse", lse, {d.B, d.NH, d.T});
  detail::check_doc_starts(op, doc_starts, d.B, d.T);
  detail::check_softcap(op, softcap, device);
  const int32_t* starts = doc_starts.defined() ? doc_starts.data<int32_t>() : nullptr;
  switch (device) {
    case Device::cpu:
      cpu::attention_forward(out.f32(), lse.f32(), qkv.f32(), d.B, d.T, d.C, d.NH, d.NKV, starts, softcap);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        // 16-bit storage takes cuDNN when chosen, else the tensor-core kernels, where they cover the head
        // size and pointers.
        if constexpr (!std::is_same_v<T, float>) {
#ifdef TESSERA_WITH_CUDNN
          if (cudnn_takes(starts != nullptr, d, {qkv.raw_data(), out.raw_data(), lse.raw_data()}))
            return cuda::attention_cudnn_forward(cuda::typed_data<T>(out), lse.f32(), cuda::typed_data<T>(qkv), d.B,
                                                 d.T, d.C, d.NH, d.NKV, cuda_compute_stream());
#endif
          if (cuda::attention_tc_supported(d.head_size(), {qkv.raw_data(), out.raw_data()}))
            return cuda::attention_tc_forward(cuda::typed_data<T>(out), lse.f32(), cuda::typed_data<T>(qkv), d.B,
                                              d.T, d.C, d.NH, d.NKV, starts, cuda_compute_stream());
        }
        cuda::attention_forward(cuda::typed_data<T>(out), lse.f32(), cuda::typed_data<T>(qkv), d.B, d.T, d.C, d.NH,
                                d.NKV, starts, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void attention_backward(Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out, const Tensor& lse,
                        int num_heads, int num_kv_heads, const Tensor& doc_starts, float softcap) {
  const char* op = "attention_backward";
  detail::check_float_dtype(op, "qkv", qkv);
  const DType dtype = qkv.dtype();
  const Device device = detail::check_args(op, {{"dqkv", dqkv, dtype},
                                                {"dout", dout, dtype},
                                                {"qkv", qkv, dtype},
                                                {"out", out, dtype},
                                                {"lse", lse},
                                                {"doc_starts", doc_starts, DType::i32, true}});
  const detail::AttentionDims d = detail::attention_dims(op, qkv, num_heads, num_kv_heads);
  detail::check_shape(op, "dqkv", dqkv, qkv.shape());
  detail::check_shape(op, "dout", dout, {d.B, d.T, d.C});
  detail::check_shape(op, "out", out, {d.B, d.T, d.C});
  detail::check_shape(op, "lse", lse, {d.B, d.NH, d.T});
  detail::check_doc_starts(op, doc_starts, d.B, d.T);
  detail::check_softcap(op, softcap, device);
  const int32_t* starts = doc_starts.defined() ? doc_starts.data<int32_t>() : nullptr;
  switch (device) {
    case Device::cpu:
      cpu::attention_backward(dqkv.f32(), dout.f32(), qkv.f32(), out.f32(), lse.f32(), d.B, d.T, d.C, d.NH,
                               d.NKV, starts, softcap);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        if constexpr (!std::is_same_v<T, float>) {
#ifdef TESSERA_WITH_CUDNN
          if (cudnn_takes(starts != nullptr, d,
                          {dqkv.raw_data(), dout.raw_data(), qkv.raw_data(), out.raw_data(), lse.raw_data()}))
            return cuda::attention_cudnn_backward(cuda::typed_data<T>(dqkv), cuda::typed_data<T>(dout),
                                                  cuda::typed_data<T>(qkv), cuda::typed_data<T>(out), lse.f32(), d.B,
                                                  d.T, d.C, d.NH, d.NKV, deterministic_kernels(),
                                                  cuda_compute_stream());
#endif
          if (cuda::attention_tc_supported(d.head_size(),
                                           {dqkv.raw_data(), dout.raw_data(), qkv.raw_data(), out.raw_data()}))
            return cuda::attention_tc_backward(cuda::typed_data<T>(dqkv), cuda::typed_data<T>(dout),
                                               cuda::typed_data<T>(qkv), cuda::typed_data<T>(out), lse.f32(), d.B,
                                               d.T, d.C, d.NH, d.NKV, starts, cuda_compute_stream());
        }
        cuda::attention_backward(cuda::typed_data<T>(dqkv), cuda::typed_data<T>(dout), cuda::typed_data<T>(qkv),
                                 cuda::typed_data<T>(out), lse.f32(), d.B, d.T, d.C, d.NH, d.NKV, starts,
                                 cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
