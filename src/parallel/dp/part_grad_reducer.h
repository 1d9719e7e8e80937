// ZeRO 2 and 3's gradient reduction, part by part (nn/sharded_parameters.h's PartGradients): each
// part of the flat layout (the embeddings, a block, the final norm with the head) is one Bucket, or
// under expert parallelism one per run of its parameters that reduce over the same group (a MoE
// block's dense weights over dp×cp, its experts over expert_dp). A bucket is padded to a multiple of
// its group's size and split into chunks, of which group rank r owns chunk r; a rank's gradient shard
// is its owned chunks in bucket order (the optimizer's state layout too).
//   grads(part)        the buffer backward writes the part's gradient into (zero-filled, padded)
//   grads_final(part)  reduce-scatter of each bucket of that buffer (chunks, padding zero; in bf16
//                      when so compressed); the rank's chunk of the sum is added into the gradient
//                      shard on arrival, so every micro-batch's backward reduces its own gradients
// At most two reductions are in flight (the oldest is waited for beyond that); a part's buffer lives
// from its backward to its reduce-scatter's end.
#pragma once

#include <deque>
#include <functional>
#include <map>
#include <vector>

#include "nn/parameter_layout.h"
#include "nn/sharded_parameters.h"
#include "parallel/comm.h"
#include "parallel/dp/buckets.h"

namespace tessera {

class PartGradReducer : public PartGradients {
 public:
  struct Part {
    int64_t begin = 0, end = 0;
    std::vector<size_t> buckets;  // tiling [begin, end), in offset order
  };

  // groups[b.group] is bucket b's communicator; buckets: every part of `layout` tiled by buckets
  // (parameter_buckets under ZeRO 2 and 3); grad_shard: the gradient shard (shard layout, on the
  // device the step runs on) that reductions accumulate into, kept by handle; reduce_dtype: f32,
  // or bf16 to reduce-scatter gradients compressed.
  PartGradReducer(std::vector<Comm*> groups, const ParameterLayout& layout, std::vector<Bucket> buckets,
                  Tensor grad_shard, DType reduce_dtype = DType::f32);

  Tensor grads(int64_t part) override;
  void grads_final(int64_t part) override;
  void zero_grad() override;
  // Waits for the gradient reductions in flight: the gradient shard is then complete.
  void finish();
  // Collective, after finish(): the reduced gradient of `range` (within one bucket), whole on every
  // rank of its group, handed to `edit`; what edit leaves there is each rank's shard afterwards (a
  // pipeline's tied embedding adds the other end's gradient).
  void edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit);

  const Part& part(int64_t part) const;
  const std::map<int64_t, Part>& parts() const { return parts_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  Comm& comm(const Bucket& b) const { return *groups_[size_t(b.group)]; }
  // What bucket b travels in: reduce_dtype, or f32 when its group is one rank (nothing is sent).
  DType wire_dtype(const Bucket& b) const { return comm(b).size() > 1 ? reduce_dtype_ : DType::f32; }
  Device device() const { return grad_shard_.device(); }

 private:
  struct Reduction {
    size_t bucket;
    Work work;
    Tensor in, out;  // the bucket's padded gradient (in the reduce dtype); this rank's chunk of the sum
  };
  void retire_oldest_reduction();

  std::vector<Comm*> groups_;
  std::vector<Bucket> buckets_;  // in make_buckets' order
  std::map<int64_t, Part> parts_;
  Tensor grad_shard_;
  DType reduce_dtype_;
  std::map<int64_t, Tensor> grads_;   // being accumulated by backward (one bucket: padded to its chunks)
  std::deque<Reduction> reductions_;  // in flight, oldest first
};

// dst[at, +n) = src[0, +n), converted to dst's dtype.
void place_converted(Tensor& dst, int64_t at, const Tensor& src);

}  // namespace tessera
