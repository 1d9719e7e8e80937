// Micro-benchmarks of the CPU ops at the GPT-2 benchmark shapes: B=8, T=256, C=256, NH=4, V=8192,
// L=4, fp32 (document-masked attention on a 2048-token window). Run with OMP_NUM_THREADS set to the
// thread count being compared; times are wall-clock.
#include <benchmark/benchmark.h>

#include <string>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/adamw.h"
#include "ops/attention.h"
#include "ops/cross_entropy.h"
#include "ops/gelu.h"
#include "ops/layernorm.h"
#include "ops/matmul.h"

namespace tessera {
namespace {

constexpr int64_t B = 8, T = 256, C = 256, NH = 4, V = 8192, L = 4, N = B * T;

Tensor normal_tensor(Shape shape, const std::string& name, float std = 1.0f) {
  Tensor t = Tensor::zeros(std::move(shape));
  fill_normal(t.f32(), t.numel(), 1234, name, 0.0f, std);
  return t;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
  state.SetItemsProcessed(state.iterations() * N);  // tokens
}

// Args: input channels, output channels (qkv 256->768, attn proj 256->256, fc 256->1024,
// fc proj 1024->256, lm head 256->8192 without bias).
void BM_matmul_forward(benchmark::State& state) {
  const int64_t IC = state.range(0), OC = state.range(1);
  Tensor x = normal_tensor({B, T, IC}, "x"), w = normal_tensor({OC, IC}, "w", 0.02f), out = Tensor::zeros({B, T, OC});
  Tensor bias = OC == V ? Tensor() : normal_tensor({OC}, "b");
  for (auto _ : state) matmul_forward(out, x, w, bias);
  set_flops(state, 2.0 * N * IC * OC);
}

void BM_matmul_backward(benchmark::State& state) {
  const int64_t IC = state.range(0), OC = state.range(1);
  Tensor x = normal_tensor({B, T, IC}, "x"), w = normal_tensor({OC, IC}, "w", 0.02f);
  Tensor dout = normal_tensor({B, T, OC}, "dout"), dx = Tensor::zeros({B, T, IC}), dw = Tensor::zeros({OC, IC});
  Tensor db = OC == V ? Tensor() : Tensor::zeros({OC});
  for (auto _ : state) matmul_backward(dx, dw, db, dout, x, w);
  set_flops(state, 4.0 * N * IC * OC);
}

// FLOPs of the causal attention GEMMs counted as the full (T,T) products, as usually reported.
void BM_attention_forward(benchmark::State& state) {
  Tensor qkv = normal_tensor({B, T, 3 * C}, "qkv"), out = Tensor::zeros({B, T, C}), lse = Tensor::zeros({B, NH, T});
  for (auto _ : state) attention_forward(out, lse, qkv, int(NH));
  set_flops(state, 4.0 * B * T * T * C);
}

void BM_attention_backward(benchmark::State& state) {
  Tensor qkv = normal_tensor({B, T, 3 * C}, "qkv"), out = Tensor::zeros({B, T, C}), lse = Tensor::zeros({B, NH, T});
  Tensor dout = normal_tensor({B, T, C}, "dout"), dqkv = Tensor::zeros({B, T, 3 * C});
  attention_forward(out, lse, qkv, int(NH));
  for (auto _ : state) attention_backward(dqkv, dout, qkv, out, lse, int(NH));
  set_flops(state, 10.0 * B * T * T * C);  // S recomputed, dV, dP, dQ, dK
}

// Forward and backward of one 2048-token window (C = 256, 4 heads) packed with documents of
// state.range(0) tokens under a document mask: the kernels skip the key tiles before a query tile's
// document, so the work falls with the documents' length (2048: plain causal attention).
void BM_attention_documents(benchmark::State& state) {
  constexpr int64_t Tw = 2048;
  const int64_t doc = state.range(0);
  Tensor qkv = normal_tensor({1, Tw, 3 * C}, "qkv"), out = Tensor::zeros({1, Tw, C}), lse = Tensor::zeros({1, NH, Tw});
  Tensor dout = normal_tensor({1, Tw, C}, "dout"), dqkv = Tensor::zeros({1, Tw, 3 * C});
  Tensor starts = Tensor::zeros({1, Tw}, DType::i32);
  for (int64_t t = 0; t < Tw; t++) starts.data<int32_t>()[t] = int32_t(t / doc * doc);
  for (auto _ : state) {
    attention_forward(out, lse, qkv, int(NH), 0, starts);
    attention_backward(dqkv, dout, qkv, out, lse, int(NH), 0, starts);
  }
  state.SetItemsProcessed(state.iterations() * Tw);  // tokens
}

// Loss and in-place gradient; the logits turn into gradients after the first iteration, which
// costs the same: every pass is over all N x V values.
void BM_softmax_cross_entropy(benchmark::State& state) {
  Tensor logits = normal_tensor({N, V}, "logits", 2.0f), losses = Tensor::zeros({N});
  Tensor targets = Tensor::zeros({N}, DType::i32);
  for (int64_t n = 0; n < N; n++) targets.data<int32_t>()[n] = int32_t((n * 7919) % V);
  for (auto _ : state) softmax_cross_entropy(losses, logits, targets, V, 1.0f / float(N));
  state.SetItemsProcessed(state.iterations() * N);
}

void BM_layernorm_forward_backward(benchmark::State& state) {
  Tensor x = normal_tensor({B, T, C}, "x"), w = normal_tensor({C}, "w"), b = normal_tensor({C}, "b");
  Tensor out = Tensor::zeros({B, T, C}), mean = Tensor::zeros({B, T}), rstd = Tensor::zeros({B, T});
  Tensor dout = normal_tensor({B, T, C}, "dout"), dx = Tensor::zeros({B, T, C});
  Tensor dw = Tensor::zeros({C}), db = Tensor::zeros({C});
  for (auto _ : state) {
    layernorm_forward(out, mean, rstd, x, w, b);
    layernorm_backward(dx, dw, db, dout, x, w, mean, rstd);
  }
  state.SetItemsProcessed(state.iterations() * N);
}

void BM_gelu_forward_backward(benchmark::State& state) {
  Tensor x = normal_tensor({B, T, 4 * C}, "x"), out = Tensor::zeros({B, T, 4 * C});
  Tensor dout = normal_tensor({B, T, 4 * C}, "dout"), dx = Tensor::zeros({B, T, 4 * C});
  for (auto _ : state) {
    gelu_forward(out, x);
    gelu_backward(dx, dout, x);
  }
  state.SetItemsProcessed(state.iterations() * N);
}

// One update of every parameter of the benchmark model (tied embedding, T positions).
void BM_adamw_update(benchmark::State& state) {
  const int64_t params = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C;
  Tensor p = normal_tensor({params}, "p", 0.02f), g = normal_tensor({params}, "g", 0.01f);
  Tensor m = Tensor::zeros({params}), v = Tensor::zeros({params});
  AdamWParams hp;
  hp.weight_decay = 0.1f;
  for (auto _ : state) adamw_update(p, g, m, v, hp);
  state.SetItemsProcessed(state.iterations() * params);
}

// The GPT-2 linear layers: (in, out) of c_attn, attn c_proj, c_fc, mlp c_proj, and the classifier.
void gpt2_linear_shapes(benchmark::internal::Benchmark* b) {
  for (auto [in, out] : {std::pair{C, 3 * C}, {C, C}, {C, 4 * C}, {4 * C, C}, {C, V}}) b->Args({in, out});
  b->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_matmul_forward)->Apply(gpt2_linear_shapes);
BENCHMARK(BM_matmul_backward)->Apply(gpt2_linear_shapes);
BENCHMARK(BM_attention_forward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_attention_documents)->Arg(2048)->Arg(512)->Arg(128)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_softmax_cross_entropy)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_layernorm_forward_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_gelu_forward_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_adamw_update)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
