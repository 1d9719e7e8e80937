// Fused softmax + cross-entropy: shape, dtype and target-range checks, then dispatch by device and,
// on the GPU, by the logits' dtype (f32, bf16, f16).
#include "ops/cross_entropy.h"

#include "ops/cpu/cross_entropy_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "core/cuda/device.h"
#include "ops/cuda/cross_entropy_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {

void softmax_cross_entropy(Tensor& losses, Tensor& logits, const Tensor& targets, int64_t vocab_size, float dloss,
                           float softcap) {
  const char* op = "softmax_cross_entropy";
  detail::check_float_dtype(op, "logits", logits);
  const DType dtype = logits.dtype();
  const Device device =
      detail::check_args(op, {{"losses", losses}, {"logits", logits, dtype}, {"targets", targets, DType::i32}});
  TS_CHECK(logits.ndim() == 2, op, ": logits must be (N,Vp), got ", shape_string(logits.shape()));
  const int64_t N = logits.size(0), Vp = logits.size(1);
  TS_CHECK(vocab_size > 0 && vocab_size <= Vp, op, ": vocab_size ", vocab_size, " must be in [1, ", Vp,
           "], the padded width of logits");
  detail::check_shape(op, "targets", targets, {N});
  detail::check_shape(op, "losses", losses, {N});
  detail::check_softcap(op, softcap, device);
  switch (device) {
    case Device::cpu:
      detail::check_targets(op, targets, vocab_size);  // one outside [0, V) would index padding or past the row
      cpu::softmax_cross_entropy(losses.f32(), logits.f32(), targets.data<int32_t>(), N, vocab_size, Vp, dloss,
                                 softcap);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      detail::check_targets(op, copy_to_host(targets), vocab_size);  // one synchronising copy of N ids
      cuda::with_storage_type(dtype, [&]<typename T>(T) {
        cuda::softmax_cross_entropy(losses.f32(), cuda::typed_data<T>(logits), targets.data<int32_t>(), N,
                                    vocab_size, Vp, dloss, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
