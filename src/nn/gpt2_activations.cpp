// Allocation of GPT-2 activations for a given (B,T).
#include "nn/gpt2_activations.h"

namespace tessera {

void GPT2Activations::ensure(const GPT2Config& config, int64_t batch, int64_t seq_len, Device on,
                             DType activation_dtype) {
  if (batch == B && seq_len == T && on == device && activation_dtype == dtype) return;
  *this = GPT2Activations();  // free the old buffers before the new ones are allocated
  B = batch;
  T = seq_len;
  device = on;
  dtype = activation_dtype;
  const int64_t C = config.channels, NH = config.num_heads;
  auto zeros = [&](Shape shape) { return Tensor::zeros(std::move(shape), DType::f32, device); };
  auto btc = [&](int64_t k) { return Tensor::zeros({B, T, k * C}, dtype, device); };
  auto bt = [&] { return zeros({B, T}); };
  encoded = btc(1);
  layers.clear();
  for (int64_t l = 0; l < config.num_layers; ++l) {
    GPT2LayerActivations a;
    a.ln1 = btc(1), a.ln1_mean = bt(), a.ln1_rstd = bt();
    a.qkv = btc(3);
    a.atty = btc(1), a.lse = zeros({B, NH, T});
    a.attproj = btc(1), a.residual2 = btc(1);
    a.ln2 = btc(1), a.ln2_mean = bt(), a.ln2_rstd = bt();
    a.fch = btc(4), a.fch_gelu = btc(4);
    a.fcproj = btc(1), a.residual3 = btc(1);
    layers.push_back(std::move(a));
  }
  lnf = btc(1), lnf_mean = bt(), lnf_rstd = bt();
  losses = bt();
  dresidual = btc(1), dbtc = btc(1), dnorm = btc(1);
  dwide = btc(4);
}

}  // namespace tessera
