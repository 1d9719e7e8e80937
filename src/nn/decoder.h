// The decoder every model family is built on: embedding -> blocks -> final norm -> head, with
// hand-written forward and backward over one flat parameter buffer and one flat gradient buffer.
// GPT-2, Llama and the MoE models differ only by their ModelConfig. forward() saves the activations backward() needs; its fused classifier goes
// through the tokens a chunk at a time (logits -> loss -> dlogits -> the classifier's gradients), so
// the (B·T, Vp) logits never exist in training and backward starts below the classifier.
// Gradients accumulate (+=) across micro-batches until zero_grad(). A model is built, initialised
// and loaded on the CPU, then moved with to(); afterwards parameters, gradients and activations
// live on that device, and forward() takes host token tensors, copying them over once per call.
// A pipeline rank builds the decoder of its DecoderStage: only that stage's parameters exist (under
// the whole model's names), and the chunk API below runs one chunk of one micro-batch at a time,
// each pair with its own activations until release_chunk().
// Mixed precision (bf16 or f16 compute, GPU only): params() stay the fp32 master weights and
// gradients stay fp32; forward/backward read a 16-bit copy of the weights, refreshed by
// params_updated(), and keep activations in 16 bits (norm statistics, attention log-sum-exp and
// losses in fp32).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/decoder_activations.h"
#include "nn/decoder_block.h"
#include "nn/decoder_layout.h"
#include "nn/fp8_scaling.h"
#include "nn/kv_cache.h"
#include "nn/model_config.h"
#include "nn/named_tensor.h"
#include "nn/parameter_layout.h"
#include "nn/sharded_parameters.h"
#include "nn/stage_partition.h"
#include "nn/tensor_parallel.h"

namespace tessera {

// Whether a decoder allocates its flat parameters and gradients when built (whole), or leaves them to
// ZeRO-3 (sharded_later): set_part_gradients and set_sharded_parameters must then follow before
// anything else uses them, and ZeRO-3 fills only its shards (from nn/parameter_values.h), so that no
// rank ever holds the whole model, not even at start-up.
enum class ParamStorage { whole, sharded_later };

class Decoder {
 public:
  explicit Decoder(const ModelConfig& config);
  // A pipeline rank's stage of the model; with `tp`, that tensor-parallel rank's slices of its
  // parameters (ParamSpec::slice), run through the mappings given to set_tensor_parallel(); with
  // `ep`, that expert-parallel rank's experts only, run through set_expert_parallel()'s dispatcher.
  Decoder(const ModelConfig& config, DecoderStage stage, TpPlace tp = {}, EpPlace ep = {},
          ParamStorage storage = ParamStorage::whole);
  // The tp group's mappings (parallel/tp), kept by pointer; required before a forward when the
  // model was built for a tp group of more than one rank.
  void set_tensor_parallel(TensorParallel* mappings);
  // The ep group's token dispatcher (parallel/ep), kept by pointer; required before a forward when
  // the model was built for an ep group of more than one rank.
  void set_expert_parallel(ExpertParallel* dispatch);
  // The cp group's ring attention (parallel/cp), kept by pointer: forward() then takes the rank's
  // share of every sequence (nn/context_parallel.h), its positions those of its chunks.
  void set_context_parallel(ContextParallel* ring);
  CpPlace cp_place() const { return cp_ ? cp_->place() : CpPlace{}; }
  EpPlace ep_place() const { return ep_place_; }

