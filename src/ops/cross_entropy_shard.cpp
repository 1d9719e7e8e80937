// The vocabulary-parallel cross-entropy's local parts: shape, dtype and target checks, then dispatch
// by device and, on the GPU, by the logits' dtype.
#include "ops/cross_entropy_shard.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "ops/cpu/cross_entropy_shard_cpu.h"
#include "ops/op_checks.h"

#ifdef TESSERA_WITH_CUDA
#include "ops/cuda/cross_entropy_shard_cuda.h"
#include "ops/cuda/storage_types.h"
#endif

namespace tessera {
namespace {

struct ShardDims {
  int64_t N, Vs, real;  // rows, the shard's columns, those of them below the vocabulary size
};

ShardDims shard_dims(const char* op, const Tensor& logits, const Tensor& targets, int64_t first_col,
                     int64_t vocab_size) {
  TS_CHECK(logits.ndim() == 2, op, ": logits_shard must be (N,Vs), got ", shape_string(logits.shape()));
  const int64_t N = logits.size(0), Vs = logits.size(1);
  TS_CHECK(first_col >= 0 && vocab_size > 0, op, ": first_col ", first_col, " and vocab_size ", vocab_size,
           " must be non-negative and positive");
  detail::check_shape(op, "targets", targets, {N});
  // Targets lie in the whole vocabulary, most of them in other ranks' shards.
  detail::check_targets(op, targets.device() == Device::cpu ? targets : tensor_to(targets, Device::cpu), vocab_size);
  return {N, Vs, std::clamp<int64_t>(vocab_size - first_col, 0, Vs)};
}

}  // namespace

void cross_entropy_shard_stats(Tensor& max, Tensor& sum_exp, Tensor& target_logit, const Tensor& logits_shard,
                               const Tensor& targets, int64_t first_col, int64_t vocab_size) {
  const char* op = "cross_entropy_shard_stats";
  detail::check_float_dtype(op, "logits_shard", logits_shard);
  const Device device = detail::check_args(op, {{"max", max}, {"sum_exp", sum_exp}, {"target_logit", target_logit},
                                                {"logits_shard", logits_shard, logits_shard.dtype()},
                                                {"targets", targets, DType::i32}});
  const ShardDims d = shard_dims(op, logits_shard, targets, first_col, vocab_size);
  using Named = std::pair<const char*, const Tensor*>;
  for (auto [name, t] : {Named{"max", &max}, Named{"sum_exp", &sum_exp}, Named{"target_logit", &target_logit}})
    detail::check_shape(op, name, *t, {d.N});
  switch (device) {
    case Device::cpu:
      cpu::cross_entropy_shard_stats(max.f32(), sum_exp.f32(), target_logit.f32(), logits_shard.f32(),
                                     targets.data<int32_t>(), d.N, d.Vs, first_col, d.real);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(logits_shard.dtype(), [&]<typename T>(T) {
        cuda::cross_entropy_shard_stats(max.f32(), sum_exp.f32(), target_logit.f32(), cuda::typed_data<T>(logits_shard),
                                        targets.data<int32_t>(), d.N, d.Vs, first_col, d.real, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void cross_entropy_shard_rescale(Tensor& sum_exp, const Tensor& local_max, const Tensor& global_max) {
  const char* op = "cross_entropy_shard_rescale";
  const Device device =
      detail::check_args(op, {{"sum_exp", sum_exp}, {"local_max", local_max}, {"global_max", global_max}});
  const int64_t N = sum_exp.numel();
  detail::check_shape(op, "local_max", local_max, {N});
  detail::check_shape(op, "global_max", global_max, {N});
  switch (device) {
    case Device::cpu: return cpu::cross_entropy_shard_rescale(sum_exp.f32(), local_max.f32(), global_max.f32(), N);
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      return cuda::cross_entropy_shard_rescale(sum_exp.f32(), local_max.f32(), global_max.f32(), N,
                                               cuda_compute_stream());
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

void cross_entropy_shard_finish(Tensor& losses, Tensor& logits_shard, const Tensor& targets, const Tensor& max,
                                const Tensor& sum_exp, const Tensor& target_logit, int64_t first_col,
                                int64_t vocab_size, float dloss, float softcap) {
  const char* op = "cross_entropy_shard_finish";
  detail::check_float_dtype(op, "logits_shard", logits_shard);
  const Device device = detail::check_args(op, {{"losses", losses}, {"logits_shard", logits_shard, logits_shard.dtype()},
                                                {"targets", targets, DType::i32}, {"max", max}, {"sum_exp", sum_exp},
                                                {"target_logit", target_logit}});
  const ShardDims d = shard_dims(op, logits_shard, targets, first_col, vocab_size);
  using Named = std::pair<const char*, const Tensor*>;
  for (auto [name, t] : {Named{"losses", &losses}, Named{"max", &max}, Named{"sum_exp", &sum_exp},
                         Named{"target_logit", &target_logit}})
    detail::check_shape(op, name, *t, {d.N});
  detail::check_softcap(op, softcap, device);
  switch (device) {
    case Device::cpu:
      cpu::cross_entropy_shard_finish(losses.f32(), logits_shard.f32(), targets.data<int32_t>(), max.f32(),
                                      sum_exp.f32(), target_logit.f32(), d.N, d.Vs, first_col, d.real, dloss,
                                      softcap);
      return;
    case Device::cuda:
#ifdef TESSERA_WITH_CUDA
      cuda::with_storage_type(logits_shard.dtype(), [&]<typename T>(T) {
        cuda::cross_entropy_shard_finish(losses.f32(), cuda::typed_data<T>(logits_shard), targets.data<int32_t>(),
                                         max.f32(), sum_exp.f32(), target_logit.f32(), d.N, d.Vs, first_col, d.real,
                                         dloss, cuda_compute_stream());
      });
      return;
#else
      detail::fail_no_cuda_kernel(op);
#endif
  }
}

}  // namespace tessera
