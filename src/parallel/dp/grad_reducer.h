// Data-parallel gradient reduction, bucket by bucket. ZeRO 0: each bucket of the flat gradient is
// all-reduced (summed) in place. ZeRO 1: each bucket is reduce-scattered, and the rank keeps the sum
// of its owned chunk in its shard (ZeRO 2 and 3 reduce part by part: part_grad_reducer.h). With overlap, a bucket's collective starts as soon as
// backward has finalised it (grads_final_from), while the rest of backward runs; finish() starts
// whatever is left and waits for everything. Also all-gathers a sharded buffer back to full
// (parameters after a ZeRO 1/2 update, optimizer moments for a checkpoint). Each bucket reduces over its
// own group (buckets.h). Gradients may travel compressed to bf16 (reduce_dtype): each bucket is
// rounded to bf16, reduced in bf16 (every partial sum rounded, as NCCL does) and widened back into
// the f32 gradient or shard; half the bytes on the wire, about 3 significant digits kept (a bucket
// whose group is one rank sends nothing and stays f32). Or they
// may travel as PowerSGD's low-rank factors (powersgd.h): each bucket is summed over its group in
// two rounds, the second when finish() reaches it; under ZeRO 1 the rank then keeps its chunk.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "parallel/comm.h"
#include "parallel/dp/buckets.h"
#include "parallel/dp/powersgd.h"

namespace tessera {

// "fp32" or "bf16" (--grad-reduce-dtype); anything else throws, naming the choices.
DType parse_grad_reduce_dtype(const std::string& flag);

class GradReducer {
 public:
  // groups[b.group] is the communicator of bucket b; reduce_dtype is f32 or bf16; powersgd, when
  // given, compresses every bucket (in f32) instead.
  GradReducer(std::vector<Comm*> groups, std::vector<Bucket> buckets, int zero_stage, bool overlap,
              DType reduce_dtype = DType::f32, std::unique_ptr<PowerSgd> powersgd = nullptr);

  const std::vector<Bucket>& buckets() const { return buckets_; }
  int64_t shard_size() const;

  // Starts a reduction of `grads` (full flat); under ZeRO the result goes to `shard`. Both must stay
  // alive and untouched (beyond backward finishing the buckets not yet launched) until finish().
  void begin(Tensor& grads, Tensor& shard);
  // Backward has finalised every gradient at offset >= `offset`: launch the buckets now complete.
  void grads_final_from(int64_t offset);
  void finish();
  // The step these gradients were for was skipped: PowerSGD drops its errors and takes back the
  // step's Q (either may hold the step's NaNs).
  void step_skipped();

  // PowerSGD's state for checkpoints (powersgd.h), or null without it.
  const PowerSgd* powersgd() const { return powersgd_.get(); }
  PowerSgd* powersgd() { return powersgd_.get(); }
  // Collective over every bucket's group: the sum over the group of each compressed matrix's error,
  // in a host tensor over the flat buffer (zeros elsewhere).
  Tensor powersgd_error_sum();
  // Each compressed matrix's error becomes its share of `error_sum` (the sum / its group's size),
  // whatever number of ranks made that sum. `error_sum`: a host tensor over the flat buffer.
  void set_powersgd_errors(Tensor error_sum);
  // Whether this rank comes first in the group reducing flat element `offset` (the one of the group
  // that writes what the group holds alike).
  bool first_in_group(int64_t offset) const;

  // full[b.begin, b.end) of every bucket receives every rank's owned part. The owned parts are read
  // from `shard` (shard layout) when given, else from `full` itself.
  void all_gather(Tensor& full, const Tensor* shard);

 private:
  void launch(size_t bucket);
  const Bucket& bucket_of(int64_t offset) const;

  std::vector<Comm*> groups_;
  std::vector<Bucket> buckets_;
  int zero_stage_;
  bool overlap_;
  DType reduce_dtype_;
  std::unique_ptr<PowerSgd> powersgd_;
  Tensor grads_, shard_;
  size_t next_ = 0;  // buckets launched so far, in launch order
  struct InFlight {
    Work work;
    Tensor padded_in, padded_out;  // staging when a bucket does not split evenly or travels in bf16
    std::optional<PowerSgd::Round> round;  // under PowerSGD
    size_t bucket;
  };
  std::vector<InFlight> in_flight_;
};

}  // namespace tessera