  // ZeRO 2 and 3 (nn/sharded_parameters.h): backward writes each part's gradient into a buffer of
  // `grads` and hands it over when the part is done; the decoder frees its flat gradients (grads()
  // stays undefined). No deferred weight gradients (they would come after the part was handed over).
  // Kept by pointer.
  void set_part_gradients(PartGradients* grads);
  // ZeRO-3 also: `sharded`, which took its shards of params() (or filled them itself, under
  // ParamStorage::sharded_later) already, holds the parameters from now on. The decoder frees its flat parameters (params() stays undefined) and gathers each part
  // around its use; no block's last add is then fused with the next norm, whose gain lies in the
  // next part. The model, a pipeline stage, and a tp rank's slices, in training and evaluation
  // forwards and the chunk API (no inference); kept by pointer. A block's part is released after its
  // forward and gathered again for its backward, unless `reshard_after_forward` is false: a training
  // forward then keeps it until its backward (one all-gather a block and micro-batch, not two).
  void set_sharded_parameters(ShardedParameters* sharded, bool reshard_after_forward = true);
  bool is_sharded() const { return sharded_ != nullptr; }

  // Each parameter by its ParamInit, keyed on (seed, name, index): normal(0, 0.02), residual
  // projections scaled by 1/sqrt(2L), biases 0, norm gains 1, padding rows of the embedding and head 0.
  void init_weights(uint64_t seed);
  // Moves parameters and gradients to `device` and sets the compute dtype (f32, or bf16 / f16 on the GPU);
  // activations follow at the next forward. A ZeRO-3 model's parameters are its shards' (sharded
  // before the move, they are on the device already): only the compute place changes.
  void to(Device device, DType compute = DType::f32);
  Device device() const { return device_; }
  DType compute_dtype() const { return compute_dtype_; }
  // Call after params() changed (an optimizer step, a load): refreshes the 16-bit compute copy.
  void params_updated();
  // That 16-bit copy (params()' layout), for an optimizer that writes it in its own pass instead;
  // null in f32 compute, where the weights are params() itself.
  Tensor* compute_copy() { return compute_dtype_ == DType::f32 ? nullptr : &compute_params_; }

  // tokens, targets: (B,T) i32 host tensors with T <= maxT. Without targets (inference) computes
  // the logits of every position, logits(). With targets computes the per-token losses (0 for a
  // kIgnoredTarget) and returns their mean over the B·T positions, through a fused classifier that
  // holds the logits of one chunk of rows at a time; with dloss != 0 it also takes the classifier's
  // backward there (the head's gradient accumulated, the gradient of dloss * sum(losses) into the
  // final norm's output kept for backward()). doc_starts: undefined (causal attention over the whole
  // window), or (B,T) i32 on the host, each token's document start (data/document_starts.h; a true
  // position under context parallelism): attention then stays within documents (ops/attention.h).
  float forward(const Tensor& tokens, const Tensor& targets, float dloss = 0.0f, const Tensor& doc_starts = {});
  // Generation with a key/value cache: kv_cache() makes an empty cache for `batch` sequences of up
  // to `capacity` positions (at most max_seq_len, all of it with 0); forward_cached() runs tokens
  // (B,Tq) (host, i32) at positions cache.length.. through the model, appends their keys and values
  // and returns their logits (B*Tq, Vp) on device(). Sliding blocks attend over their window of it.
  KvCache kv_cache(int64_t batch, int64_t capacity = 0) const;
  const Tensor& forward_cached(const Tensor& tokens, KvCache& cache);
  // Whether forward_cached can run: this is the whole model running whole sequences, not a pipeline
  // stage, a tensor- or expert-parallel slice, a context-parallel share or a ZeRO-3 shard.
  bool can_generate() const;
  // Accumulates parameter gradients of the last forward (which must have had dloss != 0).
  void backward();
  // Pipeline execution. Chunk k is stage().chunks[k]. forward_chunk runs micro-batch `micro` through
  // it: from `tokens` (host (B,T) i32) when it starts at block 0, else from chunk_input(), which the
  // caller filled first; through the fused classifier with `targets` (and dloss, as in forward())
  // when it ends at the last block, returning the sum of its token losses (0 otherwise); dloss 0
  // evaluates (no gradients, no MoE statistics). doc_starts as in forward(), on every chunk.
  // backward_chunk takes the output's gradient from chunk_output_grad() (unless the chunk holds the
  // head) and leaves the input's in chunk_input_grad(); zero-bubble splits it into
  // backward_chunk_input (the same, but the linear layers' weight gradients are recorded) and
  // backward_chunk_weight (runs those). release_chunk frees the pair's activations.
  Tensor& chunk_input(int chunk, int micro, int64_t batch, int64_t seq_len);
  double forward_chunk(int chunk, int micro, const Tensor& tokens, const Tensor& targets, float dloss,
                       const Tensor& doc_starts = {});
  const Tensor& chunk_output(int chunk, int micro) const;
  // The per-token losses (B,T) of micro-batch `micro` through the chunk that ends at the last block
  // (after its forward_chunk, until release_chunk); on device().
  const Tensor& chunk_losses(int chunk, int micro) const;
  Tensor& chunk_output_grad(int chunk, int micro);
  void backward_chunk(int chunk, int micro);
  void backward_chunk_input(int chunk, int micro);
  void backward_chunk_weight(int chunk, int micro);
  const Tensor& chunk_input_grad(int chunk, int micro) const;
  void release_chunk(int chunk, int micro);
  int chunks_in_flight() const { return int(in_flight_.size()); }

