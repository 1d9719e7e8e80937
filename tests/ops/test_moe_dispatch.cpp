// MoE token permutation: the plan on a hand-checked case (sorted by expert, stable in the
// assignment), capacity dropping the later assignments of a full expert, empty experts, the plan
// against std::stable_sort; gather, combine and their backwards against double references and by
// finite differences, the round trips, the written outputs and untouched rows, one thread vs
// several, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <string>
#include <vector>

#include "ops/moe_dispatch.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::expect_error_with;
using testing::random_tensor;

Tensor i32_tensor(Shape shape, const std::vector<int32_t>& values) {
  Tensor t = Tensor::zeros(std::move(shape), DType::i32);
  EXPECT_EQ(int64_t(values.size()), t.numel());
  std::copy(values.begin(), values.end(), t.data<int32_t>());
  return t;
}

std::vector<int32_t> values_of(const Tensor& t) {
  return std::vector<int32_t>(t.data<int32_t>(), t.data<int32_t>() + t.numel());
}

struct Plan {
  Tensor order, offsets;
  int64_t M = 0, K = 0;
};

Plan plan_of(const Tensor& experts, int64_t E, int64_t capacity) {
  Plan p{Tensor::zeros({experts.numel()}, DType::i32), Tensor::zeros({E + 1}, DType::i32), 0, experts.size(1)};
  p.M = moe_dispatch_plan(p.order, p.offsets, experts, E, capacity);
  return p;
}

// N rows of K distinct experts in [0, E), drawn unevenly (low experts favoured).
Tensor random_experts(int64_t N, int64_t K, int64_t E, uint64_t seed) {
  Tensor t = Tensor::zeros({N, K}, DType::i32);
  const std::vector<float> u = testing::random_floats(N * E, seed, 0.0f, 1.0f);
  for (int64_t n = 0; n < N; n++) {
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    // key u * (e + 1): smaller for low experts on average, so they come first more often
    std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
      return u[size_t(n * E + a)] * float(a + 1) < u[size_t(n * E + b)] * float(b + 1);
    });
    std::copy(idx.begin(), idx.begin() + K, t.data<int32_t>() + n * K);
  }
  return t;
}

TEST(MoeDispatch, PlanSortsByExpertStablyInTheAssignment) {
  // Assignments a = n*K + k: 0:e2 1:e0 | 2:e0 3:e1 | 4:e2 5:e1 | 6:e0 7:e2; expert 3 gets none.
  const Tensor experts = i32_tensor({4, 2}, {2, 0, 0, 1, 2, 1, 0, 2});
  const Plan p = plan_of(experts, 4, 0);
  EXPECT_EQ(p.M, 8);
  EXPECT_EQ(values_of(p.order), (std::vector<int32_t>{1, 2, 6, 3, 5, 0, 4, 7}));
  EXPECT_EQ(values_of(p.offsets), (std::vector<int32_t>{0, 3, 5, 8, 8}));
  EXPECT_EQ(p.offsets.device(), Device::cpu);
}

TEST(MoeDispatch, CapacityDropsEachExpertsLaterAssignments) {
  const Tensor experts = i32_tensor({4, 2}, {2, 0, 0, 1, 2, 1, 0, 2});
  // capacity 2: expert 0 drops a = 6 (token 3's first choice), expert 2 drops a = 7.
  const Plan two = plan_of(experts, 4, 2);
  EXPECT_EQ(two.M, 6);
  EXPECT_EQ(values_of(two.order), (std::vector<int32_t>{1, 2, 3, 5, 0, 4, -1, -1}));
  EXPECT_EQ(values_of(two.offsets), (std::vector<int32_t>{0, 2, 4, 6, 6}));
  const Plan one = plan_of(experts, 4, 1);
  EXPECT_EQ(one.M, 3);
  EXPECT_EQ(values_of(one.order), (std::vector<int32_t>{1, 3, 0, -1, -1, -1, -1, -1}));
  EXPECT_EQ(values_of(one.offsets), (std::vector<int32_t>{0, 1, 2, 3, 3}));
  // A capacity no expert reaches is dropless.
  const Plan roomy = plan_of(experts, 4, 3), dropless = plan_of(experts, 4, 0);
  EXPECT_EQ(roomy.M, 8);
  EXPECT_EQ(values_of(roomy.order), values_of(dropless.order));
  EXPECT_EQ(values_of(roomy.offsets), values_of(dropless.offsets));
}

