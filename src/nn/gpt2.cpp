// GPT-2 forward and backward, composed from the ops in src/ops/.
#include "nn/gpt2.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "core/cuda/device.h"
#include "core/rng.h"
#include "ops/attention.h"
#include "ops/cast.h"
#include "ops/cross_entropy.h"
#include "ops/encoder.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"
#include "ops/residual.h"

namespace tessera {
namespace {

ParameterLayout gpt2_layout(const GPT2Config& c) {
  const int64_t C = c.channels;
  ParameterLayout layout;
  layout.add("wte", {c.padded_vocab_size(), C});
  layout.add("wpe", {c.max_seq_len, C});
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "h." + std::to_string(l) + ".";
    layout.add(p + "ln_1.weight", {C});
    layout.add(p + "ln_1.bias", {C});
    layout.add(p + "attn.c_attn.weight", {3 * C, C});
    layout.add(p + "attn.c_attn.bias", {3 * C});
    layout.add(p + "attn.c_proj.weight", {C, C});
    layout.add(p + "attn.c_proj.bias", {C});
    layout.add(p + "ln_2.weight", {C});
    layout.add(p + "ln_2.bias", {C});
    layout.add(p + "mlp.c_fc.weight", {4 * C, C});
    layout.add(p + "mlp.c_fc.bias", {4 * C});
    layout.add(p + "mlp.c_proj.weight", {C, 4 * C});
    layout.add(p + "mlp.c_proj.bias", {C});
  }
  layout.add("ln_f.weight", {C});
  layout.add("ln_f.bias", {C});
  return layout;
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void fill_constant(Tensor& t, float value) {
  float* p = t.f32();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = value;
}

}  // namespace

GPT2::GPT2(const GPT2Config& config) : config_(config), layout_(gpt2_layout(config)) {
  config_.validate();
  set_params(Tensor::zeros({layout_.total()}));
  allocate_grads();
}

void GPT2::set_params(Tensor params) {
  params_ = std::move(params);
  named_params_ = layout_.views(params_);
  compute_params_ = compute_dtype_ == DType::f32 ? params_ : Tensor::zeros(params_.shape(), compute_dtype_, device_);
  w_ = weights_of(layout_.views(compute_params_));
  params_updated();
}

void GPT2::params_updated() {
  if (compute_dtype_ != DType::f32) cast_copy(compute_params_, params_);
}

void GPT2::to(Device device, DType compute) {
  const bool half = compute == DType::bf16 || compute == DType::f16;
  TS_CHECK(compute == DType::f32 || (half && device == Device::cuda), "GPT2: compute dtype ", dtype_name(compute),
           " on the ", device == Device::cpu ? "CPU" : "GPU",
           " is not supported; the CPU computes in f32, the GPU in f32, bf16 or f16");
  if (device == device_ && compute == compute_dtype_) return;
  device_ = device;
  compute_dtype_ = compute;
  set_params(tensor_to(params_, device));
  const bool had_grads = grads_.defined();
  release_grads();
  acts_ = GPT2Activations();
  tokens_ = Tensor();
  if (had_grads) allocate_grads();  // zero-filled: gradients never carry over a move
}

void GPT2::allocate_grads() {
  grads_ = Tensor::zeros({layout_.total()}, DType::f32, device_);
  named_grads_ = layout_.views(grads_);
  g_ = weights_of(named_grads_);
}

void GPT2::release_grads() {
  grads_ = Tensor();
  named_grads_.clear();
  g_ = GPT2Weights();
}

GPT2Weights GPT2::weights_of(const NamedTensors& named) const {
  size_t i = 0;
  auto next = [&] { return named[i++].tensor; };
  GPT2Weights w;
  w.wte = next();
  w.wpe = next();
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    GPT2LayerWeights lw;
    lw.ln1_w = next(), lw.ln1_b = next();
    lw.qkv_w = next(), lw.qkv_b = next();
    lw.attproj_w = next(), lw.attproj_b = next();
    lw.ln2_w = next(), lw.ln2_b = next();
    lw.fc_w = next(), lw.fc_b = next();
    lw.fcproj_w = next(), lw.fcproj_b = next();
    w.layers.push_back(lw);
  }
  w.lnf_w = next(), w.lnf_b = next();
  return w;
}

void GPT2::init_weights(uint64_t seed) {
  const float residual_std = 0.02f / std::sqrt(2.0f * float(config_.num_layers));
  // Filled on the host, then copied to the device in one go when the model lives there.
  Tensor host = device_ == Device::cpu ? params_ : Tensor::zeros({layout_.total()});
  for (NamedTensor& p : layout_.views(host)) {
    Tensor& t = p.tensor;
    if (p.name == "wte") {
      fill_normal(t.f32(), config_.vocab_size * config_.channels, seed, p.name, 0.0f, 0.02f);
    } else if (ends_with(p.name, ".bias")) {
      fill_constant(t, 0.0f);
    } else if (ends_with(p.name, "ln_1.weight") || ends_with(p.name, "ln_2.weight") || p.name == "ln_f.weight") {
      fill_constant(t, 1.0f);
    } else {
      bool residual_projection = ends_with(p.name, "attn.c_proj.weight") || ends_with(p.name, "mlp.c_proj.weight");
      fill_normal(t.f32(), t.numel(), seed, p.name, 0.0f, residual_projection ? residual_std : 0.02f);
    }
  }
  if (device_ != Device::cpu) copy_tensor(params_, host);
  params_updated();
}

