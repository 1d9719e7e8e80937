// Names, shapes and initialisation of the decoder's parameters, and their views by role.
#include "nn/decoder_layout.h"

#include <unordered_map>

#include "core/error.h"

namespace tessera {
namespace {

LinearNames linear_names(const std::string& prefix, bool bias) { return {prefix + ".weight", bias ? prefix + ".bias" : ""}; }

BlockNames gpt2_block_names(const ModelConfig& c, int64_t l) {
  const std::string p = "h." + std::to_string(l) + ".";
  const bool norm_bias = c.bias && c.norm == NormKind::layernorm;
  BlockNames n;
  n.norm1 = linear_names(p + "ln_1", norm_bias);
  n.qkv = linear_names(p + "attn.c_attn", c.bias || c.qkv_bias);
  n.attn_out = linear_names(p + "attn.c_proj", c.bias);
  n.norm2 = linear_names(p + "ln_2", norm_bias);
  n.mlp_in = linear_names(p + "mlp.c_fc", c.bias);
  n.mlp_out = linear_names(p + "mlp.c_proj", c.bias);
  return n;
}

BlockNames llama_block_names(const ModelConfig& c, int64_t l) {
  const std::string p = "layers." + std::to_string(l) + ".";
  const bool norm_bias = c.bias && c.norm == NormKind::layernorm;
  const bool pre = has_pre_norms(c.norm_placement), post = has_post_norms(c.norm_placement);
  const bool sandwich = pre && post;  // Gemma's names: pre_feedforward_layernorm before the MLP
  BlockNames n;
  if (pre) n.norm1 = linear_names(p + "input_layernorm", norm_bias);
  if (post) n.norm1_post = linear_names(p + "post_attention_layernorm", norm_bias);
  if (c.mla.enabled()) {  // Hugging Face's DeepSeek names
    const std::string a = p + "self_attn.";
    if (c.mla.q_rank > 0) {
      n.q_a = linear_names(a + "q_a_proj", false);
      n.q_a_norm = a + "q_a_layernorm.weight";
      n.q_b = linear_names(a + "q_b_proj", false);
    } else {
      n.q_proj = linear_names(a + "q_proj", false);
    }
    n.kv_a = linear_names(a + "kv_a_proj_with_mqa", false);
    n.kv_a_norm = a + "kv_a_layernorm.weight";
    n.kv_b = linear_names(a + "kv_b_proj", false);
  } else {
    n.qkv = linear_names(p + "self_attn.qkv_proj", c.bias || c.qkv_bias);
  }
  if (c.qk_norm) {
    n.q_norm = p + "self_attn.q_norm.weight";
    n.k_norm = p + "self_attn.k_norm.weight";
  }
  n.attn_out = linear_names(p + "self_attn.o_proj", c.bias);
  if (pre && !c.shared_norm)
    n.norm2 = linear_names(p + (sandwich ? "pre_feedforward_layernorm" : "post_attention_layernorm"), norm_bias);
  if (post) n.norm2_post = linear_names(p + "post_feedforward_layernorm", norm_bias);
  const std::string in = is_gated(c.mlp) ? "gate_up_proj" : "up_proj";
  if (!c.is_moe_block(l)) {
    n.mlp_in = linear_names(p + "mlp." + in, c.bias);
    n.mlp_out = linear_names(p + "mlp.down_proj", c.bias);
    return n;
  }
  n.router = p + "mlp.router.weight";
  if (c.moe.router == RouterKind::sigmoid_bias) n.router_bias = p + "mlp.router.score_bias";
  n.experts_in = p + "mlp.experts.gate_up_proj";
  n.experts_out = p + "mlp.experts.down_proj";
  if (c.moe.num_shared_experts > 0) {
    n.shared_in = linear_names(p + "mlp.shared_experts.gate_up_proj", c.bias);
    n.shared_out = linear_names(p + "mlp.shared_experts.down_proj", c.bias);
    if (c.moe.shared_gate) n.shared_gate = p + "mlp.shared_experts.gate.weight";
  }
  return n;
}

}  // namespace

DecoderNames decoder_names(const ModelConfig& c) {
  const bool gpt2 = c.naming == Naming::gpt2;
  DecoderNames n;
  n.embed = gpt2 ? "wte" : "embed_tokens.weight";
  if (c.positions == PositionKind::learned) n.positions = gpt2 ? "wpe" : "embed_positions.weight";
  if (!c.tied_embeddings) n.head = "lm_head.weight";
  if (c.head_bias) n.head_bias = "lm_head.bias";
  for (int64_t l = 0; l < c.num_layers; ++l) n.blocks.push_back(gpt2 ? gpt2_block_names(c, l) : llama_block_names(c, l));
  n.final_norm = linear_names(gpt2 ? "ln_f" : "norm", c.bias && c.norm == NormKind::layernorm);
  return n;
}

bool holds_tied_embedding_copy(const ModelConfig& c, const DecoderStage& stage) {
  return c.tied_embeddings && stage.has_head() && !stage.has_embedding();
}

DecoderNames decoder_names(const ModelConfig& c, const DecoderStage& stage) {
  DecoderNames n = decoder_names(c);
  for (int64_t l = 0; l < c.num_layers; ++l)
    if (!stage.holds_block(l)) n.blocks[size_t(l)] = BlockNames{};
  if (!stage.has_embedding()) {
    if (!holds_tied_embedding_copy(c, stage)) n.embed.clear();
    n.positions.clear();
  }
  if (!stage.has_head()) {
    n.head.clear();
    n.head_bias.clear();
    n.final_norm = LinearNames{};
  }
  return n;
}

std::vector<OffsetRange> expert_ranges(const DecoderNames& names, const ParameterLayout& layout) {
  std::vector<OffsetRange> ranges;
  for (const BlockNames& b : names.blocks)
    for (const std::string* name : {&b.experts_in, &b.experts_out}) {
      if (name->empty()) continue;
      const ParamSpec& spec = layout.find(*name);
      ranges.push_back({spec.offset, spec.offset + spec.numel()});
    }
  return ranges;
}

ParameterLayout decoder_layout(const ModelConfig& c) { return decoder_layout(c, whole_decoder(c.num_layers)); }

ParameterLayout decoder_layout(const ModelConfig& c, const DecoderStage& stage, TpPlace tp, EpPlace ep) {
  const DecoderNames n = decoder_names(c, stage);
  const int64_t C = c.channels, Vp = c.padded_vocab_size(), F = c.hidden(), HS = c.head_size();
  const int64_t NH = c.num_heads, NKV = c.kv_heads();
  const int64_t E = c.moe.num_experts, Fe = c.moe.expert_hidden, Fs = c.moe.num_shared_experts * Fe;
  const bool swiglu = is_gated(c.mlp);
  // This tp rank's shares (the whole when tp.size is 1).
  const int64_t t = tp.rank, p = tp.size;
  const ModelConfig local = tp_local_config(c, tp);
  const int64_t Vl = Vp / p, NHl = local.num_heads, NKVl = local.kv_heads(), Fl = local.hidden();
  // This rank's first kv head: its share, or the one its query heads use when kv heads are replicated.
  const int64_t kv_first = t / kv_head_replicas(c, tp) * NKVl;
  const int64_t Fel = local.moe.expert_hidden, Fsl = c.moe.num_shared_experts * Fel;
  const int64_t El = E / ep.size, first_expert = ep.rank * El;  // this ep rank's experts
  ParameterLayout layout;
  int64_t block = kEmbeddingBlock;
  using Rows = ParamSlice::Rows;
  // Row blocks of a whole (rows, cols) matrix or (rows) vector, or its columns [begin, end).
  auto rows_of = [&](Shape whole, std::vector<Rows> rows) {
    if (p == 1) return ParamSlice{};
    const int64_t cols = whole.size() < 2 ? 1 : whole.back();
    return ParamSlice{std::move(whole), std::move(rows), 0, cols};
  };
  auto cols_of = [&](Shape whole, int64_t begin, int64_t end) {
    if (p == 1 || whole.back() == 0) return ParamSlice{};  // (a parameter this model does not have)
    const int64_t rows = shape_numel(whole) / whole.back();
    return ParamSlice{std::move(whole), {{0, rows}}, begin, end};
  };
  auto add = [&](const std::string& name, Shape shape, ParamInit init, ParamSlice slice = {}) {
    if (!name.empty()) layout.add(name, std::move(shape), init, block, std::move(slice));
  };
  auto norm = [&](const LinearNames& names) {
    add(names.weight, {C}, ParamInit::ones);
    add(names.bias, {C}, ParamInit::zeros);
  };
  // Column-parallel: rows of the weight and bias; row-parallel: columns of the weight, bias whole.
  auto column_parallel = [&](const LinearNames& names, int64_t whole_out, std::vector<Rows> rows, ParamInit init) {
    int64_t out = 0;
    for (const Rows& r : rows) out += r.count;
    add(names.weight, {out, C}, init, rows_of({whole_out, C}, rows));
    add(names.bias, {out}, ParamInit::zeros, rows_of({whole_out}, rows));
  };
  auto row_parallel = [&](const LinearNames& names, int64_t whole_in, int64_t in, ParamInit init) {
    add(names.weight, {C, in}, init, cols_of({C, whole_in}, t * in, (t + 1) * in));
    add(names.bias, {C}, ParamInit::zeros);
  };
  // A SwiGLU input [gate (width) | up (width)] split per rank: [gate share | up share].
  auto gate_up = [&](int64_t first, int64_t width, int64_t share) {
    return std::vector<Rows>{{first + t * share, share}, {first + width + t * share, share}};
  };
  const std::vector<Rows> vocab_rows{{t * Vl, Vl}};
  add(n.embed, {Vl, C}, ParamInit::vocab_rows, rows_of({Vp, C}, vocab_rows));
  add(n.positions, {c.max_seq_len, C}, ParamInit::normal);
  for (block = 0; block < c.num_layers; ++block) {
    const BlockNames& b = n.blocks[size_t(block)];
    norm(b.norm1);
    column_parallel(b.qkv, c.qkv_width(),
                    {{t * NHl * HS, NHl * HS}, {NH * HS + kv_first * HS, NKVl * HS},
                     {(NH + NKV) * HS + kv_first * HS, NKVl * HS}},
                    ParamInit::normal);
    if (c.qk_norm_all_heads) {  // a gain per channel of the query (key) heads: a tp rank's heads' share
      add(b.q_norm, {NHl * HS}, ParamInit::ones, rows_of({NH * HS}, {{t * NHl * HS, NHl * HS}}));
      add(b.k_norm, {NKVl * HS}, ParamInit::ones, rows_of({NKV * HS}, {{kv_first * HS, NKVl * HS}}));
    } else {  // one gain per head channel: every tp rank's heads share them, whole on each
      add(b.q_norm, {HS}, ParamInit::ones);
      add(b.k_norm, {HS}, ParamInit::ones);
    }
    if (c.mla.enabled()) {  // the latents whole on every tp rank, the heads' rows and columns cut
      const LatentAttentionConfig& m = c.mla;
      add(b.q_proj.weight, {NHl * HS, C}, ParamInit::normal, rows_of({NH * HS, C}, {{t * NHl * HS, NHl * HS}}));
      add(b.q_a.weight, {m.q_rank, C}, ParamInit::normal);
      add(b.q_a_norm, {m.q_rank}, ParamInit::ones);
      add(b.q_b.weight, {NHl * HS, m.q_rank}, ParamInit::normal,
          rows_of({NH * HS, m.q_rank}, {{t * NHl * HS, NHl * HS}}));
      add(b.kv_a.weight, {m.kv_rank + m.rope_dim, C}, ParamInit::normal);
      add(b.kv_a_norm, {m.kv_rank}, ParamInit::ones);
      const int64_t kv_head = m.nope_dim + m.v_dim;
      add(b.kv_b.weight, {NHl * kv_head, m.kv_rank}, ParamInit::normal,
          rows_of({NH * kv_head, m.kv_rank}, {{t * NHl * kv_head, NHl * kv_head}}));
    }
    row_parallel(b.attn_out, c.value_width(), local.value_width(), ParamInit::residual);
    norm(b.norm1_post);
    norm(b.norm2);
    column_parallel(b.mlp_in, swiglu ? 2 * F : F, swiglu ? gate_up(0, F, Fl) : std::vector<Rows>{{t * Fl, Fl}},
                    ParamInit::normal);
    row_parallel(b.mlp_out, F, Fl, ParamInit::residual);
    norm(b.norm2_post);
    add(b.router, {E, C}, ParamInit::normal);
    add(b.router_bias, {E}, ParamInit::zeros);
    // This ep rank's experts [first_expert, + El), each cut like a SwiGLU MLP under tp.
    std::vector<Rows> expert_rows;
    for (int64_t e = first_expert; e < first_expert + El; ++e)
      for (const Rows& r : gate_up(e * 2 * Fe, Fe, Fel)) expert_rows.push_back(r);
    const bool experts_whole = p == 1 && ep.size == 1;
    add(b.experts_in, {El, 2 * Fel, C}, ParamInit::normal,
        experts_whole ? ParamSlice{} : ParamSlice{{E, 2 * Fe, C}, expert_rows, 0, C});
    add(b.experts_out, {El, C, Fel}, ParamInit::residual,
        experts_whole ? ParamSlice{} : ParamSlice{{E, C, Fe}, {{first_expert * C, El * C}}, t * Fel, (t + 1) * Fel});
    column_parallel(b.shared_in, 2 * Fs, gate_up(0, Fs, Fsl), ParamInit::normal);
    row_parallel(b.shared_out, Fs, Fsl, ParamInit::residual);
    add(b.shared_gate, {1, C}, ParamInit::normal);  // whole on every tp rank, as the router
  }
  norm(n.final_norm);
  add(n.head, {Vl, C}, ParamInit::vocab_rows, rows_of({Vp, C}, vocab_rows));
  add(n.head_bias, {Vl}, ParamInit::zeros, rows_of({Vp}, vocab_rows));
  return layout;
}

namespace {

// decoder_weights() of the parts `in` accepts.
template <typename Accept>
DecoderWeights weights_of(const DecoderNames& names, const NamedTensors& named, Accept in) {
  std::unordered_map<std::string, const Tensor*> by_name;
  for (const NamedTensor& t : named) by_name[t.name] = &t.tensor;
  auto get = [&](const std::string& name) {
    if (name.empty()) return Tensor();
    auto it = by_name.find(name);
    TS_CHECK(it != by_name.end(), "decoder_weights: no tensor named '", name, "'");
    return *it->second;
  };
  auto linear = [&](const LinearNames& n) { return LinearWeights{get(n.weight), get(n.bias)}; };
  const int64_t L = int64_t(names.blocks.size());
  DecoderWeights w;
  if (in(kEmbeddingBlock)) {
    w.embed = get(names.embed);
    w.positions = get(names.positions);
  }
  if (in(L)) w.head = get(names.head), w.head_bias = get(names.head_bias);
  for (int64_t l = 0; l < L; ++l) {
    const BlockNames& b = names.blocks[size_t(l)];
    BlockWeights bw;
    if (in(l)) {
      bw.norm1 = linear(b.norm1), bw.qkv = linear(b.qkv), bw.attn_out = linear(b.attn_out);
      bw.q_norm = get(b.q_norm), bw.k_norm = get(b.k_norm);
      bw.q_proj = linear(b.q_proj), bw.q_a = linear(b.q_a), bw.q_b = linear(b.q_b);
      bw.kv_a = linear(b.kv_a), bw.kv_b = linear(b.kv_b);
      bw.q_a_norm = get(b.q_a_norm), bw.kv_a_norm = get(b.kv_a_norm);
      bw.norm2 = linear(b.norm2), bw.mlp_in = linear(b.mlp_in), bw.mlp_out = linear(b.mlp_out);
      bw.norm1_post = linear(b.norm1_post), bw.norm2_post = linear(b.norm2_post);
      bw.router = get(b.router), bw.router_bias = get(b.router_bias);
      bw.experts_in = get(b.experts_in), bw.experts_out = get(b.experts_out);
      bw.shared_in = linear(b.shared_in), bw.shared_out = linear(b.shared_out);
      bw.shared_gate = get(b.shared_gate);
    }
    w.blocks.push_back(std::move(bw));
  }
  if (in(L)) w.final_norm = linear(names.final_norm);
  return w;
}

}  // namespace

DecoderWeights decoder_weights(const DecoderNames& names, const NamedTensors& named) {
  return weights_of(names, named, [](int64_t) { return true; });
}

DecoderWeights decoder_part_weights(const DecoderNames& names, const NamedTensors& named, int64_t part) {
  return weights_of(names, named, [part](int64_t p) { return p == part; });
}

}  // namespace tessera