TEST(MoeDispatch, PlanMatchesStableSortReference) {
  const int64_t N = 57, K = 3, E = 8;
  const Tensor experts = random_experts(N, K, E, 401);
  for (const int64_t capacity : {int64_t(0), int64_t(5), int64_t(20), int64_t(1000)}) {
    SCOPED_TRACE(::testing::Message() << "capacity " << capacity);
    std::vector<int32_t> sorted(static_cast<size_t>(N * K));
    std::iota(sorted.begin(), sorted.end(), 0);
    const int32_t* ids = experts.data<int32_t>();
    std::stable_sort(sorted.begin(), sorted.end(), [&](int32_t a, int32_t b) { return ids[a] < ids[b]; });
    std::vector<int32_t> order, offsets = {0};
    std::vector<int64_t> taken(static_cast<size_t>(E), 0);
    for (int32_t a : sorted)
      if (capacity == 0 || taken[size_t(ids[a])] < capacity) {
        taken[size_t(ids[a])]++;
        order.push_back(a);
      }
    for (int64_t e = 0; e < E; e++) offsets.push_back(offsets.back() + int32_t(taken[size_t(e)]));
    const int64_t M = int64_t(order.size());
    order.resize(size_t(N * K), -1);
    const Plan p = plan_of(experts, E, capacity);
    EXPECT_EQ(p.M, M);
    EXPECT_EQ(values_of(p.order), order);
    EXPECT_EQ(values_of(p.offsets), offsets);
  }
}

// pos(n,k) of every assignment, -1 when dropped.
std::vector<int64_t> positions(const Plan& p) {
  std::vector<int64_t> pos(size_t(p.order.numel()), -1);
  for (int64_t i = 0; i < p.M; i++) pos[size_t(p.order.data<int32_t>()[i])] = i;
  return pos;
}

struct PermuteCase {
  int64_t N = 11, K = 2, E = 4, C = 13, extra_rows = 3;
  Tensor experts = random_experts(N, K, E, 402);
  Plan p = plan_of(experts, E, 4);  // drops some: 22 assignments over 4 experts of capacity 4
  int64_t M_rows = p.M + extra_rows;
  Tensor x = random_tensor({N, C}, 403);
  Tensor ys = random_tensor({M_rows, C}, 404);
  Tensor weights = random_tensor({N, K}, 405, 0.1f, 1.0f);
  Tensor dout = random_tensor({N, C}, 406);
  Tensor dxs = random_tensor({M_rows, C}, 407);
};

TEST(MoeDispatch, TheCaseDropsSomeAssignments) {
  const PermuteCase c;
  EXPECT_LT(c.p.M, c.N * c.K);
  EXPECT_GT(c.p.M, 0);
}

TEST(MoeDispatch, GatherCopiesTokenRowsAndLeavesTheRestAlone) {
  const PermuteCase c;
  Tensor xs = Tensor::zeros({c.M_rows, c.C});
  testing::fill(xs, 7.0f);
  moe_gather(xs, c.x, c.p.order, c.p.M, c.K);
  for (int64_t i = 0; i < c.M_rows; i++)
    for (int64_t ch = 0; ch < c.C; ch++) {
      const float expected = i < c.p.M ? c.x.f32()[(c.p.order.data<int32_t>()[i] / c.K) * c.C + ch] : 7.0f;
      ASSERT_EQ(xs.f32()[i * c.C + ch], expected) << "row " << i;
    }
}