  // Gradients become final from the end of the flat buffer towards its start (head and final norm,
  // last block, ..., first block, embeddings). During backward the hook is told each new watermark: every
  // gradient at an offset >= it is final. Data parallelism starts reducing buckets from there.
  using GradReadyHook = std::function<void(int64_t first_final_offset)>;
  void set_grad_ready_hook(GradReadyHook hook) { grad_ready_hook_ = std::move(hook); }
  // Zeroes the gradients, allocating them again after release_grads().
  void zero_grad();
  // Frees the gradient buffer until the next zero_grad() (ZeRO-2 keeps only its reduced shard).
  void release_grads();
  // After the step's backward, sums over the tp group the gradients each rank holds a part of: the
  // norms' under sequence parallelism (each rank's from its positions), the query and key heads'
  // gains (each rank's from its heads), and the key/value rows of kv heads replicated over tp ranks
  // (each rank's from its query heads). A no-op otherwise, and
  // under ZeRO-3, whose backward sums each part's before the part is reduced over dp.
  void reduce_tp_partial_grads();
  // The flat-buffer ranges of kv-head rows (and OLMo 2's key gains) that another tp rank of this one's
  // kv head also holds and counts (every rank of a kv head's replicas but the first); empty otherwise.
  std::vector<OffsetRange> replicated_kv_ranges() const;
  // The flat-buffer ranges of the routed experts' weights (each MoE block's experts_in and experts_out).
  std::vector<OffsetRange> expert_ranges() const;
  // Whether reduce_tp_partial_grads() has anything to do.
  bool has_tp_partial_grads() const { return !part_grads_ && tp_partial_grads_exist(); }

