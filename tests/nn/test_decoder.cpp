// The block-structured decoder across families (GPT-2, Llama, Qwen, OLMo 2, SmolLM3, Mixtral, OLMoE,
// DeepSeek-style MoE): every gradient against finite differences, bitwise-equal gradients under
// activation recomputation, KV-cache generation against full re-computation, pipeline stages run chunk
// by chunk against the whole model, published preset sizes and block ranges, documents kept apart
// under document masks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <numeric>

#include "core/cuda/device.h"
#include "core/ignored_target.h"
#include "core/rng.h"
#include "nn/decoder.h"
#include "nn/model_presets.h"
#include "nn/nn_testing.h"
#include "ops/op_testing.h"
#include "support/test_support.h"

namespace tessera {
namespace {

// Small models of each family; T up to 8, vocab 50 (Vp 128). deepseek-v3: latent attention with a
// query latent and value heads narrower than the q/k heads, the routed output scaled; deepseek-v2:
// latent attention without a query latent, values as wide as the q/k heads (no padding), YaRN, softmax
// routing whose weights are not renormalised, the routed output scaled.
ModelConfig family(const std::string& name) {
  const bool llama = name == "llama" || name == "llama-tied" || name == "qwen2" || name == "qwen3" || name == "olmo2" ||
                     name == "smollm3" || name == "geglu" || name == "sandwich";
  ModelConfig c = model_preset(name == "gpt2" ? "gpt2-tiny" : llama ? "llama-tiny"
                               : name == "mixtral" ? "mixtral-tiny"
                               : name == "olmoe" ? "olmoe-tiny"
                               : name == "qwen2-moe" ? "qwen2-moe-tiny"
                               : name == "glm4-moe" ? "glm4.5-tiny"
                               : name == "gemma" ? "gemma-tiny"
                               : name == "gemma2" ? "gemma2-tiny"
                               : name == "gemma3" ? "gemma3-tiny"
                               : name == "starcoder2" ? "starcoder2-tiny"
                               : name.starts_with("gpt-neox") ? "pythia-tiny"
                               : name == "cohere" ? "cohere-tiny"
                               : name == "cohere2" ? "cohere2-tiny"
                               : name == "phi2" ? "phi2-tiny"
                               : name == "deepseek" ? "deepseek-moe-tiny"
                               : name == "deepseek-v2" ? "deepseek-v2-tiny" : "deepseek-v3-tiny");
  c.num_layers = name == "deepseek" || name == "deepseek-v3" || name.starts_with("gemma") ? 3 : 2;
  if (name.starts_with("gemma") && name != "gemma")  // T up to 8: the window bites
    c.attention_window = 3, c.global_layers = {name == "gemma2" ? 1 : 2};
  if (name == "starcoder2" || name == "cohere2") c.attention_window = 3;  // cohere2: block 1 global, without RoPE
  if (name == "gpt-neox-sequential") c.parallel_residual = false;  // its use_parallel_residual false
  // Every expert chosen (so every group kept): a finite difference through blocks of latent attention
  // moves the routers' near-tied choices otherwise (the deepseek and mixtral families check the choosing).
  if (name.starts_with("deepseek-v") || name == "glm4-moe")
    c.moe.top_k = c.moe.num_experts, c.moe.kept_groups = c.moe.groups;
  if (name == "olmoe" || name == "qwen2-moe") c.moe.num_experts = 4;  // as mixtral's: 8 leave near-tied choices
                                                                      // a difference moves
  if (name == "deepseek-v2") {
    c.mla.v_dim = c.head_size();  // values as wide as the q/k heads: no padding
    // YaRN with both of DeepSeek's factors away from 1: the rotated channels' and every score's.
    c.rope = {.theta = 10000, .factor = 40, .original_max_positions = 4096, .yarn = true, .mscale = 1,
              .mscale_all_dim = 0.5f};
  }
  c.vocab_size = 50;
  c.max_seq_len = 8;
  if (name == "llama") {  // Llama 3.1 scaling with every band in use at head size 8
    c.rope.theta = 500000.0f;
    c.rope.factor = 8.0f;
    c.rope.original_max_positions = 64;
  }
  if (name == "llama-tied") c.tied_embeddings = true, c.num_kv_heads = 4;
  if (name == "qwen2") c.qkv_bias = true;
  if (name == "qwen3") c.qk_norm = true, c.head_dim = 12;  // heads wider than C / NH = 8
  if (name == "smollm3") c.nope_layers = {1};  // the second block without RoPE
  if (name == "geglu") c.mlp = MlpKind::geglu;  // Gemma's MLP
  if (name == "sandwich") c.norm_placement = NormPlacement::sandwich;  // Gemma's norms before and after
  if (name == "olmo2")  // norms after the sublayers, q/k norms over all heads
    c.norm_placement = NormPlacement::post, c.qk_norm = true, c.qk_norm_all_heads = true;
  return c;
}

using testing::Batch;
using testing::make_batch;

// Every parameter random (gains and biases too); padding rows stay 0; routers get large weights so
// a small perturbation never changes which experts a token picks.
void randomise(Decoder& model, uint64_t seed) {
  const ModelConfig& c = model.config();
  for (NamedTensor& p : model.named_params()) {
    const bool router = p.name.find("router.weight") != std::string::npos;
    const bool vocab = p.name == "embed_tokens.weight" || p.name == "lm_head.weight" || p.name == "wte";
    for (int64_t i = 0; i < p.tensor.numel(); ++i)
      p.tensor.f32()[i] = (router ? 3.0f : 0.3f) * normal_at(seed, stream_id(p.name), uint64_t(i));
    if (vocab)
      for (int64_t i = c.vocab_size * c.channels; i < p.tensor.numel(); ++i) p.tensor.f32()[i] = 0.0f;
  }
  model.params_updated();
}

std::vector<float> gradients_of(Decoder& model, const Batch& b, float dloss) {
  model.zero_grad();
  model.forward(b.tokens, b.targets, dloss);
  model.backward();
  return std::vector<float>(model.grads().f32(), model.grads().f32() + model.grads().numel());
}

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, GradientMatchesFiniteDifferences) {
  Decoder model(family(GetParam()));
  model.set_moe_options(MoeOptions{0.1f, 0.01f, 0.0f});  // the aux and z-loss gradients are checked too
  randomise(model, 11);
  const int64_t B = 2, T = 5;
  Batch b = make_batch(B, T, 50, 5);
  const float dloss = 1.0f / float(B * T);
  const std::vector<float> grad = gradients_of(model, b, dloss);
  // The objective whose gradient backward took: mean cross-entropy plus the weighted router losses.
  // A training forward (its gradient unused) counts the router losses: sums over the MoE layers and
  // the batch's sequences.
  const ModelConfig& c = model.config();
  const double per_layer_sequence = double(B) * double(std::max<int64_t>(1, c.num_layers - c.moe.first_dense_layers));
  auto objective = [&] {
    model.zero_grad();
    const double loss = model.forward(b.tokens, b.targets, 1.0f);
    const RouterLosses moe = model.moe_loss_sums();
    return loss + (0.1 * moe.aux + 0.01 * moe.z) / per_layer_sequence;
  };
  float* p = model.params().f32();
  auto objective_at = [&](int64_t i, float value) {
    const float saved = p[i];
    p[i] = value;
    const double o = objective();
    p[i] = saved;
    return o;
  };
  for (const ParamSpec& spec : model.layout().specs()) {
    if (spec.name.find("score_bias") != std::string::npos) continue;  // selection only: no gradient
    for (int k = 0; k < 3; ++k) {
      int64_t i = spec.offset + int64_t(uniform_at(99, stream_id(spec.name), uint64_t(k)) * float(spec.numel()));
      if (spec.init == ParamInit::vocab_rows) i = spec.offset + (k * 7 % 50) * model.config().channels + k;
      const float h = 1e-2f;
      const double fd = (objective_at(i, p[i] + h) - objective_at(i, p[i] - h)) / (2.0 * h);
      EXPECT_NEAR(grad[size_t(i)], fd, 2e-3 + 0.03 * std::fabs(fd)) << spec.name << " element " << i - spec.offset;
    }
  }
  // The directional derivative along a random direction over all parameters, more tightly.
  testing::expect_directional_derivative(model, grad, objective);
}

// Ignored targets (kIgnoredTarget, loss masks) have loss 0 and leave the other rows' losses as
// they were; with the target loss weight B·T / targets the gradient is that of the mean over the
// trained targets (the router losses off, so the objective is the token term alone).
TEST_P(Families, IgnoredTargetsDropOutOfTheLossAndTheGradient) {
  Decoder model(family(GetParam()));
  model.set_moe_options(MoeOptions{0.0f, 0.0f, 0.0f});
  randomise(model, 11);
  const int64_t B = 2, T = 6;
  const Batch b = make_batch(B, T, 50, 5);
  Tensor masked = Tensor::zeros({B, T}, DType::i32);
  copy_tensor(masked, b.targets);
  int64_t trained = 0;
  for (int64_t i = 0; i < B * T; ++i) {
    if (i % 3 == 0 || i < T / 2) masked.data<int32_t>()[i] = kIgnoredTarget;
    trained += masked.data<int32_t>()[i] != kIgnoredTarget;
  }
  model.forward(b.tokens, b.targets);
  Tensor all = Tensor::zeros({B, T});
  copy_tensor(all, model.losses());
  model.forward(b.tokens, masked);
  for (int64_t i = 0; i < B * T; ++i)
    EXPECT_EQ(model.losses().f32()[i], masked.data<int32_t>()[i] == kIgnoredTarget ? 0.0f : all.f32()[i]) << i;
  model.set_target_loss_weight(float(B * T) / float(trained));
  const Batch masked_batch{b.tokens, masked};
  const std::vector<float> grad = gradients_of(model, masked_batch, 1.0f / float(B * T));
  auto mean_over_targets = [&] {
    return double(model.forward(b.tokens, masked)) * double(B * T) / double(trained);
  };
  testing::expect_directional_derivative(model, grad, mean_over_targets);
}

// Recomputation re-runs the same arithmetic: the gradients are the same bits.
TEST_P(Families, RecomputationGivesBitwiseEqualGradients) {
  Batch b = make_batch(2, 8, 50, 21);
  std::vector<float> reference;
  for (RecomputePolicy policy : {RecomputePolicy{Recompute::none, 0}, RecomputePolicy{Recompute::selective, 0},
                                 RecomputePolicy{Recompute::full, 0}, RecomputePolicy{Recompute::full, 1},
                                 RecomputePolicy{Recompute::selective, 1}}) {
    Decoder model(family(GetParam()));
    randomise(model, 3);
    model.set_recompute(policy);
    const std::vector<float> grads = gradients_of(model, b, 1.0f / 16);
    if (reference.empty()) {
      reference = grads;
      continue;
    }
    ASSERT_EQ(std::memcmp(grads.data(), reference.data(), grads.size() * sizeof(float)), 0)
        << "recompute mode " << int(policy.mode) << ", layers " << policy.layers;
  }
}

// The model cut into 4 chunks on 2 pipeline ranks, run chunk by chunk with activations and gradients
// handed over as the executor does, gives the whole model's loss and gradients, with the backward
// whole or split (zero-bubble: input gradients first, every weight gradient afterwards, in another
// order). Every parameter lives on exactly one stage, but for the tied embedding's copy on the last
// stage, whose gradient and the first stage's sum to the whole model's.
class PipelineStages : public ::testing::TestWithParam<std::tuple<std::string, bool>> {};

TEST_P(PipelineStages, MatchTheWholeModel) {
  const auto [name, split] = GetParam();
  ModelConfig c = family(name);
  c.num_layers = 4;
  const int64_t B = 2, T = 8;
  const float dloss = 1.0f / float(B * T);
  Batch b = make_batch(B, T, 50, 31);
  Decoder whole(c);
  randomise(whole, 5);
  whole.zero_grad();
  const double whole_loss = whole.forward(b.tokens, b.targets, dloss);
  whole.backward();

  const int P = 2;
  const StageBoundaries boundaries{0, 1, 2, 3, 4};  // chunk c holds block c, on rank c mod 2
  std::vector<std::unique_ptr<Decoder>> stages;
  for (int p = 0; p < P; ++p) {
    stages.push_back(std::make_unique<Decoder>(c, pipeline_stage(boundaries, P, p)));
    randomise(*stages.back(), 5);  // by name: the same values as the whole model's
    stages.back()->zero_grad();
  }
  double loss = 0;
  const Tensor* handed = nullptr;
  for (int chunk = 0; chunk < 4; ++chunk) {
    Decoder& d = *stages[size_t(chunk % P)];
    if (handed) copy_tensor(d.chunk_input(chunk / P, 0, B, T), *handed);
    loss += d.forward_chunk(chunk / P, 0, b.tokens, b.targets, dloss);
    handed = &d.chunk_output(chunk / P, 0);
  }
  EXPECT_NEAR(loss / double(B * T), whole_loss, 1e-6 * whole_loss);
  handed = nullptr;
  for (int chunk = 3; chunk >= 0; --chunk) {
    Decoder& d = *stages[size_t(chunk % P)];
    if (handed) copy_tensor(d.chunk_output_grad(chunk / P, 0), *handed);
    if (split)
      d.backward_chunk_input(chunk / P, 0);
    else
      d.backward_chunk(chunk / P, 0);
    handed = &d.chunk_input_grad(chunk / P, 0);
  }
  for (int chunk = 0; split && chunk < 4; ++chunk) stages[size_t(chunk % P)]->backward_chunk_weight(chunk / P, 0);
  for (int chunk = 0; chunk < 4; ++chunk) stages[size_t(chunk % P)]->release_chunk(chunk / P, 0);

  size_t found = 0;
  for (const NamedTensor& want : whole.named_grads()) {
    std::vector<double> sum(size_t(want.tensor.numel()), 0.0);
    int holders = 0;
    for (auto& stage : stages)
      for (const NamedTensor& got : stage->named_grads()) {
        if (got.name != want.name) continue;
        ++holders;
        for (int64_t i = 0; i < got.tensor.numel(); ++i) sum[size_t(i)] += got.tensor.f32()[i];
      }
    const bool tied = c.tied_embeddings && want.name == decoder_names(c).embed;
    ASSERT_EQ(holders, tied ? 2 : 1) << want.name;
    double scale = 0;
    for (int64_t i = 0; i < want.tensor.numel(); ++i) scale = std::max(scale, double(std::fabs(want.tensor.f32()[i])));
    for (int64_t i = 0; i < want.tensor.numel(); ++i)
      ASSERT_NEAR(sum[size_t(i)], want.tensor.f32()[i], 1e-5 * scale + 1e-12) << want.name << "[" << i << "]";
    ++found;
  }
  size_t stage_tensors = 0;
  for (auto& stage : stages) stage_tensors += stage->named_grads().size();
  EXPECT_EQ(stage_tensors, found + (c.tied_embeddings ? 1 : 0));  // nothing a stage holds is unknown
}

// Every tensor-parallel degree's slices cover each parameter's whole elements: split parameters
// exactly once over the ranks (a kv head replicated over r ranks r times, in its k and v rows and
// OLMo 2's key gains only), replicated parameters whole on every rank; and a slice initialises like
// its part of the whole.
TEST_P(Families, TensorParallelSlicesCoverTheWholeParameters) {
  ModelConfig c = family(GetParam());
  c.num_heads = 8, c.channels = 64, c.num_kv_heads = c.naming == Naming::llama && !c.mla.enabled() ? 2 : 0;
  if (c.moe.enabled()) c.moe.expert_hidden = 16;
  Decoder whole(c);
  whole.init_weights(7);
  for (int p : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(p));
    std::map<std::string, std::vector<int>> hits;
    for (const ParamSpec& spec : whole.layout().specs()) hits[spec.name].assign(size_t(spec.numel()), 0);
    for (int t = 0; t < p; ++t) {
      Decoder slice(c, whole_decoder(c.num_layers), TpPlace{t, p});
      slice.init_weights(7);
      for (const ParamSpec& spec : slice.layout().specs()) {
        const float* held = slice.params().f32() + spec.offset;
        const float* want = whole.params().f32() + whole.layout().find(spec.name).offset;
        std::vector<int>& count = hits[spec.name];
        auto run = [&](int64_t from, int64_t at, int64_t n) {
          for (int64_t i = 0; i < n; ++i) {
            ++count[size_t(at + i)];
            ASSERT_EQ(held[from + i], want[at + i]) << spec.name << "[" << at + i << "]";
          }
        };
        if (spec.slice.is_whole())
          run(0, 0, spec.numel());
        else
          spec.slice.for_each_run(run);
      }
    }
    const int64_t replicas = kv_head_replicas(c, TpPlace{0, p}), HS = c.head_size(), q_rows = c.num_heads * HS;
    for (const ParamSpec& spec : whole.layout().specs()) {
      const bool split = spec.numel() != shape_numel(Decoder(c, whole_decoder(c.num_layers), TpPlace{0, p})
                                                         .layout().find(spec.name).shape);
      const bool qkv = spec.name.find("qkv") != std::string::npos || spec.name.find("c_attn") != std::string::npos;
      const bool key_gains = c.qk_norm_all_heads && spec.name.find("k_norm") != std::string::npos;  // OLMo 2's
      const int64_t cols = spec.shape.size() == 2 ? spec.shape[1] : 1;
      for (int64_t i = 0; i < spec.numel(); ++i) {
        const bool kv = (qkv && i / cols >= q_rows) || key_gains;
        const int want = !split ? p : kv ? int(replicas) : 1;
        ASSERT_EQ(hits[spec.name][size_t(i)], want) << spec.name << "[" << i << "]";
      }
    }
  }
}

