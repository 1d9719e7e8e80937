// Grouped GEMM against one dense GEMM of the same FLOPs on the CPU: E = 8 experts, C = 512,
// OC = 1024, M = 4096 tokens x top-2 = 8192 routed rows (dense: the same 8192 rows through one
// weight). The target: grouped reaches >= 80% of dense throughput. Run with OMP_NUM_THREADS
// set to the thread count being compared; times are wall-clock. GFLOP/s counts 2*M*C*OC for the
// forward, 4*M*C*OC for the backward (dx and dweight).
#include <benchmark/benchmark.h>

#include <string>
#include <vector>

#include "core/rng.h"
#include "core/tensor.h"
#include "ops/grouped_matmul.h"
#include "ops/matmul.h"

namespace tessera {
namespace {

constexpr int64_t E = 8, C = 512, OC = 1024, M = 4096 * 2;

Tensor normal_tensor(Shape shape, const std::string& name, float std = 1.0f) {
  Tensor t = Tensor::zeros(std::move(shape));
  fill_normal(t.f32(), t.numel(), 1234, name, 0.0f, std);
  return t;
}

// Rows per expert: uneven (one hot expert with a quarter of the rows, a cold one with under 2%,
// and a ragged remainder) or even.
Tensor routing_offsets(bool uneven) {
  const std::vector<int32_t> uneven_rows = {2048, 1536, 1200, 1024, 880, 700, 512, 292};  // sums to 8192
  Tensor offsets = Tensor::zeros({E + 1}, DType::i32);
  int32_t* o = offsets.data<int32_t>();
  for (int64_t e = 0; e < E; e++) o[e + 1] = o[e] + (uneven ? uneven_rows[size_t(e)] : int32_t(M / E));
  return offsets;
}

void set_flops(benchmark::State& state, double flops_per_iteration) {
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops_per_iteration * double(state.iterations()) * 1e-9, benchmark::Counter::kIsRate);
}

struct Problem {
  Tensor x = normal_tensor({M, C}, "x");
  Tensor dout = normal_tensor({M, OC}, "dout");
  Tensor out = Tensor::zeros({M, OC}), dx = Tensor::zeros({M, C});
};

// Arg: 1 uneven routing, 0 even.
void BM_grouped_forward(benchmark::State& state) {
  Problem p;
  const Tensor w = normal_tensor({E, OC, C}, "w", 0.02f), offsets = routing_offsets(state.range(0) != 0);
  for (auto _ : state) grouped_matmul_forward(p.out, p.x, w, offsets);
  set_flops(state, 2.0 * M * C * OC);
}

void BM_grouped_backward(benchmark::State& state) {
  Problem p;
  const Tensor w = normal_tensor({E, OC, C}, "w", 0.02f), offsets = routing_offsets(state.range(0) != 0);
  Tensor dw = Tensor::zeros({E, OC, C});
  for (auto _ : state) grouped_matmul_backward(p.dx, dw, p.dout, p.x, w, offsets);
  set_flops(state, 4.0 * M * C * OC);
}

void BM_grouped_forward_backward(benchmark::State& state) {
  Problem p;
  const Tensor w = normal_tensor({E, OC, C}, "w", 0.02f), offsets = routing_offsets(state.range(0) != 0);
  Tensor dw = Tensor::zeros({E, OC, C});
  for (auto _ : state) {
    grouped_matmul_forward(p.out, p.x, w, offsets);
    grouped_matmul_backward(p.dx, dw, p.dout, p.x, w, offsets);
  }
  set_flops(state, 6.0 * M * C * OC);
}

void BM_dense_forward(benchmark::State& state) {
  Problem p;
  const Tensor w = normal_tensor({OC, C}, "w", 0.02f);
  for (auto _ : state) matmul_forward(p.out, p.x, w, Tensor());
  set_flops(state, 2.0 * M * C * OC);
}

void BM_dense_backward(benchmark::State& state) {
  Problem p;
  const Tensor w = normal_tensor({OC, C}, "w", 0.02f);
  Tensor dw = Tensor::zeros({OC, C}), no_dbias;
  for (auto _ : state) matmul_backward(p.dx, dw, no_dbias, p.dout, p.x, w);
  set_flops(state, 4.0 * M * C * OC);
}

void BM_dense_forward_backward(benchmark::State& state) {
  Problem p;
  const Tensor w = normal_tensor({OC, C}, "w", 0.02f);
  Tensor dw = Tensor::zeros({OC, C}), no_dbias;
  for (auto _ : state) {
    matmul_forward(p.out, p.x, w, Tensor());
    matmul_backward(p.dx, dw, no_dbias, p.dout, p.x, w);
  }
  set_flops(state, 6.0 * M * C * OC);
}

BENCHMARK(BM_dense_forward_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_grouped_forward_backward)->ArgName("uneven")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_dense_forward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_grouped_forward)->ArgName("uneven")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_dense_backward)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_grouped_backward)->ArgName("uneven")->Arg(1)->Arg(0)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tessera

BENCHMARK_MAIN();