float GPT2::forward(const Tensor& tokens, const Tensor& targets, float dloss) {
  TS_CHECK(tokens.ndim() == 2, "tokens must be (B,T), got ", shape_string(tokens.shape()));
  const int64_t B = tokens.size(0), T = tokens.size(1);
  TS_CHECK(T <= config_.max_seq_len, "sequence length ", T, " exceeds the model's context of ", config_.max_seq_len);
  acts_.ensure(config_, B, T, device_, compute_dtype_);
  tokens_ = tensor_to(tokens, device_);
  const int NH = int(config_.num_heads);

  encoder_forward(acts_.encoded, tokens_, w_.wte, w_.wpe);
  // Each residual add is fused with the LayerNorm that reads its sum: the attention branch's with
  // ln_2, the MLP branch's with the next layer's ln_1 (ln_f after the last layer).
  struct NormOut {
    Tensor *out, *mean, *rstd;
    const Tensor *weight, *bias;
  };
  auto norm_before = [&](size_t l) {
    if (l == w_.layers.size()) return NormOut{&acts_.lnf, &acts_.lnf_mean, &acts_.lnf_rstd, &w_.lnf_w, &w_.lnf_b};
    GPT2LayerActivations& a = acts_.layers[l];
    return NormOut{&a.ln1, &a.ln1_mean, &a.ln1_rstd, &w_.layers[l].ln1_w, &w_.layers[l].ln1_b};
  };
  NormOut first = norm_before(0);
  layernorm_forward(*first.out, *first.mean, *first.rstd, acts_.encoded, *first.weight, *first.bias);
  const Tensor* residual = &acts_.encoded;
  for (size_t l = 0; l < w_.layers.size(); ++l) {
    GPT2LayerWeights& lw = w_.layers[l];
    GPT2LayerActivations& a = acts_.layers[l];
    matmul_forward(a.qkv, a.ln1, lw.qkv_w, lw.qkv_b);
    attention_forward(a.atty, a.lse, a.qkv, NH);
    matmul_forward(a.attproj, a.atty, lw.attproj_w, lw.attproj_b);
    residual_layernorm_forward(a.residual2, a.ln2, a.ln2_mean, a.ln2_rstd, *residual, a.attproj, lw.ln2_w, lw.ln2_b);
    matmul_gelu_forward(a.fch_gelu, a.fch, a.ln2, lw.fc_w, lw.fc_b);
    matmul_forward(a.fcproj, a.fch_gelu, lw.fcproj_w, lw.fcproj_b);
    NormOut next = norm_before(l + 1);
    residual_layernorm_forward(a.residual3, *next.out, *next.mean, *next.rstd, a.residual2, a.fcproj, *next.weight,
                               *next.bias);
    residual = &a.residual3;
  }

  grad_ready_ = false;
  const int64_t N = B * T, C = config_.channels, Vp = config_.padded_vocab_size();
  const Tensor lnf = acts_.lnf.reshape({N, C});
  Tensor no_bias;  // the classifier (tied to wte) has none
  if (!targets.defined()) {  // inference: every row's logits, kept for logits()
    matmul_forward(logits_buffer(N), lnf, w_.wte, no_bias);
    return 0.0f;
  }
  TS_CHECK(targets.shape() == tokens.shape(), "targets ", shape_string(targets.shape()), " must match tokens ",
           shape_string(tokens.shape()));
  TS_CHECK(dloss == 0.0f || grads_.defined(),
           "GPT2::forward with a loss gradient accumulates into the gradients; call zero_grad() first");
  // The fused classifier, a chunk of rows at a time: logits, losses and dlogits in place, then at
  // once (when training) dlnf for backward() and wte's gradient, so only a chunk's logits exist.
  Tensor losses = acts_.losses.reshape({N}), dlnf = acts_.dbtc.reshape({N, C});
  const Tensor device_targets = tensor_to(targets, device_).reshape({N});
  const int64_t chunk = classifier_chunk(N);
  for (int64_t row = 0; row < N; row += chunk) {
    const int64_t rows = std::min(chunk, N - row);
    Tensor logits = logits_buffer(chunk).view(0, {rows, Vp}), chunk_losses = losses.view(row, {rows});
    const Tensor x = lnf.view(row * C, {rows, C});
    matmul_forward(logits, x, w_.wte, no_bias);
    softmax_cross_entropy(chunk_losses, logits, device_targets.view(row, {rows}), config_.vocab_size, dloss);
    if (dloss == 0.0f) continue;
    Tensor dx = dlnf.view(row * C, {rows, C});
    matmul_backward(dx, g_.wte, no_bias, logits, x, w_.wte);
  }
  grad_ready_ = dloss != 0.0f;
  double sum = 0.0;
  const Tensor host_losses = tensor_to(acts_.losses, Device::cpu);
  const float* loss_values = host_losses.f32();
  for (int64_t i = 0; i < N; ++i) sum += loss_values[i];
  return float(sum / double(N));
}