TEST(MoeDispatch, GatherBackwardMatchesReferenceAndFiniteDifferences) {
  PermuteCase c;
  const std::vector<int64_t> pos = positions(c.p);
  std::vector<double> ref(static_cast<size_t>(c.N * c.C), 0.0);
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t k = 0; k < c.K; k++)
      if (pos[size_t(n * c.K + k)] >= 0)
        for (int64_t ch = 0; ch < c.C; ch++)
          ref[size_t(n * c.C + ch)] += c.dxs.f32()[pos[size_t(n * c.K + k)] * c.C + ch];
  Tensor dx = Tensor::zeros({c.N, c.C});
  testing::fill(dx, testing::kNaN);  // written, never read; tokens with nothing kept get 0
  moe_gather_backward(dx, c.dxs, c.p.order, c.p.M, c.K);
  testing::expect_close(dx, ref, 1e-6, 1e-6, "dx");
  Tensor xs = Tensor::zeros({c.M_rows, c.C});
  auto loss = [&] {
    moe_gather(xs, c.x, c.p.order, c.p.M, c.K);
    return testing::dot(xs.view(0, {c.p.M, c.C}), c.dxs.view(0, {c.p.M, c.C}));
  };
  testing::expect_close(dx, testing::numeric_gradient(c.x, loss, 1e-2f), 1e-4, 1e-4, "dx by finite differences");
}

TEST(MoeDispatch, CombineMatchesReferenceAndFiniteDifferences) {
  PermuteCase c;
  const std::vector<int64_t> pos = positions(c.p);
  std::vector<double> ref(static_cast<size_t>(c.N * c.C), 0.0);
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t k = 0; k < c.K; k++)
      if (const int64_t p = pos[size_t(n * c.K + k)]; p >= 0)
        for (int64_t ch = 0; ch < c.C; ch++)
          ref[size_t(n * c.C + ch)] += double(c.weights.f32()[n * c.K + k]) * c.ys.f32()[p * c.C + ch];
  Tensor out = Tensor::zeros({c.N, c.C});
  testing::fill(out, testing::kNaN);  // written, never read
  moe_combine(out, c.ys, c.weights, c.p.order, c.p.M, c.K);
  testing::expect_close(out, ref, 1e-6, 1e-6, "out");

  auto loss = [&] {
    moe_combine(out, c.ys, c.weights, c.p.order, c.p.M, c.K);
    return testing::dot(out, c.dout);
  };
  const std::vector<double> dys_fd = testing::numeric_gradient(c.ys, loss, 1e-2f);
  const std::vector<double> dw_fd = testing::numeric_gradient(c.weights, loss, 1e-2f);
  Tensor dys = Tensor::zeros({c.M_rows, c.C}), dweights = Tensor::zeros({c.N, c.K});
  testing::fill(dys, 7.0f);
  testing::fill(dweights, testing::kNaN);  // written, never read, 0 where dropped
  moe_combine_backward(dys, dweights, c.dout, c.ys, c.weights, c.p.order, c.p.M, c.K);
  testing::expect_close(dys.f32(), std::vector<double>(dys_fd.begin(), dys_fd.begin() + c.p.M * c.C), 1e-4, 1e-4,
                        "dys by finite differences");
  testing::expect_close(dweights, dw_fd, 1e-4, 1e-4, "dweights by finite differences");
  for (int64_t i = c.p.M * c.C; i < c.M_rows * c.C; i++) ASSERT_EQ(dys.f32()[i], 7.0f) << "row past M written";
  for (int64_t a = 0; a < c.N * c.K; a++)
    if (pos[size_t(a)] < 0) {
      EXPECT_EQ(dweights.f32()[a], 0.0f) << "dropped assignment " << a;
    }
}