TEST(TensorParallelShapes, SharesAndRefusals) {
  ModelConfig c = model_preset("llama-tiny");  // 4 heads, 2 kv heads
  const ModelConfig two = tp_local_config(c, TpPlace{1, 2}), four = tp_local_config(c, TpPlace{3, 4});
  EXPECT_EQ(two.num_heads, 2);
  EXPECT_EQ(two.kv_heads(), 1);
  EXPECT_EQ(two.head_size(), c.head_size());
  EXPECT_EQ(four.kv_heads(), 1);  // each kv head replicated on two ranks
  EXPECT_EQ(kv_head_replicas(c, TpPlace{0, 4}), 2);
  EXPECT_EQ(four.hidden(), c.hidden() / 4);
  c.num_heads = 6, c.num_kv_heads = 3, c.channels = 48;
  EXPECT_NE(testing::error_of([&] { tp_local_config(c, TpPlace{0, 2}); })
                .find("--tp 2 neither divides the model's 3 key/value heads nor is a multiple of them"),
            std::string::npos);
  c = model_preset("gpt2-tiny");
  EXPECT_NE(testing::error_of([&] { tp_local_config(c, TpPlace{0, 4}); }).find("does not divide the model's 2 attention heads"),
            std::string::npos);
}

// Logits of a cached decode, token by token after a prompt, against full forwards of each prefix.
TEST_P(Families, KvCacheMatchesFullRecomputation) {
  Decoder model(family(GetParam()));  // gemma3's sliding blocks: a window of 3 over the cache
  randomise(model, 8);
  Batch b = make_batch(1, 8, 50, 2);
  KvCache cache = model.kv_cache(1);
  const int64_t Vp = model.config().padded_vocab_size();
  model.forward_cached(b.tokens.view(0, {1, 3}), cache);  // the prompt: 3 tokens at once
  for (int64_t t = 3; t <= 8; ++t) {
    const Tensor cached = cache.acts.logits;
    const int64_t rows = cached.size(0);
    model.forward(b.tokens.view(0, {1, t}), Tensor());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t v = 0; v < Vp; ++v)
        ASSERT_NEAR(cached.f32()[r * Vp + v], model.logits().f32()[(t - rows + r) * Vp + v], 1e-4f)
            << "position " << t - rows + r << " logit " << v;
    if (t < 8) model.forward_cached(b.tokens.view(t, {1, 1}), cache);
  }
  EXPECT_EQ(cache.length, 8);
  EXPECT_THROW(model.forward_cached(b.tokens.view(0, {1, 1}), cache), Error);  // the context is full
}