  const ModelConfig& config() const { return config_; }
  const DecoderStage& stage() const { return stage_; }
  TpPlace tp_place() const { return tp_place_; }
  // How many ranks share the residual stream's positions: tp under sequence parallelism, else 1.
  int64_t seq_shards() const { return tp_ && tp_->sequence_parallel() ? tp_place_.size : 1; }
  const ParameterLayout& layout() const { return layout_; }
  Tensor& params() { return params_; }  // flat (num_parameters)
  const Tensor& params() const { return params_; }
  Tensor& grads() { return grads_; }    // flat (num_parameters)
  NamedTensors& named_params() { return named_params_; }
  const NamedTensors& named_params() const { return named_params_; }
  NamedTensors& named_grads() { return named_grads_; }
  // (B·T, Vp) after an inference forward, on device().
  const Tensor& logits() const { return acts_.logits; }
  // Activation recomputation for the next forward/backward (see nn/recompute.h); none by default.
  void set_recompute(RecomputePolicy policy) { recompute_ = policy; }
  // fp8 for the blocks' linear layers (nn/fp8_scaling.h), after to(); recipe off: none.
  void set_fp8(const Fp8Options& options);
  // The fp8 scaling state, or null without fp8.
  Fp8Scaling* fp8() { return fp8_.get(); }
  // MoE training options (aux and z-loss coefficients, capacity factor); used by the next forward.
  void set_moe_options(const MoeOptions& options) { moe_options_ = options; }
  const MoeOptions& moe_options() const { return moe_options_; }
  // The MoE layers' auxiliary losses summed over this model's MoE layers and, weighted by their
  // sequences, over the training forwards since zero_grad(): divided by (MoE layers · sequences)
  // they are the means the objective adds (0 for a dense model).
  RouterLosses moe_loss_sums() const { return moe_loss_sums_; }
  // Per expert of each MoE layer (layer-major, E per layer), summed over the training forwards since
  // zero_grad(): the rows the experts computed, and the router's choices (more where a capacity
  // dropped some; their difference is the dropped assignments).
  const std::vector<double>& expert_load() const { return expert_load_; }
  const std::vector<double>& routed_load() const { return routed_load_; }
  // DeepSeek-V3's auxiliary-loss-free balancing, after an optimizer step: each sigmoid router's
  // selection bias moves by `rate` towards balance, bias_e += rate * sign(mean load - load_e), from
  // `load` shaped like expert_load() (summed over the data-parallel ranks by the caller).
  void balance_router_biases(const std::vector<double>& load, float rate);
  // The factor on dloss for the token losses of the forwards that follow (the MoE router losses keep
  // dloss): under loss masks B·T over the global batch's training targets, which makes the token
  // term the mean over those targets whatever the micro-batch split; 1 (the default) otherwise.
  void set_target_loss_weight(float weight) { target_loss_weight_ = weight; }
  // Rows of logits the fused classifier computes at once; 0 (the default) sizes chunks to 1 GiB.
  void set_classifier_chunk_rows(int64_t rows) { classifier_chunk_rows_ = rows; }
  const Tensor& losses() const { return acts_.losses; }  // (B,T), on device()

