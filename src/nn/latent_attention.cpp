// Latent attention's projections into the packed qkv and out of the core, composed from ops/ and
// column copies (one per head and piece: a fused kernel is left for when a GPU profile asks for it).
#include "nn/latent_attention.h"

#include "core/cuda/device.h"
#include "ops/matmul.h"
#include "ops/residual.h"
#include "ops/rmsnorm.h"

namespace tessera {
namespace {

// The widths of one token's pieces, from a (rank's) config.
struct LatentDims {
  int64_t NH, HS, nope, rope, v, kv_rank, kv_head;  // kv_head: one head's [k_nope | v] in kv_b's output
  explicit LatentDims(const ModelConfig& c)
      : NH(c.num_heads), HS(c.head_size()), nope(c.mla.nope_dim), rope(c.mla.rope_dim), v(c.mla.v_dim),
        kv_rank(c.mla.kv_rank), kv_head(c.mla.nope_dim + c.mla.v_dim) {}
  int64_t k_col(int64_t h) const { return (NH + h) * HS; }      // head h's key in a packed qkv row
  int64_t v_col(int64_t h) const { return (2 * NH + h) * HS; }  // head h's value
};

Tensor like(const Tensor& t, Shape shape) { return Tensor::zeros(std::move(shape), t.dtype(), t.device()); }

}  // namespace

void LatentActivations::allocate(const ModelConfig& config, int64_t B, int64_t T, DType dtype, Device device,
                                 bool with_values) {
  const LatentAttentionConfig& m = config.mla;
  const int64_t N = B * T;
  if (m.q_rank > 0) {
    q_in = Tensor::zeros({N, m.q_rank}, dtype, device);
    q_rstd = Tensor::zeros({N}, DType::f32, device);
    q_normed = Tensor::zeros({N, m.q_rank}, dtype, device);
  }
  kv_in = Tensor::zeros({N, m.kv_rank}, dtype, device);
  kv_rstd = Tensor::zeros({N}, DType::f32, device);
  kv_normed = Tensor::zeros({N, m.kv_rank}, dtype, device);
  if (with_values) values = Tensor::zeros({B, T, config.value_width()}, dtype, device);
}

void latent_qkv_forward(const ModelConfig& config, Tensor& qkv, LatentActivations& a, const Tensor& x,
                        const BlockWeights& w) {
  const LatentDims d(config);
  const int64_t C = config.channels, N = x.numel() / C;
  const Tensor tokens = x.reshape({N, C});
  Tensor q = like(x, {N, d.NH * d.HS});
  if (config.mla.q_rank > 0) {
    matmul_forward(a.q_in, tokens, w.q_a.weight, w.q_a.bias);
    rmsnorm_forward(a.q_normed, a.q_rstd, a.q_in, w.q_a_norm, kLatentNormEps);
    matmul_forward(q, a.q_normed, w.q_b.weight, w.q_b.bias);
  } else {
    matmul_forward(q, tokens, w.q_proj.weight, w.q_proj.bias);
  }
  Tensor latent = like(x, {N, d.kv_rank + d.rope});  // [c | k_rope]
  matmul_forward(latent, tokens, w.kv_a.weight, w.kv_a.bias);
  copy_columns(a.kv_in, 0, latent, 0, N, d.kv_rank);
  rmsnorm_forward(a.kv_normed, a.kv_rstd, a.kv_in, w.kv_a_norm, kLatentNormEps);
  Tensor kv = like(x, {N, d.NH * d.kv_head});
  matmul_forward(kv, a.kv_normed, w.kv_b.weight, w.kv_b.bias);
  if (d.v < d.HS) zero_tensor(qkv);  // the value heads' padding
  copy_columns(qkv, 0, q, 0, N, d.NH * d.HS);
  for (int64_t h = 0; h < d.NH; ++h) {
    copy_columns(qkv, d.k_col(h), kv, h * d.kv_head, N, d.nope);
    copy_columns(qkv, d.k_col(h) + d.nope, latent, d.kv_rank, N, d.rope);
    copy_columns(qkv, d.v_col(h), kv, h * d.kv_head + d.nope, N, d.v);
  }
}

void latent_qkv_backward(const ModelConfig& config, Tensor& dx, BlockWeights& g, const Tensor& dqkv,
                         const LatentActivations& a, const Tensor& x, const BlockWeights& w,
                         DeferredWeightGrads* deferred) {
  const LatentDims d(config);
  const int64_t C = config.channels, N = x.numel() / C;
  const Tensor tokens = x.reshape({N, C});
  Tensor dtokens = dx.reshape({N, C});
  // The packed gradient apart: dq, d[k_nope | v] per head, and dk_rope summed over the heads.
  Tensor dq = like(dqkv, {N, d.NH * d.HS}), dkv = like(dqkv, {N, d.NH * d.kv_head});
  Tensor dk_rope = like(dqkv, {N, d.rope}), dk_rope_head = like(dqkv, {N, d.rope});
  copy_columns(dq, 0, dqkv, 0, N, d.NH * d.HS);
  for (int64_t h = 0; h < d.NH; ++h) {
    copy_columns(dkv, h * d.kv_head, dqkv, d.k_col(h), N, d.nope);
    copy_columns(dkv, h * d.kv_head + d.nope, dqkv, d.v_col(h), N, d.v);
    copy_columns(h == 0 ? dk_rope : dk_rope_head, 0, dqkv, d.k_col(h) + d.nope, N, d.rope);
    if (h > 0) add_inplace(dk_rope, dk_rope_head);
  }
  Tensor dlatent = like(dqkv, {N, d.kv_rank + d.rope});  // [dc | dk_rope]
  copy_columns(dlatent, d.kv_rank, dk_rope, 0, N, d.rope);
  // kv: kv_b, the latent's norm, kv_a (whose input gradient dx takes first).
  Tensor dkv_normed = like(dqkv, {N, d.kv_rank}), dkv_in = like(dqkv, {N, d.kv_rank});
  linear_backward(dkv_normed, g.kv_b, dkv, a.kv_normed, w.kv_b.weight, deferred);
  rmsnorm_backward(dkv_in, g.kv_a_norm, dkv_normed, a.kv_in, w.kv_a_norm, a.kv_rstd);
  copy_columns(dlatent, 0, dkv_in, 0, N, d.kv_rank);
  linear_backward(dtokens, g.kv_a, dlatent, tokens, w.kv_a.weight, deferred);
  // q: q_proj, or q_b, the query latent's norm and q_a; its input gradient added to dx.
  Tensor dtokens_q = like(dqkv, {N, C});
  if (config.mla.q_rank > 0) {
    Tensor dq_normed = like(dqkv, {N, config.mla.q_rank}), dq_in = like(dqkv, {N, config.mla.q_rank});
    linear_backward(dq_normed, g.q_b, dq, a.q_normed, w.q_b.weight, deferred);
    rmsnorm_backward(dq_in, g.q_a_norm, dq_normed, a.q_in, w.q_a_norm, a.q_rstd);
    linear_backward(dtokens_q, g.q_a, dq_in, tokens, w.q_a.weight, deferred);
  } else {
    linear_backward(dtokens_q, g.q_proj, dq, tokens, w.q_proj.weight, deferred);
  }
  add_inplace(dtokens, dtokens_q);
}

void latent_values_forward(const ModelConfig& config, Tensor& values, const Tensor& core) {
  const LatentDims d(config);
  const int64_t heads = core.numel() / d.HS;  // B·T·NH rows of one head each
  copy_columns(values, 0, core, 0, heads, d.v);
}

void latent_values_backward(const ModelConfig& config, Tensor& dcore, const Tensor& dvalues) {
  const LatentDims d(config);
  if (d.v < d.HS) zero_tensor(dcore);
  copy_columns(dcore, 0, dvalues, 0, dcore.numel() / d.HS, d.v);
}

}  // namespace tessera
