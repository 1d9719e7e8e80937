// The decoder's driver: embedding, the blocks in order, the final norm and the fused classifier;
// backward in reverse, announcing each block's gradients as they become final.
#include "nn/decoder.h"

#include <algorithm>
#include <string>

#include "core/cuda/device.h"
#include "nn/activation_memory.h"
#include "nn/parameter_values.h"
#include "ops/norm.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_shard.h"
#include "ops/encoder.h"
#include "ops/logit_softcap.h"
#include "ops/matmul.h"
#include "ops/residual.h"

namespace tessera {
namespace {

// A context-parallel rank's rows (T_local, C) of a (maxT, C) position table: its two chunks of every
// sequence, chunk rank and chunk 2·cp-1-rank (nn/context_parallel.h). to_local copies them out of
// the table; otherwise they are added into it (a gradient).
void chunk_rows(Tensor& local, Tensor& table, CpPlace cp, bool to_local) {
  const int64_t C = table.size(1), chunk = local.size(0) / 2;
  const int64_t chunks[2] = {cp.rank, 2 * cp.size - 1 - cp.rank};
  for (int64_t k = 0; k < 2; ++k) {
    Tensor mine = local.view(k * chunk * C, {chunk, C}), theirs = table.view(chunks[k] * chunk * C, {chunk, C});
    if (to_local)
      copy_tensor(mine, theirs);
    else
      add_inplace(theirs, mine);
  }
}

}  // namespace

Decoder::Decoder(const ModelConfig& config) : Decoder(config, whole_decoder(config.num_layers)) {}

Decoder::Decoder(const ModelConfig& config, DecoderStage stage, TpPlace tp, EpPlace ep, ParamStorage storage)
    : config_(config), stage_(std::move(stage)), tp_place_(tp), ep_place_(ep) {
  config_.validate();
  TS_CHECK(!stage_.chunks.empty() && stage_.num_layers == config_.num_layers, "Decoder: a stage of ",
           stage_.num_layers, " blocks for a model of ", config_.num_layers);
  local_ = tp_local_config(config_, tp);
  names_ = decoder_names(config_, stage_);
  TS_CHECK(ep.size == 1 || (config_.moe.enabled() && config_.moe.num_experts % ep.size == 0), "Decoder: ",
           config_.moe.num_experts, " experts cannot be shared out over ", ep.size, " expert-parallel ranks");
  layout_ = decoder_layout(config_, stage_, tp, ep);
  if (storage == ParamStorage::sharded_later) return;
  set_params(Tensor::zeros({layout_.total()}));
  allocate_grads();
}

void Decoder::set_params(Tensor params) {
  params_ = std::move(params);
  named_params_ = layout_.views(params_);
  compute_params_ = compute_dtype_ == DType::f32 ? params_ : Tensor::zeros(params_.shape(), compute_dtype_, device_);
  w_ = decoder_weights(names_, layout_.views(compute_params_));
  // The routers' selection biases stay fp32 in every compute dtype (a 16-bit copy would lose their
  // small balancing steps): the blocks read them from the master weights.
  const DecoderWeights master = decoder_weights(names_, named_params_);
  for (size_t l = 0; l < w_.blocks.size(); ++l) w_.blocks[l].router_bias = master.blocks[l].router_bias;
  params_updated();
}

void Decoder::params_updated() {
  if (compute_dtype_ != DType::f32 && !sharded_) cast_copy(compute_params_, params_);
}

void Decoder::set_tensor_parallel(TensorParallel* mappings) {
  TS_CHECK(mappings == nullptr ? tp_place_.size == 1
                               : mappings->place().rank == tp_place_.rank && mappings->place().size == tp_place_.size,
           "Decoder: built for tp rank ", tp_place_.rank, " of ", tp_place_.size, ", given mappings for another place");
  tp_ = tp_place_.size > 1 ? mappings : nullptr;
}

void Decoder::set_context_parallel(ContextParallel* ring) {
  cp_ = ring && ring->place().size > 1 ? ring : nullptr;
}

void Decoder::set_fp8(const Fp8Options& options) {
  fp8_ = options.recipe == Fp8Recipe::off ? nullptr : std::make_unique<Fp8Scaling>(options, config_.num_layers, device_);
}

void Decoder::set_expert_parallel(ExpertParallel* dispatch) {
  TS_CHECK(dispatch == nullptr ? ep_place_.size == 1
                               : dispatch->place().rank == ep_place_.rank && dispatch->place().size == ep_place_.size,
           "Decoder: built for ep rank ", ep_place_.rank, " of ", ep_place_.size, ", given a dispatcher for another place");
  ep_ = ep_place_.size > 1 ? dispatch : nullptr;
}

void Decoder::to(Device device, DType compute) {
  const bool half = compute == DType::bf16 || compute == DType::f16;
  TS_CHECK(compute == DType::f32 || (half && device == Device::cuda), "model: compute dtype ", dtype_name(compute),
           " on the ", device == Device::cpu ? "CPU" : "GPU",
           " is not supported; the CPU computes in f32, the GPU in f32, bf16 or f16");
  const std::string cpu_only = gpu_unsupported(config_);
  TS_CHECK(device == Device::cpu || cpu_only.empty(), "model: ", cpu_only, "; run it with --device cpu");
  if (device == device_ && compute == compute_dtype_) return;
  device_ = device;
  compute_dtype_ = compute;
  acts_ = DecoderActivations();
  in_flight_.clear();
  if (sharded_) return;  // the parameters are ZeRO-3's shards, already where they compute
  TS_CHECK(params_.defined(), "Decoder::to: the parameters were left to ZeRO-3 (ParamStorage::sharded_later), "
                              "which has not taken them yet (set_sharded_parameters)");
  set_params(tensor_to(params_, device));
  if (part_grads_) return;  // ZeRO 2's gradients live in its buffers, on the shard's device
  const bool had_grads = grads_.defined();
  release_grads();
  if (had_grads) allocate_grads();  // zero-filled: gradients never carry over a move
}

void Decoder::allocate_grads() {
  grads_ = Tensor::zeros({layout_.total()}, DType::f32, device_);
  named_grads_ = layout_.views(grads_);
  g_ = decoder_weights(names_, named_grads_);
}

void Decoder::release_grads() {
  grads_ = Tensor();
  named_grads_.clear();
  g_ = DecoderWeights();
}

void Decoder::init_weights(uint64_t seed) {
  TS_CHECK(params_.defined(), "Decoder::init_weights: the parameters are ZeRO-3's shards (initialised there)");
  // Filled on the host, then copied to the device in one go when the model lives there.
  Tensor host = device_ == Device::cpu ? params_ : Tensor::zeros({layout_.total()});
  initial_values(config_, layout_, seed)({0, layout_.total()}, host.f32());
  if (device_ != Device::cpu) copy_tensor(params_, host);
  params_updated();
}

float Decoder::forward(const Tensor& tokens, const Tensor& targets, float dloss, const Tensor& doc_starts) {
  TS_CHECK(stage_.is_whole(), "Decoder::forward runs the whole model; a pipeline stage runs forward_chunk");
  TS_CHECK(tokens.ndim() == 2, "tokens must be (B,T), got ", shape_string(tokens.shape()));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TS_CHECK(T <= config_.max_seq_len, "sequence length ", T, " exceeds the model's context of ", config_.max_seq_len);
  TS_CHECK(targets.defined() || !sharded_, "Decoder::forward: inference under ZeRO-3 is not implemented; load the "
                                           "checkpoint into one process (tessera generate)");
  acts_.ensure(local_, B, T, stage_.chunks[0], device_, compute_dtype_, recompute_, seq_shards(), cp_place());
  keep_doc_starts(acts_, doc_starts);
  embed(acts_, tokens);
  // Inference (no targets) routes dropless; training and evaluation follow the capacity factor.
  const MoeOptions dropless{};
  acts_.dloss = dloss;
  forward_blocks(acts_, targets.defined() ? moe_options_ : dropless);
  grad_ready_ = false;
  if (!targets.defined()) {  // inference: every row's logits, kept for logits()
    TS_CHECK(!tp_ && !ep_ && !cp_, "Decoder::forward: inference under tensor, expert or context parallelism is not "
                                   "implemented; load the checkpoint into one process (tessera generate)");
    const int64_t N = B * T;
    classify(logits_buffer(N), acts_.final_norm.out.reshape({N, config_.channels}));
    return 0.0f;
  }
  if (dloss != 0.0f) count_moe_statistics(acts_);
  const double sum = classifier_forward(acts_, targets, dloss);
  grad_ready_ = dloss != 0.0f;
  return float(sum / double(B * T));
}

namespace {

// A device copy of host i32 `from` in `kept`, reusing its buffer when the shape matches. A copy, not a
// view of the caller's buffer: a pipeline refills that with the next micro-batch before backward.
void keep_copy(Tensor& kept, const Tensor& from, Device device) {
  if (!kept.defined() || kept.shape() != from.shape() || kept.device() != device)
    kept = Tensor::zeros(from.shape(), DType::i32, device);
  copy_tensor(kept, from);
}

}  // namespace

void Decoder::keep_doc_starts(DecoderActivations& a, const Tensor& doc_starts) const {
  const int64_t window = config_.attention_window, cp_size = cp_ ? cp_->place().size : 1;
  const bool windowed = window > 0 && a.T * cp_size > window;  // a window shorter than the sequences
  a.seq.doc_starts = a.seq.in_document = a.seq.window_starts = Tensor();
  if (!doc_starts.defined() && !windowed) return;
  TS_CHECK(!doc_starts.defined() || (doc_starts.dtype() == DType::i32 && doc_starts.shape() == Shape{a.B, a.T}),
           "Decoder: doc_starts must be (B,T) = (", a.B, ", ", a.T, ") i32, got ", shape_string(doc_starts.shape()));
  // Each token's first visible key under the window: the later of its document's start and its
  // position - window + 1 (true positions: a cp rank's share skips the other ranks' chunks).
  const std::vector<int32_t> at = cp_ ? cp_positions(a.T * cp_size, cp_->place()) : std::vector<int32_t>{};
  Tensor window_starts = Tensor::zeros({a.B, a.T}, DType::i32), in_document = Tensor::zeros({a.B, a.T}, DType::i32);
  for (int64_t b = 0; b < a.B; ++b)
    for (int64_t t = 0; t < a.T; ++t) {
      const int32_t position = at.empty() ? int32_t(t) : at[size_t(t)];
      const int32_t start = doc_starts.defined() ? doc_starts.data<int32_t>()[b * a.T + t] : 0;
      window_starts.data<int32_t>()[b * a.T + t] = std::max(start, int32_t(position - window + 1));
      in_document.data<int32_t>()[b * a.T + t] = position - start;
    }
  if (windowed) keep_copy(a.seq.window_starts, window_starts, device_);
  if (!doc_starts.defined()) return;
  keep_copy(a.seq.doc_starts, doc_starts, device_);
  // Learned positions restart with every document: a token's row is its distance from its start.
  if (config_.positions == PositionKind::learned && a.range.first == 0)
    keep_copy(a.seq.in_document, in_document, device_);
}

void Decoder::embed(DecoderActivations& a, const Tensor& tokens) {
  keep_copy(a.tokens, tokens, device_);  // read again by the embedding's backward
  gather_part(kEmbeddingBlock, a.range.first);
  // Under tensor parallelism a rank looks up its vocabulary rows; the sum over the group is the
  // embedding, the positions added (by rank 0) once (reduce-scattered under sequence parallelism).
  Tensor partial = all_rows_like(a.embedded, tp_);
  Tensor positions = row_parallel_bias(w_.positions, tp_);
  if (positions.defined() && a.seq.in_document.defined()) {
    // Under document masks each token reads the row of its position in its document: the table
    // looked up like a vocabulary, by those positions.
    encoder_forward(partial, a.tokens, w_.embed, Tensor(), first_vocab_row(), config_.padded_vocab_size());
    Tensor rows = Tensor::zeros(partial.shape(), partial.dtype(), device_);
    encoder_forward(rows, a.seq.in_document, positions, Tensor());
    add_inplace(partial, rows);
  } else {
    if (cp_ && positions.defined()) {  // the table's rows of this rank's positions
      Tensor table = positions;
      positions = Tensor::zeros({a.T, config_.channels}, table.dtype(), device_);
      chunk_rows(positions, table, cp_->place(), true);
    }
    encoder_forward(partial, a.tokens, w_.embed, positions, first_vocab_row(), config_.padded_vocab_size());
  }
  region_output(partial, a.embedded, tp_);
  if (config_.scaled_embeddings) scale_inplace(a.embedded, config_.embedding_scale());
  release_part(kEmbeddingBlock);
}

void Decoder::forward_blocks(DecoderActivations& a, const MoeOptions& moe) {
  // Each block's last residual add is fused with the norm that reads its output: the next block's
  // norm1, or the final norm after the last block; a chunk's last block before another chunk's
  // first is not (that norm runs on the next chunk, from its input), nor any block under ZeRO-3
  // (the norm's gain belongs to the next part): each block runs its norm1, the final norm follows.
  // Under post-norm a block's norms are its own: only the final norm is fused.
  const BlockRange r = a.range;
  const int64_t L = config_.num_layers;
  const bool fuse = !sharded_, pre = has_pre_norms(config_.norm_placement);
  auto norm_after = [&](int64_t l) {
    if (!fuse) return NextNorm{};
    if (l + 1 == L) return NextNorm{&a.final_norm, &w_.final_norm};
    if (l + 1 == r.end || !pre) return NextNorm{};
    return NextNorm{&a.blocks[size_t(l) + 1].norm1, &w_.blocks[size_t(l) + 1].norm1};
  };
  for (int64_t l = r.first; l < r.end; ++l) {
    const Tensor& x = l == r.first ? a.embedded : a.blocks[size_t(l) - 1].out;
    // The next part this chunk uses (another chunk's next block may be another rank's).
    gather_part(l, l + 1 < r.end || l + 1 == L ? l + 1 : kNoPart);
    if (pre && (l == r.first || !fuse)) norm_forward(config_, a.blocks[size_t(l)].norm1, x, w_.blocks[size_t(l)].norm1);
    block_forward(local_, moe, a.blocks[size_t(l)], x, w_.blocks[size_t(l)], block_positions(a.seq, config_, l),
                  norm_after(l), block_context(l));
    if (reshard_after_forward_ || a.dloss == 0.0f) release_part(l);  // else held until its backward
  }
  if (fuse || r.end != L) return;
  // The final part stays gathered through the classifier (and a training forward's backward).
  gather_part(L, names_.head.empty() ? kEmbeddingBlock : kNoPart);
  norm_forward(config_, a.final_norm, a.blocks[size_t(L) - 1].out, w_.final_norm);
}

double Decoder::classifier_forward(DecoderActivations& a, const Tensor& targets, float dloss) {
  const int64_t N = a.B * a.T, C = config_.channels, Vp = vocab_rows();
  TS_CHECK(targets.ndim() == 2 && targets.size(0) == a.B && targets.size(1) == a.T, "targets ",
           shape_string(targets.shape()), " must match tokens (", a.B, ", ", a.T, ")");
  TS_CHECK(dloss == 0.0f || grads_.defined() || part_grads_,
           "Decoder::forward with a loss gradient accumulates into the gradients; call zero_grad() first");
  // Under ZeRO-3: a tied classifier is the embedding (gathered again), and the gradient it writes
  // is the head's part's or, tied, the embedding's (which backward finishes).
  const int64_t L = config_.num_layers, classifier_part = names_.head.empty() ? kEmbeddingBlock : L;
  if (classifier_part != L) gather_part(classifier_part, kNoPart);
  if (dloss != 0.0f) bind_part_grads(classifier_part);
  // The fused classifier, a chunk of rows at a time: logits, losses and dlogits in place, then at
  // once (when training) the gradient into the final norm for backward() and the classifier's own,
  // so only a chunk's logits exist.
  const Tensor normed = region_input(a.final_norm.out, tp_).reshape({N, C});
  const Tensor& classifier = w_.classifier();
  Tensor dnormed_all = all_rows_like(a.scratch.dnormed, tp_);  // every row's, summed over the group below
  Tensor losses = a.losses.reshape({N}), dnormed = dnormed_all.reshape({N, C});
  Tensor& dclassifier = g_.head.defined() ? g_.head : g_.embed;
  const Tensor device_targets = tensor_to(targets, device_).reshape({N});
  const int64_t chunk = classifier_chunk(N);
  for (int64_t row = 0; row < N; row += chunk) {
    const int64_t rows = std::min(chunk, N - row);
    Tensor logits = logits_buffer(chunk).view(0, {rows, Vp}), chunk_losses = losses.view(row, {rows});
    const Tensor x = normed.view(row * C, {rows, C});
    classify(logits, x);
    cross_entropy(chunk_losses, logits, device_targets.view(row, {rows}), dloss * target_loss_weight_);
    if (dloss == 0.0f) continue;
    // The loss's gradient of the scaled logits, made the raw ones' (Cohere's logit_scale).
    if (config_.logit_scale > 0.0f) scale_inplace(logits, config_.logit_scale);
    Tensor dx = dnormed.view(row * C, {rows, C});
    matmul_backward(dx, dclassifier, g_.head_bias, logits, x, classifier);  // (no bias but Phi-2's)
  }
  // The final norm's output entered the (vocabulary-parallel) classifier's region.
  if (dloss != 0.0f) region_input_grad(dnormed_all, a.scratch.dnormed, tp_);
  if (classifier_part != L) release_part(classifier_part);
  // A pipeline's last stage holds its tied copy of the embedding for the classifier alone: the
  // copy's gradient of this micro-batch is complete.
  if (dloss != 0.0f && classifier_part != L && holds_tied_embedding_copy(config_, stage_))
    part_grads_final(classifier_part);
  if (dloss == 0.0f) release_part(L);
  double sum = 0.0;
  const Tensor host_losses = tensor_to(a.losses, Device::cpu);
  const float* loss_values = host_losses.f32();
  for (int64_t i = 0; i < N; ++i) sum += loss_values[i];
  return sum;
}

void Decoder::classify(Tensor& logits, const Tensor& normed) const {
  matmul_forward(logits, normed, w_.classifier(), w_.head_bias);
  if (config_.logit_scale > 0.0f) scale_inplace(logits, config_.logit_scale);
  if (config_.logit_softcap > 0.0f) logit_softcap(logits, config_.logit_softcap);
}

void Decoder::cross_entropy(Tensor& losses, Tensor& logits, const Tensor& targets, float dloss) {
  const float cap = config_.logit_softcap;
  if (!tp_) return softmax_cross_entropy(losses, logits, targets, config_.vocab_size, dloss, cap);
  // Vocabulary-parallel (Megatron): each rank holds a slice of every row's logits; the row's max,
  // its sum of exponentials and the target's logit are reduced over the group, never the logits.
  const int64_t N = logits.size(0);
  auto stat = [&] { return Tensor::zeros({N}, DType::f32, device_); };
  Tensor max = stat(), sum_exp = stat(), target_logit = stat(), global_max = stat();
  cross_entropy_shard_stats(max, sum_exp, target_logit, logits, targets, first_vocab_row(), config_.vocab_size);
  copy_tensor(global_max, max);
  tp_->max_over_group(global_max);
  cross_entropy_shard_rescale(sum_exp, max, global_max);
  tp_->sum_over_group(sum_exp);
  tp_->sum_over_group(target_logit);
  cross_entropy_shard_finish(losses, logits, targets, global_max, sum_exp, target_logit, first_vocab_row(),
                             config_.vocab_size, dloss, cap);
}

int64_t Decoder::classifier_chunk(int64_t rows) const {
  if (classifier_chunk_rows_ > 0) return std::min(classifier_chunk_rows_, rows);
  return classifier_chunk_rows(rows, vocab_rows(), compute_dtype_);
}

Tensor& Decoder::logits_buffer(int64_t rows) {
  const int64_t Vp = vocab_rows();
  Tensor& t = acts_.logits;
  if (!t.defined() || t.numel() != rows * Vp || t.device() != device_ || t.dtype() != compute_dtype_) {
    t = Tensor();  // free the old buffer first
    t = Tensor::zeros({rows, Vp}, compute_dtype_, device_);
  }
  return t;
}

void Decoder::backward() {
  TS_CHECK(grad_ready_, "Decoder::backward needs a forward with targets and a non-zero loss scale first");
  grad_ready_ = false;
  backward_blocks(acts_, /*announce=*/true);
}

void Decoder::backward_blocks(DecoderActivations& a, bool announce, bool defer) {
  DeferredWeightGrads* deferred = defer ? &a.deferred : nullptr;
  Tensor& dres = a.dresidual;  // gradient of the residual stream, flowing down
  auto grads_final_from = [&](const std::string& first_param) {
    if (announce && grad_ready_hook_) grad_ready_hook_(layout_.find(first_param).offset);
  };
  const BlockRange r = a.range;
  const int64_t L = config_.num_layers;
  if (r.end == L) {
    // The classifier's backward ran in forward: scratch.dnormed holds the gradient into the final norm's output.
    gather_part(L, r.end - 1);  // (ZeRO-3: still held since the forward)
    bind_part_grads(L);
    norm_backward(config_, dres, g_.final_norm, a.scratch.dnormed, a.blocks[size_t(r.end) - 1].out, w_.final_norm,
                  a.final_norm);
    release_part(L);
    part_grads_final(L);
    grads_final_from(names_.final_norm.weight);
  }
  // Each MoE layer's aux and z losses enter the objective as coef * (mean over MoE layers), with the
  // weight of this micro-batch's tokens: d objective / d loss_l = coef * dloss * tokens / layers.
  const int64_t moe_layers = config_.num_layers - config_.moe.first_dense_layers;
  const float per_layer = config_.moe.enabled() ? a.dloss * float(a.B * a.T) / float(moe_layers) : 0.0f;
  const MoeLossScales moe{moe_options_.aux_coef * per_layer, moe_options_.z_coef * per_layer};
  for (int64_t l = r.end; l-- > r.first;) {
    const Tensor& x = l == r.first ? a.embedded : a.blocks[size_t(l) - 1].out;
    BlockActivations& block = a.blocks[size_t(l)];
    gather_part(l, l > r.first ? l - 1 : kNoPart);
    bind_part_grads(l);
    const BlockWeights& w = w_.blocks[size_t(l)];
    const SequencePositions seq = block_positions(a.seq, config_, l);
    if (a.recompute.covers(l))
      block_recompute(local_, a.recompute.mode, moe_options_, block, x, w, seq, block_context(l));
    block_backward(local_, moe, dres, g_.blocks[size_t(l)], block, x, w, seq, a.scratch, deferred, block_context(l));
    release_part(l);
    part_grads_final(l);
    if (announce && grad_ready_hook_) grad_ready_hook_(layout_.block_range(l, l).begin);  // the block's first
  }
  if (r.first != 0) return;  // dres holds the gradient of the chunk's input
  bind_part_grads(kEmbeddingBlock);
  Tensor dembedded = region_output_grad(dres, tp_);
  if (config_.scaled_embeddings) scale_inplace(dembedded, config_.embedding_scale());
  if (g_.positions.defined() && a.seq.in_document.defined()) {  // rows by the positions in documents
    Tensor none;
    encoder_backward(g_.embed, none, dembedded, a.tokens, first_vocab_row(), config_.padded_vocab_size());
    encoder_backward(g_.positions, none, dembedded, a.seq.in_document);
  } else {
    Tensor dpositions = g_.positions;
    if (cp_ && dpositions.defined()) dpositions = Tensor::zeros({a.T, config_.channels}, DType::f32, device_);
    encoder_backward(g_.embed, dpositions, dembedded, a.tokens, first_vocab_row(), config_.padded_vocab_size());
    if (cp_ && dpositions.defined()) chunk_rows(dpositions, g_.positions, cp_->place(), false);
  }
  part_grads_final(kEmbeddingBlock);
  grads_final_from(names_.embed);
}

DecoderActivations& Decoder::in_flight(int chunk, int micro) {
  return const_cast<DecoderActivations&>(std::as_const(*this).in_flight(chunk, micro));
}

const DecoderActivations& Decoder::in_flight(int chunk, int micro) const {
  auto it = in_flight_.find({chunk, micro});
  TS_CHECK(it != in_flight_.end(), "Decoder: chunk ", chunk, " has no forward of micro-batch ", micro, " in flight");
  return it->second;
}

Tensor& Decoder::chunk_input(int chunk, int micro, int64_t batch, int64_t seq_len) {
  TS_CHECK(chunk >= 0 && size_t(chunk) < stage_.chunks.size(), "Decoder: chunk ", chunk, " of ", stage_.chunks.size());
  TS_CHECK(seq_len <= config_.max_seq_len, "sequence length ", seq_len, " exceeds the model's context of ",
           config_.max_seq_len);
  DecoderActivations& a = in_flight_[{chunk, micro}];
  a.ensure(local_, batch, seq_len, stage_.chunks[size_t(chunk)], device_, compute_dtype_, recompute_, seq_shards(),
           cp_place());
  return a.embedded;
}

double Decoder::forward_chunk(int chunk, int micro, const Tensor& tokens, const Tensor& targets, float dloss,
                              const Tensor& doc_starts) {
  TS_CHECK(dloss == 0.0f || grads_.defined() || part_grads_,
           "Decoder::forward_chunk with a loss gradient accumulates into the gradients; call zero_grad() first");
  const BlockRange r = stage_.chunks.at(size_t(chunk));
  if (r.first == 0) {
    TS_CHECK(tokens.ndim() == 2, "tokens must be (B,T), got ", shape_string(tokens.shape()));
    chunk_input(chunk, micro, tokens.size(0), tokens.size(1));
  }
  DecoderActivations& a = in_flight(chunk, micro);
  keep_doc_starts(a, doc_starts);
  if (r.first == 0) embed(a, tokens);
  a.dloss = dloss;
  forward_blocks(a, moe_options_);
  if (dloss != 0.0f) count_moe_statistics(a);
  return r.end == config_.num_layers ? classifier_forward(a, targets, dloss) : 0.0;
}

const Tensor& Decoder::chunk_losses(int chunk, int micro) const {
  TS_CHECK(stage_.chunks.at(size_t(chunk)).end == config_.num_layers, "Decoder::chunk_losses: chunk ", chunk,
           " does not end at the last block");
  return in_flight(chunk, micro).losses;
}

const Tensor& Decoder::chunk_output(int chunk, int micro) const {
  const DecoderActivations& a = in_flight(chunk, micro);
  return a.blocks[size_t(a.range.end) - 1].out;
}

Tensor& Decoder::chunk_output_grad(int chunk, int micro) { return in_flight(chunk, micro).dresidual; }

void Decoder::backward_chunk(int chunk, int micro) { backward_blocks(in_flight(chunk, micro), /*announce=*/false); }

void Decoder::backward_chunk_input(int chunk, int micro) {
  // The deferred weight gradients would run after their part was released and reduced.
  TS_CHECK(!part_grads_, "Decoder::backward_chunk_input: ZeRO 2 and 3 do not defer weight gradients (zero-bubble); "
                         "use another pipeline schedule");
  backward_blocks(in_flight(chunk, micro), /*announce=*/false, /*defer=*/true);
}

void Decoder::backward_chunk_weight(int chunk, int micro) { in_flight(chunk, micro).deferred.run(); }

const Tensor& Decoder::chunk_input_grad(int chunk, int micro) const { return in_flight(chunk, micro).dresidual; }

void Decoder::release_chunk(int chunk, int micro) { in_flight_.erase({chunk, micro}); }

void Decoder::count_moe_statistics(const DecoderActivations& a) {
  if (!config_.moe.enabled()) return;
  // Each MoE layer's slot in expert_load(): its index among the model's MoE layers.
  const size_t E = size_t(config_.moe.num_experts);
  expert_load_.resize(size_t(config_.num_layers - config_.moe.first_dense_layers) * E, 0.0);
  routed_load_.resize(expert_load_.size(), 0.0);
  for (int64_t l = a.range.first; l < a.range.end; ++l) {
    const MoeActivations& moe = a.blocks[size_t(l)].moe;
    if (!moe.out.defined()) continue;
    const size_t first = size_t(l - config_.moe.first_dense_layers) * E;
    const std::vector<int64_t> kept = moe_expert_load(moe);
    for (size_t e = 0; e < E; ++e) expert_load_[first + e] += double(kept[e]), routed_load_[first + e] += moe.routed[e];
    moe_loss_sums_.aux += moe.losses.aux * double(a.B);
    moe_loss_sums_.z += moe.losses.z * double(a.B);
  }
}

std::vector<std::pair<int64_t, std::vector<float>>> Decoder::router_bias_steps(const std::vector<double>& load,
                                                                                float rate) const {
  const size_t E = size_t(config_.moe.num_experts);
  TS_CHECK(load.size() == expert_load_.size(), "balance_router_biases: ", load.size(), " loads for ",
           expert_load_.size() / E, " MoE layers of ", E, " experts");
  std::vector<std::pair<int64_t, std::vector<float>>> steps;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const BlockNames& b = names_.blocks[size_t(l)];
    if (b.router_bias.empty()) continue;
    const size_t k = size_t(l - config_.moe.first_dense_layers) * E;
    double mean = 0.0;
    for (size_t e = 0; e < E; ++e) mean += load[k + e] / double(E);
    std::vector<float> step(E);
    for (size_t e = 0; e < E; ++e) {
      const double gap = mean - load[k + e];
      step[e] = gap > 0 ? rate : gap < 0 ? -rate : 0.0f;
    }
    steps.push_back({layout_.find(b.router_bias).offset, std::move(step)});
  }
  return steps;
}

