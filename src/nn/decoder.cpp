// The decoder's driver: embedding, the blocks in order, the final norm and the fused classifier;
// backward in reverse, announcing each block's gradients as they become final.
#include "nn/decoder.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/cuda/device.h"
#include "core/rng.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/encoder.h"
#include "ops/matmul.h"

namespace tessera {
namespace {

void fill_constant(Tensor& t, float value) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
}

}  // namespace

Decoder::Decoder(const ModelConfig& config) : config_(config) {
  config_.validate();
  names_ = decoder_names(config_);
  layout_ = decoder_layout(config_);
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
  if (compute_dtype_ != DType::f32) cast_copy(compute_params_, params_);
}

void Decoder::to(Device device, DType compute) {
  const bool half = compute == DType::bf16 || compute == DType::f16;
  TS_CHECK(compute == DType::f32 || (half && device == Device::cuda), "model: compute dtype ", dtype_name(compute),
           " on the ", device == Device::cpu ? "CPU" : "GPU",
           " is not supported; the CPU computes in f32, the GPU in f32, bf16 or f16");
  if (device == device_ && compute == compute_dtype_) return;
  device_ = device;
  compute_dtype_ = compute;
  set_params(tensor_to(params_, device));
  const bool had_grads = grads_.defined();
  release_grads();
  acts_ = DecoderActivations();
  tokens_ = Tensor();
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
  const float residual_std = 0.02f / std::sqrt(2.0f * float(config_.num_layers));
  // Filled on the host, then copied to the device in one go when the model lives there.
  Tensor host = device_ == Device::cpu ? params_ : Tensor::zeros({layout_.total()});
  const NamedTensors views = layout_.views(host);
  for (size_t i = 0; i < views.size(); ++i) {
    const ParamSpec& spec = layout_.specs()[i];
    Tensor t = views[i].tensor;
    switch (spec.init) {
      case ParamInit::normal: fill_normal(t.f32(), t.numel(), seed, spec.name, 0.0f, 0.02f); break;
      case ParamInit::residual: fill_normal(t.f32(), t.numel(), seed, spec.name, 0.0f, residual_std); break;
      case ParamInit::vocab_rows:
        fill_constant(t, 0.0f);
        fill_normal(t.f32(), config_.vocab_size * config_.channels, seed, spec.name, 0.0f, 0.02f);
        break;
      case ParamInit::zeros: fill_constant(t, 0.0f); break;
      case ParamInit::ones: fill_constant(t, 1.0f); break;
    }
  }
  if (device_ != Device::cpu) copy_tensor(params_, host);
  params_updated();
}