// Under document masks no token of a window sees another document's: changing every token of one
// document leaves the other documents' losses as they were (to rounding: a MoE layer's expert GEMMs
// change shape with the routing), in every family; without the mask the later documents' losses
// move. Recomputation re-runs attention within the same documents.
TEST_P(Families, DocumentMaskKeepsDocumentsApart) {
  Decoder model(family(GetParam()));
  model.set_moe_options(MoeOptions{0.0f, 0.0f, 0.0f});
  randomise(model, 11);
  const int64_t B = 2, T = 8;
  const Batch b = make_batch(B, T, 50, 5);
  const Tensor starts = testing::doc_starts_of_lengths(T, {{3, 5}, {1, 5, 2}});
  auto losses_of = [&](const Tensor& tokens, const Tensor& doc_starts) {
    model.forward(tokens, b.targets, 1.0f, doc_starts);
    return std::vector<float>(model.losses().f32(), model.losses().f32() + B * T);
  };
  const std::vector<float> before = losses_of(b.tokens, starts);
  Tensor changed = Tensor::zeros({B, T}, DType::i32);
  copy_tensor(changed, b.tokens);
  for (int64_t t = 3; t < 6; ++t) changed.data<int32_t>()[t] = (changed.data<int32_t>()[t] + 7) % 50;  // b 0's 2nd
  changed.data<int32_t>()[T] = (changed.data<int32_t>()[T] + 7) % 50;                                  // b 1's 1st
  const std::vector<float> after = losses_of(changed, starts);
  for (int64_t i = 0; i < B * T; ++i) {
    const bool in_changed_document = (i >= 3 && i < T) || i == T;
    if (!in_changed_document) {
      EXPECT_NEAR(after[size_t(i)], before[size_t(i)], 1e-5) << "token " << i;
    }
  }
  // Without the mask the same change reaches b 1's second document.
  EXPECT_GT(std::fabs(losses_of(changed, Tensor())[size_t(T) + 1] - losses_of(b.tokens, Tensor())[size_t(T) + 1]), 1e-3);
  // Full recomputation re-runs every block's attention from the saved starts: the same gradients.
  const std::vector<float> plain = [&] {
    model.zero_grad();
    model.forward(b.tokens, b.targets, 1.0f, starts);
    model.backward();
    return std::vector<float>(model.grads().f32(), model.grads().f32() + model.grads().numel());
  }();
  model.set_recompute(RecomputePolicy{Recompute::full, 0});
  model.zero_grad();
  model.forward(b.tokens, b.targets, 1.0f, starts);
  model.backward();
  for (int64_t i = 0; i < model.grads().numel(); ++i) ASSERT_EQ(model.grads().f32()[i], plain[size_t(i)]) << i;
}