void Decoder::balance_router_biases(const std::vector<double>& load, float rate) {
  if (config_.moe.router != RouterKind::sigmoid_bias || !config_.moe.enabled()) return;
  const auto steps = router_bias_steps(load, rate);
  if (sharded_) {
    for (const auto& [offset, step] : steps) sharded_->add_to_params(offset, step);
    return;
  }
  // The biases live in the fp32 master weights on the host or the device; a few values per layer.
  Tensor host = tensor_to(params_, Device::cpu);
  for (const auto& [offset, step] : steps)
    for (size_t e = 0; e < step.size(); ++e) host.f32()[offset + int64_t(e)] += step[e];
  if (device_ == Device::cpu) return params_updated();
  copy_tensor(params_, host);
  params_updated();
}

void Decoder::reduce_tp_partial_grads() {
  if (!part_grads_) sum_tp_partial_grads(std::nullopt);
}

void Decoder::sum_tp_partial_grads(std::optional<int64_t> part) {
  if (!tp_partial_grads_exist()) return;
  const int64_t replicas = kv_head_replicas(config_, tp_place_);
  // Each piece: a view of this rank's gradients and its place in one buffer, summed over the group
  // in one all-reduce. Every tp rank's layout has the same parts, so the buffers line up.
  std::vector<std::pair<Tensor, int64_t>> pieces;
  int64_t total = 0;
  auto wanted = [&](const std::string& name) { return !name.empty() && (!part || layout_.find(name).block == *part); };
  // A parameter every rank holds whole, summed whole, when `partial` says each rank has a share of it.
  auto whole = [&](const std::string& name, bool partial) {
    if (!wanted(name) || !partial) return;
    pieces.push_back({grad_of(name), total});
    total += pieces.back().first.numel();
  };
  // Sequence parallelism: the norms' gains and biases, each rank's from its positions.
  auto norm = [&](const LinearNames& n) { whole(n.weight, seq_shards() > 1), whole(n.bias, seq_shards() > 1); };
  for (const BlockNames& b : names_.blocks) norm(b.norm1), norm(b.norm2), norm(b.norm1_post), norm(b.norm2_post);
  norm(names_.final_norm);
  // Qwen3's query and key gains: each rank's from its own heads (OLMo 2's are its heads' own).
  const bool shared_gains = tp_place_.size > 1 && !config_.qk_norm_all_heads;
  for (const BlockNames& b : names_.blocks) whole(b.q_norm, shared_gains), whole(b.k_norm, shared_gains);
  // Latent attention's latents: each rank's from its own heads.
  for (const BlockNames& b : names_.blocks)
    for (const std::string* name : {&b.q_a.weight, &b.q_a_norm, &b.kv_a.weight, &b.kv_a_norm})
      whole(*name, tp_place_.size > 1);
  // Replicated kv heads: this rank's key and value rows (after its query rows), from its query heads
  // only, in the slot of its kv head; the slots' sums are the kv heads' gradients. OLMo 2's key gains
  // (its kv head's channels) likewise.
  const int64_t HS = config_.head_size(), kv_head = tp_place_.rank / replicas;
  for (const BlockNames& b : names_.blocks) {
    for (const std::string& name : {b.qkv.weight, b.qkv.bias}) {
      if (!wanted(name) || replicas == 1) continue;
      const Tensor g = grad_of(name);
      const int64_t cols = g.ndim() == 2 ? g.size(1) : 1, rows = 2 * HS * cols;
      pieces.push_back({g.view(local_.num_heads * HS * cols, {rows}), total + kv_head * rows});
      total += config_.kv_heads() * rows;
    }
    if (!wanted(b.k_norm) || replicas == 1 || !config_.qk_norm_all_heads) continue;
    pieces.push_back({grad_of(b.k_norm), total + kv_head * HS});
    total += config_.kv_heads() * HS;
  }
  if (total == 0) return;
  Tensor packed = Tensor::zeros({total}, DType::f32, device_);
  for (const auto& [g, at] : pieces) {
    Tensor slot = packed.view(at, g.shape());
    copy_tensor(slot, g);
  }
  tp_->sum_over_group(packed);
  for (auto& [g, at] : pieces) copy_tensor(g, packed.view(at, g.shape()));
}