 private:
  // The blocks of a.range from a.embedded (the embedding already ran when the range starts at 0),
  // the last one's add fused with the final norm when the range ends at the last block.
  void forward_blocks(DecoderActivations& a, const MoeOptions& moe);
  // The fused classifier over a's final norm output; returns the sum of the token losses.
  double classifier_forward(DecoderActivations& a, const Tensor& targets, float dloss);
  // a.range's backward from a.dresidual (or from the classifier's gradient when it holds the head),
  // through the embedding when it starts at block 0; tells the hook as gradients become final. With
  // `defer`, the linear layers' weight gradients go to a.deferred instead.
  void backward_blocks(DecoderActivations& a, bool announce, bool defer = false);
  void embed(DecoderActivations& a, const Tensor& tokens);
  // a.seq's doc_starts (a device copy of doc_starts (B, a.T)), in_document and, under a window shorter
  // than the sequences, window_starts; each undefined where it does not apply.
  void keep_doc_starts(DecoderActivations& a, const Tensor& doc_starts) const;
  // logits (rows, this rank's vocabulary rows) = normed (rows, C) times the classifier plus its bias (Phi-2),
  // scaled (Cohere) and soft-capped (Gemma 2) where the model does.
  void classify(Tensor& logits, const Tensor& normed) const;
  // Softmax cross-entropy of a chunk of rows, vocabulary-parallel under tensor parallelism.
  void cross_entropy(Tensor& losses, Tensor& logits, const Tensor& targets, float dloss);
  // This rank's rows of the (padded) vocabulary: all of them, or a tp rank's slice.
  int64_t vocab_rows() const { return config_.padded_vocab_size() / tp_place_.size; }
  int64_t first_vocab_row() const { return int64_t(tp_place_.rank) * vocab_rows(); }
  DecoderActivations& in_flight(int chunk, int micro);
  const DecoderActivations& in_flight(int chunk, int micro) const;
  // Adds the last training forward's computed rows, router choices and auxiliary losses.
  void count_moe_statistics(const DecoderActivations& a);
  int64_t classifier_chunk(int64_t rows) const;
  Tensor& logits_buffer(int64_t rows);  // acts_.logits as (rows, Vp), reallocated when that changes
  void allocate_grads();
  // What block l's layers act through.
  BlockContext block_context(int64_t l) { return {tp_, ep_, cp_, Fp8Block{fp8_.get(), l}}; }
  void set_params(Tensor params);
  // ZeRO-3 (decoder_sharded.cpp; no-ops when not sharded): w_'s views of `part` from its gathered
  // parameters (gathering `next` meanwhile; a part held already keeps its views) until release_part;
  // g_'s views of its gradient buffer until part_grads_final hands that over for reduction.
  // release_all_parts() lets go of what a training forward left held for a backward that never came.
  void gather_part(int64_t part, int64_t next);
  void release_part(int64_t part);
  void release_all_parts();
  void bind_part_grads(int64_t part);
  void part_grads_final(int64_t part);
  // Whether any gradient is a tp rank's share: the norms' under sequence parallelism, Qwen3's head
  // gains and latent attention's latents under tp, replicated kv heads.
  bool tp_partial_grads_exist() const {
    const bool whole_per_rank = (config_.qk_norm && !config_.qk_norm_all_heads) || config_.mla.enabled();
    return seq_shards() > 1 || kv_head_replicas(config_, tp_place_) > 1 || (whole_per_rank && tp_place_.size > 1);
  }
  // reduce_tp_partial_grads()'s sum over the parameters of `part`, or of every part.
  void sum_tp_partial_grads(std::optional<int64_t> part);
  // The gradient of a parameter by name: a view of grads(), or under ZeRO-3 of its part's buffer.
  Tensor grad_of(const std::string& name);
  // The router biases' balancing steps: (flat offset, the step of each of its E elements) per MoE layer.
  std::vector<std::pair<int64_t, std::vector<float>>> router_bias_steps(const std::vector<double>& load,
                                                                         float rate) const;

  ModelConfig config_;
  DecoderStage stage_;
  TpPlace tp_place_;
  ModelConfig local_;            // the shapes the layers compute with: config_, or a tp rank's share
  TensorParallel* tp_ = nullptr;  // null without tensor parallelism
  EpPlace ep_place_;
  ExpertParallel* ep_ = nullptr;  // null without expert parallelism
  ContextParallel* cp_ = nullptr;  // null without context parallelism
  std::unique_ptr<Fp8Scaling> fp8_;  // null without fp8
  DecoderNames names_;
  Device device_ = Device::cpu;
  DType compute_dtype_ = DType::f32;
  ParameterLayout layout_;
  Tensor params_, grads_;
  Tensor compute_params_;  // params_ itself in f32, else its 16-bit copy; w_ views it
  NamedTensors named_params_, named_grads_;
  DecoderWeights w_, g_;
  DecoderActivations acts_;  // forward()'s and backward()'s
  std::map<std::pair<int, int>, DecoderActivations> in_flight_;  // (chunk, micro): the pipeline's
  ShardedParameters* sharded_ = nullptr;  // ZeRO-3's, or null
  bool reshard_after_forward_ = true;     // ZeRO-3: blocks released after their forward
  std::set<int64_t> held_parts_;          // ZeRO-3: the parts w_ views now (gather_part to release_part)
  PartGradients* part_grads_ = nullptr;   // ZeRO 2 and 3's, or null
  GradReadyHook grad_ready_hook_;
  bool grad_ready_ = false;
  int64_t classifier_chunk_rows_ = 0;
  float target_loss_weight_ = 1.0f;
  MoeOptions moe_options_;
  RecomputePolicy recompute_;
  RouterLosses moe_loss_sums_;
  std::vector<double> expert_load_, routed_load_;
};

}  // namespace tessera
