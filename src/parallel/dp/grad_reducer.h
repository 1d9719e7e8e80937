// Data-parallel gradient reduction, bucket by bucket. ZeRO 0: each bucket of the flat gradient is
// all-reduced (summed) in place. ZeRO 1 and 2: each bucket is reduce-scattered, and the rank keeps
// the sum of its owned chunk in its shard. With overlap, a bucket's collective starts as soon as
// backward has finalised it (grads_final_from), while the rest of backward runs; finish() starts
// whatever is left and waits for everything. Also all-gathers a sharded buffer back to full
// (parameters after a ZeRO update, optimizer moments for a checkpoint). Each bucket reduces over its
// own group (buckets.h).
#pragma once

#include <vector>

#include "parallel/comm.h"
#include "parallel/dp/buckets.h"

namespace tessera {

class GradReducer {
 public:
  // groups[b.group] is the communicator of bucket b.
  GradReducer(std::vector<Comm*> groups, std::vector<Bucket> buckets, int zero_stage, bool overlap);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t shard_size() const;

  // Starts a reduction of `grads` (full flat); under ZeRO the result goes to `shard`. Both must stay
  // alive and untouched (beyond backward finishing the buckets not yet launched) until finish().
  void begin(Tensor& grads, Tensor& shard);
  // Backward has finalised every gradient at offset >= `offset`: launch the buckets now complete.
  void grads_final_from(int64_t offset);
  void finish();

  // full[b.begin, b.end) of every bucket receives every rank's owned part. The owned parts are read
  // from `shard` (shard layout) when given, else from `full` itself.
  void all_gather(Tensor& full, const Tensor* shard);

 private:
  void launch(size_t bucket);

  std::vector<Comm*> groups_;
  std::vector<Bucket> buckets_;
  int zero_stage_;
  bool overlap_;
  Tensor grads_, shard_;
  size_t next_ = 0;  // buckets launched so far, in launch order
  struct InFlight {
    Work work;
    Tensor padded_in, padded_out;  // staging when a bucket does not split evenly
    size_t bucket;
  };
  std::vector<InFlight> in_flight_;
};

}  // namespace tessera