// Under document masks positions restart with every document (learned ones read the row of a token's
// position in its document; RoPE depends on positions only through their differences), so a window's
// second document has the losses and gradients it has alone, in every family.
TEST_P(Families, DocumentTrainsAsIfAlone) {
  Decoder model(family(GetParam()));
  model.set_moe_options(MoeOptions{0.0f, 0.0f, 0.0f});
  randomise(model, 13);
  const int64_t T = 8, first = 3;
  const Batch packed = make_batch(1, T, 50, 6);
  auto slice = [](const Tensor& t, int64_t at, int64_t len) {
    Tensor s = Tensor::zeros({1, len}, DType::i32);
    std::copy_n(t.data<int32_t>() + at, len, s.data<int32_t>());
    return s;
  };
  auto run = [&](const Tensor& tokens, const Tensor& targets, const Tensor& doc_starts) {
    model.zero_grad();
    model.forward(tokens, targets, 1.0f, doc_starts);
    model.backward();
    return std::pair{std::vector<float>(model.losses().f32(), model.losses().f32() + tokens.numel()),
                     std::vector<float>(model.grads().f32(), model.grads().f32() + model.grads().numel())};
  };
  const Tensor starts = testing::doc_starts_of_lengths(T, {{int32_t(first), int32_t(T - first)}});
  const auto [losses, grads] = run(packed.tokens, packed.targets, starts);
  const auto [losses_a, grads_a] = run(slice(packed.tokens, 0, first), slice(packed.targets, 0, first), Tensor());
  const auto [losses_b, grads_b] =
      run(slice(packed.tokens, first, T - first), slice(packed.targets, first, T - first), Tensor());
  for (int64_t t = 0; t < T; ++t)
    EXPECT_NEAR(losses[size_t(t)], t < first ? losses_a[size_t(t)] : losses_b[size_t(t - first)], 1e-5) << t;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < grads.size(); ++i) {
    const double want = double(grads_a[i]) + grads_b[i];
    diff += (grads[i] - want) * (grads[i] - want), norm += want * want;
  }
  EXPECT_LE(std::sqrt(diff), 1e-5 * std::sqrt(norm));
}