float Decoder::forward(const Tensor& tokens, const Tensor& targets, float dloss) {
  TS_CHECK(tokens.ndim() == 2, "tokens must be (B,T), got ", shape_string(tokens.shape()));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TS_CHECK(T <= config_.max_seq_len, "sequence length ", T, " exceeds the model's context of ", config_.max_seq_len);
  acts_.ensure(config_, B, T, device_, compute_dtype_, recompute_);
  tokens_ = tensor_to(tokens, device_);

  encoder_forward(acts_.embedded, tokens_, w_.embed, w_.positions);
  // Each block's last residual add is fused with the norm that reads its output: the next block's
  // norm1, or the final norm after the last block.
  const size_t L = acts_.blocks.size();
  auto norm_after = [&](size_t l) {
    if (l + 1 == L) return NextNorm{&acts_.final_norm, &w_.final_norm};
    return NextNorm{&acts_.blocks[l + 1].norm1, &w_.blocks[l + 1].norm1};
  };
  norm_forward(config_, acts_.blocks[0].norm1, acts_.embedded, w_.blocks[0].norm1);
  // Inference (no targets) routes dropless; training and evaluation follow the capacity factor.
  const MoeOptions dropless{};
  const MoeOptions& moe = targets.defined() ? moe_options_ : dropless;
  for (size_t l = 0; l < L; ++l)
    block_forward(config_, moe, acts_.blocks[l], block_input(l), w_.blocks[l], acts_.rotary, norm_after(l));
  dloss_ = dloss;
  if (dloss != 0.0f) count_expert_load();

  grad_ready_ = false;
  const int64_t N = B * T, C = config_.channels, Vp = config_.padded_vocab_size();
  const Tensor normed = acts_.final_norm.out.reshape({N, C});
  const Tensor& classifier = w_.classifier();
  Tensor no_bias;  // the classifier has none
  if (!targets.defined()) {  // inference: every row's logits, kept for logits()
    matmul_forward(logits_buffer(N), normed, classifier, no_bias);
    return 0.0f;
  }
  TS_CHECK(targets.shape() == tokens.shape(), "targets ", shape_string(targets.shape()), " must match tokens ",
           shape_string(tokens.shape()));
  TS_CHECK(dloss == 0.0f || grads_.defined(),
           "Decoder::forward with a loss gradient accumulates into the gradients; call zero_grad() first");
  // The fused classifier, a chunk of rows at a time: logits, losses and dlogits in place, then at
  // once (when training) the gradient into the final norm for backward() and the classifier's own,
  // so only a chunk's logits exist.
  Tensor losses = acts_.losses.reshape({N}), dnormed = acts_.scratch.dnormed.reshape({N, C});
  Tensor& dclassifier = g_.head.defined() ? g_.head : g_.embed;
  const Tensor device_targets = tensor_to(targets, device_).reshape({N});
  const int64_t chunk = classifier_chunk(N);
  for (int64_t row = 0; row < N; row += chunk) {
    const int64_t rows = std::min(chunk, N - row);
    Tensor logits = logits_buffer(chunk).view(0, {rows, Vp}), chunk_losses = losses.view(row, {rows});
    const Tensor x = normed.view(row * C, {rows, C});
    matmul_forward(logits, x, classifier, no_bias);
    softmax_cross_entropy(chunk_losses, logits, device_targets.view(row, {rows}), config_.vocab_size, dloss);
    if (dloss == 0.0f) continue;
    Tensor dx = dnormed.view(row * C, {rows, C});
    matmul_backward(dx, dclassifier, no_bias, logits, x, classifier);
  }
  grad_ready_ = dloss != 0.0f;
  double sum = 0.0;
  const Tensor host_losses = tensor_to(acts_.losses, Device::cpu);
  const float* loss_values = host_losses.f32();
  for (int64_t i = 0; i < N; ++i) sum += loss_values[i];
  return float(sum / double(N));
}

const Tensor& Decoder::block_input(size_t l) const {
  return l == 0 ? acts_.embedded : acts_.blocks[l - 1].out;
}

int64_t Decoder::classifier_chunk(int64_t rows) const {
  if (classifier_chunk_rows_ > 0) return std::min(classifier_chunk_rows_, rows);
  const int64_t budget = int64_t(1) << 30;  // bytes of logits at a time
  const int64_t row_bytes = config_.padded_vocab_size() * int64_t(dtype_size(compute_dtype_));
  return std::clamp<int64_t>(budget / row_bytes, 1, rows);
}

