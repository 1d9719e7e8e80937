// The decoder under ZeRO 2 and 3 (nn/sharded_parameters.h): its gradient views (and under ZeRO-3
// its weight views) of one part at a time, bound to the buffers the part gradients and sharded
// parameters hand out and dropped again, so that nothing of a released part stays allocated
// through the decoder.
#include "nn/decoder.h"

#include "ops/cast.h"

namespace tessera {
namespace {

// Views of `part`'s parameters in `flat`, a buffer of the part's layout range.
NamedTensors part_views(const ParameterLayout& layout, int64_t part, const Tensor& flat) {
  const int64_t begin = layout.block_range(part, part).begin;
  NamedTensors views;
  for (const ParamSpec& s : layout.specs())
    if (s.block == part) views.push_back({s.name, flat.view(s.offset - begin, s.shape)});
  return views;
}

// to's roles of `part` become from's.
void assign_part(DecoderWeights& to, const DecoderWeights& from, int64_t part) {
  if (part == kEmbeddingBlock) {
    to.embed = from.embed;
    to.positions = from.positions;
  } else if (part == int64_t(to.blocks.size())) {
    to.head = from.head;
    to.head_bias = from.head_bias;
    to.final_norm = from.final_norm;
  } else {
    to.blocks[size_t(part)] = from.blocks[size_t(part)];
  }
}

DecoderWeights no_weights(int64_t blocks) {
  DecoderWeights none;
  none.blocks.resize(size_t(blocks));
  return none;
}

}  // namespace

void Decoder::set_part_gradients(PartGradients* grads) {
  TS_CHECK(grads != nullptr && part_grads_ == nullptr, "Decoder::set_part_gradients: set once");
  part_grads_ = grads;
  release_grads();
  g_ = no_weights(config_.num_layers);
}

void Decoder::set_sharded_parameters(ShardedParameters* sharded, bool reshard_after_forward) {
  TS_CHECK(sharded != nullptr && sharded_ == nullptr, "Decoder::set_sharded_parameters: a model is sharded once");
  TS_CHECK(part_grads_ != nullptr, "Decoder::set_sharded_parameters: set_part_gradients comes first");
  sharded_ = sharded;
  reshard_after_forward_ = reshard_after_forward;
  params_ = Tensor();
  compute_params_ = Tensor();
  named_params_.clear();
  w_ = no_weights(config_.num_layers);
}

void Decoder::gather_part(int64_t part, int64_t next) {
  if (!sharded_) return;
  const Tensor master = sharded_->gather(part, next);  // f32
  if (!held_parts_.insert(part).second) return;  // w_ views it since an earlier gather
  Tensor compute = master;
  if (compute_dtype_ != DType::f32) {
    compute = Tensor::zeros(master.shape(), compute_dtype_, device_);
    cast_copy(compute, master);
  }
  assign_part(w_, decoder_part_weights(names_, part_views(layout_, part, compute), part), part);
  // The routers' selection biases stay fp32 in every compute dtype (see set_params).
  if (part < 0 || part >= config_.num_layers) return;
  const std::string& bias = names_.blocks[size_t(part)].router_bias;
  if (bias.empty()) return;
  const ParamSpec& spec = layout_.find(bias);
  w_.blocks[size_t(part)].router_bias = master.view(spec.offset - layout_.block_range(part, part).begin, spec.shape);
}

void Decoder::release_part(int64_t part) {
  if (!sharded_) return;
  assign_part(w_, no_weights(config_.num_layers), part);
  held_parts_.erase(part);
  sharded_->release(part);
}

void Decoder::release_all_parts() {
  while (!held_parts_.empty()) release_part(*held_parts_.begin());
}

void Decoder::bind_part_grads(int64_t part) {
  if (!part_grads_) return;
  assign_part(g_, decoder_part_weights(names_, part_views(layout_, part, part_grads_->grads(part)), part), part);
}

void Decoder::part_grads_final(int64_t part) {
  if (!part_grads_) return;
  sum_tp_partial_grads(part);  // before the dp reduction: every rank of the tp group's share
  assign_part(g_, no_weights(config_.num_layers), part);
  part_grads_->grads_final(part);
}

}  // namespace tessera