TEST(MoeDispatch, GatherThenCombineRestoresTokens) {
  // Weights summing to 1 over a token's kept choices give the token back; gather_backward of a
  // gather multiplies each token by its number of kept choices.
  PermuteCase c;
  const std::vector<int64_t> pos = positions(c.p);
  std::vector<int64_t> kept(static_cast<size_t>(c.N), 0);
  for (int64_t a = 0; a < c.N * c.K; a++) kept[size_t(a / c.K)] += pos[size_t(a)] >= 0;
  Tensor w = Tensor::zeros({c.N, c.K});
  for (int64_t a = 0; a < c.N * c.K; a++)
    w.f32()[a] = pos[size_t(a)] >= 0 ? 1.0f / float(kept[size_t(a / c.K)]) : 5.0f;  // dropped weights are ignored
  Tensor xs = Tensor::zeros({c.M_rows, c.C}), out = Tensor::zeros({c.N, c.C}), back = Tensor::zeros({c.N, c.C});
  moe_gather(xs, c.x, c.p.order, c.p.M, c.K);
  moe_combine(out, xs, w, c.p.order, c.p.M, c.K);
  moe_gather_backward(back, xs, c.p.order, c.p.M, c.K);
  std::vector<double> restored, scaled;
  for (int64_t n = 0; n < c.N; n++)
    for (int64_t ch = 0; ch < c.C; ch++) {
      restored.push_back(kept[size_t(n)] > 0 ? c.x.f32()[n * c.C + ch] : 0.0);
      scaled.push_back(double(kept[size_t(n)]) * c.x.f32()[n * c.C + ch]);
    }
  testing::expect_close(out, restored, 1e-6, 1e-6, "combine(gather(x))");
  testing::expect_close(back, scaled, 1e-6, 1e-6, "gather_backward(gather(x))");
  // Dropless: every token is restored.
  const Plan dropless = plan_of(c.experts, c.E, 0);
  Tensor xs_all = Tensor::zeros({c.N * c.K, c.C}), half = Tensor::zeros({c.N, c.K});
  testing::fill(half, 0.5f);
  moe_gather(xs_all, c.x, dropless.order, dropless.M, c.K);
  moe_combine(out, xs_all, half, dropless.order, dropless.M, c.K);
  testing::expect_close(out, std::vector<double>(c.x.f32(), c.x.f32() + c.x.numel()), 1e-6, 1e-6, "dropless");
}

TEST(MoeDispatch, OneThreadAndSeveralAgree) {
  const int64_t N = 300, K = 2, E = 8, C = 130;  // above the parallel threshold
  const Tensor experts = random_experts(N, K, E, 408);
  const Plan p = plan_of(experts, E, 90);
  const Tensor x = random_tensor({N, C}, 409), weights = random_tensor({N, K}, 410), dout = random_tensor({N, C}, 411);
  Tensor xs[2], dx[2], out[2], dys[2], dw[2];
  for (int run = 0; run < 2; run++) {
    xs[run] = Tensor::zeros({N * K, C});
    dx[run] = Tensor::zeros({N, C});
    out[run] = Tensor::zeros({N, C});
    dys[run] = Tensor::zeros({N * K, C});
    dw[run] = Tensor::zeros({N, K});
    testing::with_threads(run == 0 ? 1 : 3, [&] {
      moe_gather(xs[run], x, p.order, p.M, K);
      moe_gather_backward(dx[run], xs[run], p.order, p.M, K);
      moe_combine(out[run], xs[run], weights, p.order, p.M, K);
      moe_combine_backward(dys[run], dw[run], dout, xs[run], weights, p.order, p.M, K);
    });
  }
  for (auto [name, t] : {std::pair{"xs", xs}, {"dx", dx}, {"out", out}, {"dys", dys}, {"dweights", dw}})
    testing::expect_identical(t[0], t[1], name);
}

TEST(MoeDispatch, PlanRejectsBadArguments) {
  const char* op = "moe_dispatch_plan: ";
  const Tensor experts = i32_tensor({3, 2}, {0, 1, 2, 3, 1, 0});
  Tensor order = Tensor::zeros({6}, DType::i32), offsets = Tensor::zeros({5}, DType::i32);
  expect_error_with([&] { moe_dispatch_plan(order, offsets, experts, 4, -1); }, {op, "capacity = -1"});
  expect_error_with([&] { moe_dispatch_plan(order, offsets, experts, 0, 0); }, {op, "num_experts = 0"});
  expect_error_with([&] { moe_dispatch_plan(order, offsets, experts, 3, 0); }, {op, "offsets has shape"});
  Tensor short_offsets = Tensor::zeros({4}, DType::i32), f32_offsets = Tensor::zeros({5});
  expect_error_with([&] { moe_dispatch_plan(order, short_offsets, experts, 4, 0); }, {op, "offsets has shape (4)"});
  expect_error_with([&] { moe_dispatch_plan(order, f32_offsets, experts, 4, 0); }, {op, "offsets must be i32"});
  Tensor offsets3 = Tensor::zeros({4}, DType::i32);
  expect_error_with([&] { moe_dispatch_plan(order, offsets3, experts, 3, 0); },
                    {op, "experts[1,1] = 3 is outside [0, num_experts = 3)"});
  Tensor offsets2 = Tensor::zeros({2}, DType::i32);
  expect_error_with([&] { moe_dispatch_plan(order, offsets2, experts, 1, 0); }, {op, "K = 2", "num_experts = 1"});
  Tensor short_order = Tensor::zeros({5}, DType::i32);
  expect_error_with([&] { moe_dispatch_plan(short_order, offsets, experts, 4, 0); }, {op, "order has shape"});
  const Tensor f32_experts = Tensor::zeros({3, 2});
  expect_error_with([&] { moe_dispatch_plan(order, offsets, f32_experts, 4, 0); }, {op, "experts must be i32"});
}