INSTANTIATE_TEST_SUITE_P(Decoder, Families,
                         ::testing::Values("gpt2", "llama", "llama-tied", "qwen2", "qwen3", "olmo2", "smollm3", "geglu",
                                           "sandwich", "gemma", "gemma2", "gemma3", "starcoder2", "gpt-neox",
                                           "gpt-neox-sequential", "cohere", "cohere2", "phi2", "mixtral", "olmoe", "qwen2-moe", "glm4-moe", "deepseek", "deepseek-v2",
                                           "deepseek-v3"));
INSTANTIATE_TEST_SUITE_P(Decoder, PipelineStages,
                         ::testing::Combine(::testing::Values("gpt2", "llama", "llama-tied", "qwen2", "qwen3", "olmo2",
                                                              "smollm3", "sandwich", "gemma2", "gemma3", "starcoder2",
                                                              "gpt-neox", "cohere", "cohere2", "phi2", "mixtral", "olmoe", "qwen2-moe", "deepseek",
                                                              "deepseek-v3"),
                                            ::testing::Bool()));

TEST(Presets, PublishedParameterCounts) {
  EXPECT_EQ(model_preset("llama3.2-1b").num_parameters(), 1235814400);
  EXPECT_EQ(model_preset("llama3.2-3b").num_parameters(), 3212749824);
  EXPECT_EQ(model_preset("llama3.1-8b").num_parameters(), 8030261248);
  EXPECT_EQ(model_preset("llama3.1-70b").num_parameters(), 70553706496);
  EXPECT_EQ(model_preset("qwen2.5-0.5b").num_parameters(), 494032768);
  // Qwen3's published counts (the tied table once): 0.6B 596,049,920; 1.7B 1,720,574,976; 8B 8,190,735,360.
  EXPECT_EQ(model_preset("qwen3-0.6b").num_parameters(), 596049920);
  EXPECT_EQ(model_preset("qwen3-1.7b").num_parameters(), 1720574976);
  EXPECT_EQ(model_preset("qwen3-8b").num_parameters(), 8190735360);
  EXPECT_EQ(model_preset("phi-4").num_parameters(), 14659507200);
  // OLMo 2's published 1.48B, 7.30B, 13.7B and 32.2B (untied, its vocabulary 100,352 a multiple of 128).
  EXPECT_EQ(model_preset("olmo2-1b").num_parameters(), 1484916736);
  EXPECT_EQ(model_preset("olmo2-7b").num_parameters(), 7298617344);
  EXPECT_EQ(model_preset("olmo2-13b").num_parameters(), 13716198400);
  EXPECT_EQ(model_preset("olmo2-32b").num_parameters(), 32234279936);
  // SmolLM3-3B: 3.08B (tied; its safetensors hold 3,075,098,624 bf16 values).
  EXPECT_EQ(model_preset("smollm3-3b").num_parameters(), 3075098624);
  // Gemma 3 1B: 999,885,952 (tied; its four norms a block, q/k norms of 256).
  EXPECT_EQ(model_preset("gemma3-1b").num_parameters(), 999885952);
  EXPECT_EQ(model_preset("gemma3-1b").global_layers, (std::vector<int64_t>{5, 11, 17, 23}));
  // Gemma 2B and 7B: 2,506,172,416 and 8,537,680,896 (tied; the 2B one kv head).
  EXPECT_EQ(model_preset("gemma-2b").num_parameters(), 2506172416);
  EXPECT_EQ(model_preset("gemma-7b").num_parameters(), 8537680896);
  // GLM-4.5-Air and GLM-4.5 without their multi-token-prediction layer (106.9B and 352.8B; published with it:
  // 106B and 355B).
  EXPECT_EQ(model_preset("glm4.5-air").num_parameters(), 106852251264);
  EXPECT_EQ(model_preset("glm4.5").num_parameters(), 352797829024);
  // Gemma 2 2B, 9B and 27B: 2,614,341,888, 9,241,705,984 and 27,227,128,320 (tied, no q/k norms).
  EXPECT_EQ(model_preset("gemma2-2b").num_parameters(), 2614341888);
  EXPECT_EQ(model_preset("gemma2-9b").num_parameters(), 9241705984);
  EXPECT_EQ(model_preset("gemma2-27b").num_parameters(), 27227128320);
  EXPECT_EQ(model_preset("gemma2-9b").global_layers.front(), 1);
  // Qwen1.5-MoE-A2.7B (14.3B) and Qwen2-57B-A14B (57.4B): untied, the gated shared expert's (1, C) gate each layer.
  EXPECT_EQ(model_preset("qwen1.5-moe-a2.7b").num_parameters(), 14315784192);
  EXPECT_EQ(model_preset("qwen2-57b-a14b").num_parameters(), 57408658944);
  // Llama 2 7B (6.74B), Mistral 7B (7.24B), Mistral NeMo (12.2B), Phi-3-mini (3.82B; its 32,064 rows padded
  // to 32,128).
  EXPECT_EQ(model_preset("llama2-7b").num_parameters(), 6738415616);
  EXPECT_EQ(model_preset("mistral-7b").num_parameters(), 7241732096);
  EXPECT_EQ(model_preset("mistral-nemo-12b").num_parameters(), 12247782400);
  EXPECT_EQ(model_preset("phi3-mini").num_parameters(), 3821079552 + 2 * 64 * 3072);
  // StarCoder2 3B (3.03B, tied), 7B (tied) and 15B (untied).
  EXPECT_EQ(model_preset("starcoder2-3b").num_parameters(), 3030371328);
  EXPECT_EQ(model_preset("starcoder2-7b").num_parameters(), 7173923840);
  EXPECT_EQ(model_preset("starcoder2-15b").num_parameters(), 15957889024);
  // Pythia 70M-12B and GPT-NeoX-20B (untied; the Pythia paper's totals).
  EXPECT_EQ(model_preset("pythia-70m").num_parameters(), 70426624);
  EXPECT_EQ(model_preset("pythia-160m").num_parameters(), 162322944);
  EXPECT_EQ(model_preset("pythia-410m").num_parameters(), 405334016);
  EXPECT_EQ(model_preset("pythia-1b").num_parameters(), 1011781632);
  EXPECT_EQ(model_preset("pythia-1.4b").num_parameters(), 1414647808);
  EXPECT_EQ(model_preset("pythia-2.8b").num_parameters(), 2775208960);
  EXPECT_EQ(model_preset("pythia-6.9b").num_parameters(), 6857302016);
  EXPECT_EQ(model_preset("pythia-12b").num_parameters(), 11846072320);
  EXPECT_EQ(model_preset("gpt-neox-20b").num_parameters(), 20554567680);
  // Command-R (v01, 34.98B) and Aya Expanse 8B (8.03B): tied, norms without biases, one a block.
  EXPECT_EQ(model_preset("command-r-35b").num_parameters(), 34980831232);
  EXPECT_EQ(model_preset("aya-expanse-8b").num_parameters(), 8028033024);
  // Command R7B (8.03B, Aya Expanse 8B's shape) and Command A (111.06B): every fourth block global, without RoPE.
  EXPECT_EQ(model_preset("command-r7b").num_parameters(), 8028033024);
  EXPECT_EQ(model_preset("command-a-111b").num_parameters(), 111057580032);
  EXPECT_EQ(model_preset("command-r7b").nope_layers, model_preset("command-r7b").global_layers);
  EXPECT_EQ(model_preset("command-r7b").global_layers.front(), 3);
  // Phi-1.5 (1.42B) and Phi-2 (2.78B): untied, the head's bias (its 51,200 rows a multiple of 128).
  EXPECT_EQ(model_preset("phi-1.5").num_parameters(), 1418270720);
  EXPECT_EQ(model_preset("phi-2").num_parameters(), 2779683840);
  // Gemma 3 4B, 12B and 27B's text models: 3.88B, 11.77B and 27.01B (their 262,208 rows padded to 262,272).
  EXPECT_EQ(model_preset("gemma3-4b").num_parameters(), 3880263168 + 64 * 2560);
  EXPECT_EQ(model_preset("gemma3-12b").num_parameters(), 11766034176 + 64 * 3840);
  EXPECT_EQ(model_preset("gemma3-27b").num_parameters(), 27009346304 + 64 * 5376);
  EXPECT_EQ(model_preset("gemma3-27b").attention_scalar, 168.0f);
  EXPECT_EQ(model_preset("smollm3-3b").nope_layers, (std::vector<int64_t>{3, 7, 11, 15, 19, 23, 27, 31, 35}));
  // OLMoE-1B-7B: 6.9B, 1.3B active.
  EXPECT_EQ(model_preset("olmoe-1b-7b").num_parameters(), 6919161856);
  EXPECT_EQ(model_preset("olmoe-1b-7b").active_parameters(), 1282017280);
  EXPECT_EQ(model_preset("qwen3-30b-a3b").num_parameters(), 30532122624);
  EXPECT_EQ(model_preset("mixtral-8x7b").num_parameters(), 46702792704);
  EXPECT_EQ(model_preset("mixtral-8x7b").active_parameters(), 12879925248);
  // DeepSeek's: V3's main model 671,026,419,200 (balancing biases included), 36.6B active without the
  // input embedding (129280 x 7168); V2-Lite 15.7B.
  EXPECT_EQ(model_preset("deepseek-v3").num_parameters(), 671026419200);
  EXPECT_EQ(model_preset("deepseek-v3").active_parameters() - 129280 * 7168, 36625618432);
  EXPECT_EQ(model_preset("deepseek-v2-lite").num_parameters(), 15706484224);
  for (const std::string& name : model_preset_names()) EXPECT_NO_THROW(model_preset(name).validate()) << name;
}

