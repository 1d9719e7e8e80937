// A tensor-parallel rank's layer shapes.
#include "nn/tensor_parallel.h"

#include "core/error.h"

namespace tessera {

ModelConfig tp_local_config(const ModelConfig& c, TpPlace tp) {
  const int64_t p = tp.size;
  if (p == 1) return c;
  const auto divides = [&](const char* what, int64_t n) {
    TS_CHECK(n % p == 0, "--tp ", p, " does not divide the model's ", n, " ", what, "; choose a --tp that divides ", n);
  };
  divides("attention heads", c.num_heads);
  // TODO(issue 8): tp above the kv heads replicates each kv head on tp / kv ranks (Megatron); not yet.
  TS_CHECK(c.kv_heads() % p == 0, "--tp ", p, " does not divide the model's ", c.kv_heads(),
           " key/value heads (replicating kv heads over tp ranks is not implemented yet); choose a --tp that divides ",
           c.kv_heads());
  divides("MLP width", c.hidden());
  divides("padded vocabulary rows", c.padded_vocab_size());
  if (c.moe.enabled()) divides("expert width", c.moe.expert_hidden);
  ModelConfig local = c;
  local.head_dim = c.head_size();
  local.num_heads = c.num_heads / p;
  local.num_kv_heads = c.kv_heads() / p;
  local.mlp_hidden = c.hidden() / p;
  local.moe.expert_hidden = c.moe.expert_hidden / p;
  return local;
}

}  // namespace tessera