TEST(MoeDispatch, PermutationOpsRejectBadArguments) {
  PermuteCase c;
  const int64_t M = c.p.M;
  Tensor xs = Tensor::zeros({c.M_rows, c.C}), narrow = Tensor::zeros({c.M_rows, c.C - 1});
  expect_error_with([&] { moe_gather(narrow, c.x, c.p.order, M, c.K); }, {"moe_gather: xs must be (M_rows,13)"});
  Tensor few_rows = Tensor::zeros({M - 1, c.C});
  expect_error_with([&] { moe_gather(few_rows, c.x, c.p.order, M, c.K); }, {"moe_gather: xs", "fewer than M"});
  expect_error_with([&] { moe_gather(xs, c.x, c.p.order, c.N * c.K + 1, c.K); }, {"moe_gather: M = 23"});
  expect_error_with([&] { moe_gather(xs, c.x, c.p.order, M, 3); }, {"moe_gather: order has shape"});
  expect_error_with([&] { moe_gather(xs, c.x, c.p.order, M, 0); }, {"moe_gather: K = 0"});
  // M past the kept assignments reads a -1 entry.
  Tensor big = Tensor::zeros({M + 1, c.C});
  expect_error_with([&] { moe_gather(big, c.x, c.p.order, M + 1, c.K); }, {"moe_gather: order[", "] = -1"});
  Tensor dup = Tensor::zeros({c.N * c.K}, DType::i32);
  std::copy(c.p.order.data<int32_t>(), c.p.order.data<int32_t>() + c.N * c.K, dup.data<int32_t>());
  dup.data<int32_t>()[1] = dup.data<int32_t>()[0];
  Tensor dx = Tensor::zeros({c.N, c.C});
  expect_error_with([&] { moe_gather_backward(dx, c.dxs, dup, M, c.K); }, {"moe_gather_backward: order[1]", "twice"});
  const Tensor int_x = Tensor::zeros({c.N, c.C}, DType::i32);
  expect_error_with([&] { moe_gather(xs, int_x, c.p.order, M, c.K); }, {"moe_gather: x is i32 on the CPU"});

  Tensor out = Tensor::zeros({c.N, c.C}), wrong_w = Tensor::zeros({c.N, c.K + 1});
  expect_error_with([&] { moe_combine(out, c.ys, wrong_w, c.p.order, M, c.K); }, {"moe_combine: weights has shape"});
  Tensor dys = Tensor::zeros({c.M_rows, c.C}), dweights = Tensor::zeros({c.N, c.K});
  Tensor wrong_dys = Tensor::zeros({c.M_rows + 1, c.C}), wrong_dw = Tensor::zeros({c.N + 1, c.K});
  expect_error_with([&] { moe_combine_backward(wrong_dys, dweights, c.dout, c.ys, c.weights, c.p.order, M, c.K); },
                    {"moe_combine_backward: dys has shape"});
  expect_error_with([&] { moe_combine_backward(dys, wrong_dw, c.dout, c.ys, c.weights, c.p.order, M, c.K); },
                    {"moe_combine_backward: dweights has shape"});
}

}  // namespace
}  // namespace tessera
