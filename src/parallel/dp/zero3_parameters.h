// ZeRO-3 over the dp group (nn/sharded_parameters.h): parameters, gradients and, in the optimizer,
// its moments are sharded by parts of the flat layout (the embeddings, each block, the final norm
// with the head). Each part is a Bucket: padded to a multiple of dp and split into dp chunks, of
// which rank r owns chunk r; a rank's parameter and gradient shards are its owned chunks in bucket
// order, the optimizer's state layout too.
//   gather(part, next)   all-gather of the part's chunks into a buffer of the whole part; `next`'s
//                        all-gather starts at once, so that it arrives while `part` computes
//   grads_final(part)    reduce-scatter of the part's gradient buffer (dp chunks, padding zero; in
//                        bf16 when so compressed); the rank's chunk of the sum is added into the
//                        gradient shard on arrival
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
  // parts: one bucket per part of `layout` (make_buckets over the parts' first offsets); params:
  // the whole flat parameters, of which this rank keeps a copy of its chunks; grad_shard: the
  // gradient shard (shard layout) that reductions accumulate into, kept by handle; reduce_dtype:
  // f32, or bf16 to reduce-scatter gradients compressed (GradReducer's).
  Zero3Parameters(Comm& dp, const ParameterLayout& layout, std::vector<Bucket> parts, const Tensor& params,
                  Tensor grad_shard, DType reduce_dtype = DType::f32);

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
  // Collective, after finish(): the reduced gradient of `range` (within one part), whole on every
  // rank, handed to `edit`; what edit leaves there is each rank's shard afterwards (a pipeline's
  // tied embedding adds the other end's gradient).
  void edit_reduced_grads(OffsetRange range, const std::function<void(Tensor&)>& edit);
  // Collective: rank `root` receives the whole flat parameters into `full` (the layout's total, on
  // any device); the other ranks' `full` is not touched (it may be undefined).
  void gather_to(Tensor& full, int root);
  // Bytes of gathered parameters (and their staging) held now, and the most held at once since
  // reset_peak(): the transient part of ZeRO-3's parameter memory, beside params_shard().
  int64_t gathered_bytes() const { return gathered_bytes_; }
  int64_t peak_gathered_bytes() const { return peak_gathered_bytes_; }
  void reset_peak() { peak_gathered_bytes_ = gathered_bytes_; }

 private:
  struct Gathered {
    Work work;
    Tensor in, out;  // this rank's chunk (until arrival); every chunk, the part first
    bool staged = false;  // `in` is a padded copy (else a view of the shard)
  };
  struct Reduction {
    int64_t part;
    Work work;
    Tensor in, out;  // the part's padded gradient (in the reduce dtype); this rank's chunk of the sum
  };
  const Bucket& bucket(int64_t part) const;
  void start_gather(int64_t part);
  void retire_oldest_reduction();
  void count_gathered();

  Comm& comm_;
  std::vector<Bucket> parts_;           // in make_buckets' order
  std::map<int64_t, size_t> index_;     // part -> its bucket
  Tensor params_, grad_shard_;
  DType reduce_dtype_;
  std::map<int64_t, Gathered> gathered_;  // held or arriving
  std::map<int64_t, Tensor> grads_;       // being accumulated by backward, padded to dp chunks
  std::deque<Reduction> reductions_;      // in flight, oldest first
  int64_t gathered_bytes_ = 0, peak_gathered_bytes_ = 0;
};

}  // namespace tessera