Tensor& Decoder::logits_buffer(int64_t rows) {
  const int64_t Vp = config_.padded_vocab_size();
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
  Tensor& dres = acts_.dresidual;  // gradient of the residual stream, flowing down
  auto grads_final_from = [&](const std::string& first_param) {
    if (grad_ready_hook_) grad_ready_hook_(layout_.find(first_param).offset);
  };

  // The classifier's backward ran in forward: scratch.dnormed holds the gradient into the final norm's output.
  const size_t L = acts_.blocks.size();
  norm_backward(config_, dres, g_.final_norm, acts_.scratch.dnormed, acts_.blocks[L - 1].out, w_.final_norm,
                acts_.final_norm);
  grads_final_from(names_.final_norm.weight);
  // Each MoE layer's aux and z losses enter the objective as coef * (mean over MoE layers), with the
  // weight of this micro-batch's tokens: d objective / d loss_l = coef * dloss * tokens / layers.
  const int64_t moe_layers = config_.num_layers - config_.moe.first_dense_layers;
  const float per_layer = config_.moe.enabled() ? dloss_ * float(acts_.B * acts_.T) / float(moe_layers) : 0.0f;
  const MoeLossScales moe{moe_options_.aux_coef * per_layer, moe_options_.z_coef * per_layer};
  for (size_t l = L; l-- > 0;) {
    if (acts_.recompute.covers(int64_t(l)))
      block_recompute(config_, acts_.recompute.mode, moe_options_, acts_.blocks[l], block_input(l), w_.blocks[l],
                      acts_.rotary);
    block_backward(config_, moe, dres, g_.blocks[l], acts_.blocks[l], block_input(l), w_.blocks[l], acts_.rotary,
                   acts_.scratch);
    grads_final_from(names_.blocks[l].norm1.weight);
  }
  encoder_backward(g_.embed, g_.positions, dres, tokens_);
  grads_final_from(names_.embed);
}

RouterLosses Decoder::moe_losses() const {
  RouterLosses mean;
  int64_t layers = 0;
  for (const BlockActivations& a : acts_.blocks) {
    if (!a.moe.out.defined()) continue;
    mean.aux += a.moe.losses.aux;
    mean.z += a.moe.losses.z;
    ++layers;
  }
  if (layers > 0) mean.aux /= double(layers), mean.z /= double(layers);
  return mean;
}

void Decoder::count_expert_load() {
  if (!config_.moe.enabled()) return;
  const size_t E = size_t(config_.moe.num_experts);
  expert_load_.resize(size_t(config_.num_layers - config_.moe.first_dense_layers) * E, 0.0);
  size_t k = 0;
  for (const BlockActivations& a : acts_.blocks) {
    if (!a.moe.out.defined()) continue;
    for (int64_t load : moe_expert_load(a.moe)) expert_load_[k++] += double(load);
    dropped_ += double(moe_dropped(a.moe, config_.moe.top_k));
  }
}

void Decoder::balance_router_biases(const std::vector<double>& load, float rate) {
  if (config_.moe.router != RouterKind::sigmoid_bias || !config_.moe.enabled()) return;
  const size_t E = size_t(config_.moe.num_experts);
  TS_CHECK(load.size() == expert_load_.size(), "balance_router_biases: ", load.size(), " loads for ",
           expert_load_.size() / E, " MoE layers of ", E, " experts");
  // The biases live in the fp32 master weights on the host or the device; a few values per layer.
  Tensor host = tensor_to(params_, Device::cpu);
  size_t k = 0;
  for (const BlockNames& b : names_.blocks) {
    if (b.router_bias.empty()) continue;
    float* bias = host.f32() + layout_.find(b.router_bias).offset;
    double mean = 0.0;
    for (size_t e = 0; e < E; ++e) mean += load[k + e] / double(E);
    for (size_t e = 0; e < E; ++e) {
      const double gap = mean - load[k + e];
      bias[e] += gap > 0 ? rate : gap < 0 ? -rate : 0.0f;
    }
    k += E;
  }
  if (device_ == Device::cpu) return params_updated();
  copy_tensor(params_, host);
  params_updated();
}

void Decoder::zero_grad() {
  std::fill(expert_load_.begin(), expert_load_.end(), 0.0);
  dropped_ = 0.0;
  if (!grads_.defined()) return allocate_grads();  // zero-filled
  if (device_ != Device::cpu) return device_memset_zero(grads_.raw_data(), grads_.bytes());
  float* g = grads_.f32();
  const int64_t n = grads_.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

}  // namespace tessera
