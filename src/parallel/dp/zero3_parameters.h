// ZeRO-3's parameter shards (nn/sharded_parameters.h's ShardedParameters) over the parts and buckets
// of a PartGradReducer, which reduces the gradients: a rank's parameter shard is its owned chunks in
// bucket order, laid out like the gradient shard and the optimizer's state.
//   gather(part, next)   all-gather of the part's chunks into a buffer of the whole part; `next`'s
//                        all-gathers start at once, so that they arrive while `part` computes
// Gathered buffers live only while a part is held: the decoder holds at most two parts at once (the
// current one and the one being prefetched; the classifier of a tied model a third, the embeddings),
// or, without reshard-after-forward, every block between a training forward and its backward.
#pragma once

#include <map>
#include <vector>

#include "nn/parameter_values.h"
#include "nn/sharded_parameters.h"
#include "parallel/dp/part_grad_reducer.h"

namespace tessera {

class Zero3Parameters : public ShardedParameters {
 public:
  // `parts` (kept by reference) tiles the layout; this rank's chunks are filled from `values`, one
  // bucket at a time through the host, onto the parts' device.
  Zero3Parameters(const PartGradReducer& parts, const ParameterValues& values);
  Tensor gather(int64_t part, int64_t next) override;
  void release(int64_t part) override;
  void add_to_params(int64_t offset, const std::vector<float>& delta) override;
  // This rank's parameter shard; the optimizer updates it in place.
  Tensor& params_shard() { return params_; }
  // Collective: the whole flat parameters (the layout's total, on any device) land in `full` on
  // every rank that passes it defined.
  void gather_to(Tensor& full);
  // Bytes of gathered parameters (and their staging) held now, and the most held at once since
  // reset_peak(): the transient part of ZeRO-3's parameter memory, beside params_shard().
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes_; }

 private:
  struct Segment {  // one bucket's all-gather
    Work work;
    Tensor in, out;  // this rank's chunk (until arrival); every chunk of the group, the bucket first
    bool staged = false;  // `in` is a padded copy (else a view of the shard)
  };
  struct Gathered {
    std::vector<Segment> segments;  // until arrival
    Tensor whole;                   // after: the part (a view of the one segment's output, or a copy)
  };
  void start_gather(int64_t part);
  void count_gathered();

  const PartGradReducer& parts_;
  Tensor params_;
  std::map<int64_t, Gathered> gathered_;  // held or arriving
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
};

}  // namespace tessera