int64_t GPT2::classifier_chunk(int64_t rows) const {
  if (classifier_chunk_rows_ > 0) return std::min(classifier_chunk_rows_, rows);
  const int64_t budget = int64_t(1) << 30;  // bytes of logits at a time
  const int64_t row_bytes = config_.padded_vocab_size() * int64_t(dtype_size(compute_dtype_));
  return std::clamp<int64_t>(budget / row_bytes, 1, rows);
}

Tensor& GPT2::logits_buffer(int64_t rows) {
  const int64_t Vp = config_.padded_vocab_size();
  Tensor& t = acts_.logits;
  if (!t.defined() || t.numel() != rows * Vp || t.device() != device_ || t.dtype() != compute_dtype_) {
    t = Tensor();  // free the old buffer first
    t = Tensor::zeros({rows, Vp}, compute_dtype_, device_);
  }
  return t;
}

void GPT2::backward() {
  TS_CHECK(grad_ready_, "GPT2::backward needs a forward with targets and a non-zero loss scale first");
  grad_ready_ = false;
  const int NH = int(config_.num_heads);
  const int64_t B = acts_.B, T = acts_.T, C = config_.channels;
  Tensor& dres = acts_.dresidual;  // gradient of the residual stream, flowing down
  Tensor& dbtc = acts_.dbtc;       // gradient into a norm's output / attention output
  Tensor& dnorm = acts_.dnorm;     // gradient out of a norm, to add into dres
  Tensor dqkv = acts_.dwide.view(0, {B, T, 3 * C});
  Tensor dfc = acts_.dwide;

  // The classifier's backward ran in forward: dbtc holds the gradient into ln_f's output.
  const Tensor& last = w_.layers.empty() ? acts_.encoded : acts_.layers.back().residual3;
  layernorm_backward(dres, g_.lnf_w, g_.lnf_b, dbtc, last, w_.lnf_w, acts_.lnf_mean, acts_.lnf_rstd);
  auto grads_final_from = [&](const std::string& first_param) {
    if (grad_ready_hook_) grad_ready_hook_(layout_.find(first_param).offset);
  };
  grads_final_from("ln_f.weight");

  for (size_t l = w_.layers.size(); l-- > 0;) {
    GPT2LayerWeights& lw = w_.layers[l];
    GPT2LayerWeights& lg = g_.layers[l];
    GPT2LayerActivations& a = acts_.layers[l];
    const Tensor& residual = l == 0 ? acts_.encoded : acts_.layers[l - 1].residual3;
    // MLP: residual3 = residual2 + c_proj(gelu(c_fc(ln_2(residual2))))
    matmul_backward_dgelu(dfc, lg.fcproj_w, lg.fcproj_b, dres, a.fch_gelu, lw.fcproj_w, a.fch);
    matmul_backward(dbtc, lg.fc_w, lg.fc_b, dfc, a.ln2, lw.fc_w);
    layernorm_backward(dnorm, lg.ln2_w, lg.ln2_b, dbtc, a.residual2, lw.ln2_w, a.ln2_mean, a.ln2_rstd);
    add_inplace(dres, dnorm);
    // Attention: residual2 = residual + c_proj(attention(c_attn(ln_1(residual))))
    matmul_backward(dbtc, lg.attproj_w, lg.attproj_b, dres, a.atty, lw.attproj_w);
    attention_backward(dqkv, dbtc, a.qkv, a.atty, a.lse, NH);
    matmul_backward(dbtc, lg.qkv_w, lg.qkv_b, dqkv, a.ln1, lw.qkv_w);
    layernorm_backward(dnorm, lg.ln1_w, lg.ln1_b, dbtc, residual, lw.ln1_w, a.ln1_mean, a.ln1_rstd);
    add_inplace(dres, dnorm);
    grads_final_from("h." + std::to_string(l) + ".ln_1.weight");
  }
  encoder_backward(g_.wte, g_.wpe, dres, tokens_);
  grads_final_from("wte");
}

void GPT2::zero_grad() {
  if (!grads_.defined()) return allocate_grads();  // zero-filled
  if (device_ != Device::cpu) return device_memset_zero(grads_.raw_data(), grads_.bytes());
  float* g = grads_.f32();
  const int64_t n = grads_.numel();
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < n; ++i) g[i] = 0.0f;
}

}  // namespace tessera
