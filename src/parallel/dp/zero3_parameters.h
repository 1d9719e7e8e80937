// ZeRO-3 over the data-parallel groups (nn/sharded_parameters.h): parameters, gradients and, in the
// optimizer, its moments are sharded by parts of the flat layout (the embeddings, each block, the
// final norm with the head). A part is one Bucket, or under expert parallelism one per run of its
// parameters that reduce over the same group (a MoE block's dense weights over dp×cp, its experts
// over expert_dp). A bucket is padded to a multiple of its group's size and split into chunks, of
// which group rank r owns chunk r; a rank's parameter and gradient shards are its owned chunks in
// bucket order, the optimizer's state layout too.
//   gather(part, next)   all-gather of the part's chunks into a buffer of the whole part; `next`'s
//                        all-gathers start at once, so that they arrive while `part` computes
//   grads_final(part)    reduce-scatter of each bucket of the part's gradient buffer (chunks, padding
//                        zero; in bf16 when so compressed); the rank's chunk of the sum is added into
//                        the gradient shard on arrival
// Buffers live only while a part is held or reduced: at most two reductions are in flight (the
// oldest is waited for beyond that), and the decoder holds at most two parts at once (the current
// one and the one being prefetched; the classifier of a tied model a third, the embeddings).
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

class Zero3Parameters : public ShardedParameters {
 public:
  // groups[b.group] is bucket b's communicator; buckets: every part of `layout` tiled by buckets
  // (parameter_buckets under ZeRO-3); params: the whole flat parameters (on any device), of which this
  // rank keeps a copy of its chunks beside grad_shard, on its device; grad_shard: the gradient shard (shard layout) that reductions accumulate
  // into, kept by handle; reduce_dtype: f32, or bf16 to reduce-scatter gradients compressed.
  Zero3Parameters(std::vector<Comm*> groups, const ParameterLayout& layout, std::vector<Bucket> buckets,
                  const Tensor& params, Tensor grad_shard, DType reduce_dtype = DType::f32);

  Tensor gather(int64_t part, int64_t next) override;
  void release(int64_t part) override;
  Tensor grads(int64_t part) override;
  void grads_final(int64_t part) override;
  void zero_grad() override;
  void add_to_params(int64_t offset, const std::vector<float>& delta) override;

  // This rank's parameter shard; the optimizer updates it in place.
  Tensor& params_shard() { return params_; }
  // Waits for the gradient reductions in flight: the gradient shard is then complete.
  void finish();
  // Collective, after finish(): the reduced gradient of `range` (within one bucket), whole on every
  // rank of its group, handed to `edit`; what edit leaves there is each rank's shard afterwards (a
  // pipeline's tied embedding adds the other end's gradient).
  void edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit);
  // Collective: the whole flat parameters (the layout's total, on any device) land in `full` on
  // every rank that passes it defined.
  void gather_to(Tensor& full);
  // Bytes of gathered parameters (and their staging) held now, and the most held at once since
  // reset_peak(): the transient part of ZeRO-3's parameter memory, beside params_shard().
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes_; }

 private:
  struct Part {
    int64_t begin = 0, end = 0;
    std::vector<size_t> buckets;  // tiling [begin, end), in offset order
  };
  struct Segment {  // one bucket's all-gather
    Work work;
    Tensor in, out;  // this rank's chunk (until arrival); every chunk of the group, the bucket first
    bool staged = false;  // `in` is a padded copy (else a view of the shard)
  };
  struct Gathered {
    std::vector<Segment> segments;  // until arrival
    Tensor whole;                   // after: the part (a view of the one segment's output, or a copy)
  };
  struct Reduction {
    size_t bucket;
    Work work;
    Tensor in, out;  // the bucket's padded gradient (in the reduce dtype); this rank's chunk of the sum
  };
  const Part& part(int64_t part) const;
  Comm& comm(const Bucket& b) const { return *groups_[size_t(b.group)]; }
  void start_gather(int64_t part);
  void retire_oldest_reduction();
  void count_gathered();

  std::vector<Comm*> groups_;
  std::vector<Bucket> buckets_;  // in make_buckets' order
  std::map<int64_t, Part> parts_;
  Tensor params_, grad_shard_;
  DType reduce_dtype_;
  std::map<int64_t, Gathered> gathered_;  // held or arriving
  std::map<int64_t, Tensor> grads_;       // being accumulated by backward (one bucket: padded to its chunks)
  std::deque<Reduction> reductions_;      // in flight, oldest first
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
};

}  // namespace tessera