TEST(Presets, LlamaNamesShapesAndBlockRanges) {
  Decoder model(model_preset("llama-tiny"));
  const ParameterLayout& layout = model.layout();
  EXPECT_EQ(layout.find("layers.1.self_attn.qkv_proj.weight").shape, (Shape{(4 + 2 * 2) * 8, 32}));
  EXPECT_EQ(layout.find("layers.0.mlp.gate_up_proj.weight").shape, (Shape{128, 32}));
  EXPECT_EQ(layout.find("lm_head.weight").block, 2);
  EXPECT_THROW(layout.find("layers.0.self_attn.qkv_proj.bias"), Error);  // Llama has no biases
  const OffsetRange embed = layout.block_range(kEmbeddingBlock, kEmbeddingBlock);
  const OffsetRange blocks = layout.block_range(0, 1), tail = layout.block_range(2, 2);
  EXPECT_EQ(embed.begin, 0);
  EXPECT_EQ(embed.end, blocks.begin);
  EXPECT_EQ(blocks.end, tail.begin);
  EXPECT_EQ(tail.end, layout.total());
  EXPECT_EQ(layout.block_range(1, 1).begin, layout.find("layers.1.input_layernorm.weight").offset);
}

// Layer 0's router zeroed: every logit ties, so each of the 16 tokens picks experts 0 and 1 (ties go
// to the lower index), and the router's choices are {16, 16, 0, 0}; a capacity of ceil(0.5 * 32 / 4)
// = 4 rows keeps {4, 4, 0, 0}. Layer 1 routes at random: its kept rows are min(choices, capacity).
TEST(Moe, CountsTheRoutersChoicesAndTheRowsACapacityKeeps) {
  Batch b = make_batch(2, 8, 50, 4);
  for (float factor : {0.0f, 0.5f}) {
    Decoder model(family("mixtral"));
    randomise(model, 9);
    const ParamSpec& router = model.layout().find("layers.0.mlp.router.weight");
    std::fill_n(model.params().f32() + router.offset, router.numel(), 0.0f);
    model.params_updated();
    model.set_moe_options(MoeOptions{0.01f, 0.0f, factor});
    gradients_of(model, b, 1.0f / 16);
    const std::vector<double>& routed = model.routed_load();
    const std::vector<double>& kept = model.expert_load();
    ASSERT_EQ(routed.size(), 2u * 4u);
    // Element by element: GCC 12.2 at -O3 -march=native builds a literal {16.0, 16.0, 0.0, 0.0} as four 16s.
    for (size_t e = 0; e < 4; ++e) EXPECT_EQ(routed[e], e < 2 ? 16.0 : 0.0) << "expert " << e;
    EXPECT_EQ(std::accumulate(routed.begin() + 4, routed.end(), 0.0), 16.0 * 2);  // tokens x top_k
    const double capacity = factor > 0 ? 4 : 32;
    for (size_t i = 0; i < routed.size(); ++i) EXPECT_EQ(kept[i], std::min(routed[i], capacity)) << i;
  }
}

TEST(Moe, SigmoidRouterBiasesMoveTowardsBalance) {
  Decoder model(family("deepseek"));
  model.init_weights(1);
  Batch b = make_batch(2, 8, 50, 4);
  gradients_of(model, b, 1.0f / 16);
  ASSERT_EQ(model.expert_load().size(), 2u * 8u);  // two MoE layers (the first block is dense)
  std::vector<double> load(16, 4.0);
  load[0] = 10.0, load[1] = 0.0;  // layer 1: expert 0 overloaded, expert 1 idle
  model.balance_router_biases(load, 0.5f);
  const float* bias = model.params().f32() + model.layout().find("layers.1.mlp.router.score_bias").offset;
  EXPECT_EQ(bias[0], -0.5f);
  EXPECT_EQ(bias[1], 0.5f);
  EXPECT_EQ(bias[2], 0.5f);  // the mean is 34 / 8 = 4.25: expert 2's 4 is below it
  const float* balanced = model.params().f32() + model.layout().find("layers.2.mlp.router.score_bias").offset;
  for (int e = 0; e < 8; ++e) EXPECT_EQ(balanced[e], 0.0f);  // layer 2: every expert at the mean
}

}  // namespace
}  // namespace tessera