Tensor Decoder::grad_of(const std::string& name) {
  if (!part_grads_) return named_grads_[layout_.index_of(name)].tensor;
  const ParamSpec& spec = layout_.find(name);
  return part_grads_->grads(spec.block).view(spec.offset - layout_.block_range(spec.block, spec.block).begin, spec.shape);
}

std::vector<OffsetRange> Decoder::expert_ranges() const { return tessera::expert_ranges(names_, layout_); }

std::vector<OffsetRange> Decoder::replicated_kv_ranges() const {
  const int64_t replicas = kv_head_replicas(config_, tp_place_);
  if (replicas == 1 || tp_place_.rank % replicas == 0) return {};
  std::vector<OffsetRange> ranges;
  const int64_t HS = config_.head_size(), q_rows = local_.num_heads * HS;
  for (const BlockNames& b : names_.blocks) {
    for (const std::string& name : {b.qkv.weight, b.qkv.bias}) {
      if (name.empty()) continue;
      const ParamSpec& spec = layout_.find(name);
      const int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
      ranges.push_back({spec.offset + q_rows * cols, spec.offset + (q_rows + 2 * HS) * cols});
    }
    if (config_.qk_norm_all_heads && !b.k_norm.empty()) {  // OLMo 2's key gains: the kv head's channels
      const ParamSpec& spec = layout_.find(b.k_norm);
      ranges.push_back({spec.offset, spec.offset + spec.numel()});
    }
  }
  return ranges;
}

void Decoder::zero_grad() {
  std::fill(expert_load_.begin(), expert_load_.end(), 0.0);
  std::fill(routed_load_.begin(), routed_load_.end(), 0.0);
  moe_loss_sums_ = RouterLosses{};
  release_all_parts();  // a step starts from the shards (an optimizer step since changed them)
  if (part_grads_) return part_grads_->zero_grad();
  if (!grads_.defined()) return allocate_grads();  // zero-filled
  if (device_ != Device::cpu) return device_memset_zero(grads_.raw_data(), grads_.bytes());
  float* g = grads_.f32();
  const int64_t n = grads_.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

}  // namespace tessera
