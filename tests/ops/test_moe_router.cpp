// MoE router: scores, lse, top-K and weights against a double reference for softmax and sigmoid,
// ties and descending order, the selection bias moving the choice but not the weights, the aux and
// z losses on hand-checked cases and against double sums, the backward of every term by finite
// differences (well-separated logits hold the selection fixed), the written dlogits, one thread vs
// several, bad arguments.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "ops/moe_router.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

using testing::expect_error_with;
using testing::random_tensor;

struct Routed {
  Tensor experts, weights, scores, lse;
};

Routed route(const Tensor& logits, const Tensor& bias, RouterScore kind, int64_t K, bool renormalize = true,
              RouterGroups groups = {}) {
  const int64_t N = logits.size(0), E = logits.size(1);
  Routed r{Tensor::zeros({N, K}, DType::i32), Tensor::zeros({N, K}), Tensor::zeros({N, E}), Tensor::zeros({N})};
  moe_router_forward(r.experts, r.weights, r.scores, r.lse, logits, bias, kind, renormalize, groups);
  return r;
}

Tensor experts_of(int64_t N, int64_t K, const std::vector<int32_t>& ids) {
  Tensor t = Tensor::zeros({N, K}, DType::i32);
  EXPECT_EQ(int64_t(ids.size()), N * K);
  std::copy(ids.begin(), ids.end(), t.data<int32_t>());
  return t;
}

std::vector<int32_t> ids_of(const Tensor& experts) {
  return std::vector<int32_t>(experts.data<int32_t>(), experts.data<int32_t>() + experts.numel());
}

struct RouterReference {
  std::vector<double> scores, lse, weights;
  std::vector<int32_t> experts;
};

// The router in double: scores, lse, the top-K of score + bias (ties to the lower index), weights.
RouterReference reference_router(const Tensor& logits, const Tensor& bias, RouterScore kind, int64_t K) {
  const int64_t N = logits.size(0), E = logits.size(1);
  RouterReference ref;
  for (int64_t n = 0; n < N; n++) {
    const float* l = logits.f32() + n * E;
    const double max_l = *std::max_element(l, l + E);
    double sum = 0.0;
    for (int64_t e = 0; e < E; e++) sum += std::exp(double(l[e]) - max_l);
    ref.lse.push_back(max_l + std::log(sum));
    std::vector<double> s(static_cast<size_t>(E)), key(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; e++) {
      s[size_t(e)] =
          kind == RouterScore::softmax ? std::exp(double(l[e]) - max_l) / sum : 1.0 / (1.0 + std::exp(-double(l[e])));
      key[size_t(e)] = s[size_t(e)] + (bias.defined() ? double(bias.f32()[e]) : 0.0);
    }
    ref.scores.insert(ref.scores.end(), s.begin(), s.end());
    std::vector<int32_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) { return key[size_t(a)] > key[size_t(b)]; });
    double chosen = 0.0;
    for (int64_t k = 0; k < K; k++) chosen += s[size_t(idx[size_t(k)])];
    for (int64_t k = 0; k < K; k++) {
      ref.experts.push_back(idx[size_t(k)]);
      ref.weights.push_back(s[size_t(idx[size_t(k)])] / chosen);
    }
  }
  return ref;
}

// Per row a shuffled ladder 0.7 apart (plus a little noise), centred on 0: a perturbation of 1e-2
// never reorders a row, so the selection is fixed under finite differences.
Tensor separated_logits(int64_t N, int64_t E, uint64_t seed) {
  Tensor t = Tensor::zeros({N, E});
  const std::vector<float> shuffle = testing::random_floats(N * E, seed),
                           noise = testing::random_floats(N * E, seed + 1);
  for (int64_t n = 0; n < N; n++) {
    std::vector<int64_t> idx(static_cast<size_t>(E));
    std::iota(idx.begin(), idx.end(), 0);
    std::sort(idx.begin(), idx.end(),
              [&](int64_t a, int64_t b) { return shuffle[size_t(n * E + a)] < shuffle[size_t(n * E + b)]; });
    for (int64_t r = 0; r < E; r++)
      t.f32()[n * E + idx[size_t(r)]] = 0.7f * (float(r) - 0.5f * float(E - 1)) + 0.05f * noise[size_t(n * E + r)];
  }
  return t;
}

// The smallest gap, over rows, between the K-th and the (K+1)-th selection key (score + bias).
double selection_margin(const Tensor& scores, const Tensor& bias, int64_t K) {
  const int64_t N = scores.size(0), E = scores.size(1);
  double margin = INFINITY;
  for (int64_t n = 0; n < N; n++) {
    std::vector<double> key(static_cast<size_t>(E));
    for (int64_t e = 0; e < E; e++) key[size_t(e)] = scores.f32()[n * E + e] + (bias.defined() ? bias.f32()[e] : 0.0f);
    std::sort(key.begin(), key.end(), std::greater<>());
    if (K < E) margin = std::min(margin, key[size_t(K - 1)] - key[size_t(K)]);
  }
  return margin;
}

void expect_matches_reference(const Routed& r, const RouterReference& ref) {
  testing::expect_close(r.scores, ref.scores, 1e-6, 1e-5, "scores");
  testing::expect_close(r.lse, ref.lse, 1e-6, 1e-6, "lse");
  EXPECT_EQ(ids_of(r.experts), ref.experts);
  testing::expect_close(r.weights, ref.weights, 1e-6, 1e-5, "weights");
}

TEST(MoeRouter, SoftmaxForwardMatchesDoubleReference) {
  const int64_t N = 13, E = 9, K = 3;
  const Tensor logits = random_tensor({N, E}, 301, -4.0f, 4.0f);
  const Routed r = route(logits, Tensor(), RouterScore::softmax, K);
  expect_matches_reference(r, reference_router(logits, Tensor(), RouterScore::softmax, K));
}

TEST(MoeRouter, SigmoidForwardMatchesDoubleReferenceWithAndWithoutBias) {
  const int64_t N = 13, E = 16, K = 4;
  const Tensor logits = random_tensor({N, E}, 302, -5.0f, 5.0f), bias = random_tensor({E}, 303, -0.3f, 0.3f);
  for (const Tensor& b : {Tensor(), bias}) {
    SCOPED_TRACE(b.defined() ? "with bias" : "without bias");
    const Routed r = route(logits, b, RouterScore::sigmoid, K);
    expect_matches_reference(r, reference_router(logits, b, RouterScore::sigmoid, K));
  }
}

TEST(MoeRouter, TopKIsDescendingWithTiesToTheLowerIndex) {
  // Row 0: three-way tie at 3 -> experts 1, 2, 4, then 0. Row 1: all equal -> 0, 1, 2, 3.
  // Row 2: ascending logits -> the last experts first.
  const Tensor logits = testing::tensor_of({3, 5}, {1, 3, 3, 0, 3, /**/ 2, 2, 2, 2, 2, /**/ -2, -1, 0, 1, 2});
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    SCOPED_TRACE(kind == RouterScore::softmax ? "softmax" : "sigmoid");
    const Routed r = route(logits, Tensor(), kind, 4);
    EXPECT_EQ(ids_of(r.experts), (std::vector<int32_t>{1, 2, 4, 0, /**/ 0, 1, 2, 3, /**/ 4, 3, 2, 1}));
    for (int64_t k = 0; k < 4; k++) EXPECT_FLOAT_EQ(r.weights.f32()[4 + k], 0.25f);  // equal scores, equal weights
  }
}

TEST(MoeRouter, BiasMovesTheSelectionButNotTheWeights) {
  const Tensor logits = testing::tensor_of({1, 4}, {2.0f, 1.0f, 0.0f, -1.0f});
  const Routed plain = route(logits, Tensor(), RouterScore::sigmoid, 2);
  EXPECT_EQ(ids_of(plain.experts), (std::vector<int32_t>{0, 1}));
  // +0.9 lifts expert 2 (0.5) above expert 0 (0.88); -0.5 sinks expert 1 below expert 3.
  const Tensor bias = testing::tensor_of({4}, {0.0f, -0.5f, 0.9f, 0.0f});
  const Routed biased = route(logits, bias, RouterScore::sigmoid, 2);
  EXPECT_EQ(ids_of(biased.experts), (std::vector<int32_t>{2, 0}));
  testing::expect_identical(biased.scores, plain.scores, "scores");  // the bias never enters the scores
  const double s0 = 1.0 / (1.0 + std::exp(-2.0)), s2 = 0.5;
  testing::expect_close(biased.weights, {s2 / (s0 + s2), s0 / (s0 + s2)}, 1e-6, 1e-6, "weights");
}

TEST(MoeRouter, LossesOnHandCheckedCases) {
  // Uniform probabilities give aux = K whatever the counts; balanced counts too. lse = log E.
  const int64_t N = 4, E = 4, K = 2;
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    SCOPED_TRACE(kind == RouterScore::softmax ? "softmax" : "sigmoid");
    const Routed r = route(Tensor::zeros({N, E}), Tensor(), kind, K);
    const RouterLosses routed = moe_router_losses(r.experts, r.scores, r.lse, kind);
    EXPECT_NEAR(routed.aux, double(K), 1e-6);
    EXPECT_NEAR(routed.z, std::log(4.0) * std::log(4.0), 1e-6);
    const Tensor balanced = experts_of(N, K, {0, 1, 2, 3, 0, 1, 2, 3});
    EXPECT_NEAR(moe_router_losses(balanced, r.scores, r.lse, kind).aux, double(K), 1e-6);
  }
  // N = 2, E = 2, K = 1, both tokens on expert 0 (count 2, 0), P = (0.75, 0.25):
  // aux = 2 * (2/2 * 0.75 + 0) = 1.5; z = (1^2 + 3^2) / 2 = 5. The sigmoid scores (0.6, 0.2)
  // normalise to the same P.
  const Tensor experts = experts_of(2, 1, {0, 0}), lse = testing::tensor_of({2}, {1.0f, 3.0f});
  const RouterLosses soft =
      moe_router_losses(experts, testing::tensor_of({2, 2}, {0.75f, 0.25f, 0.75f, 0.25f}), lse, RouterScore::softmax);
  const RouterLosses sig =
      moe_router_losses(experts, testing::tensor_of({2, 2}, {0.6f, 0.2f, 0.6f, 0.2f}), lse, RouterScore::sigmoid);
  for (const RouterLosses& l : {soft, sig}) {
    EXPECT_NEAR(l.aux, 1.5, 1e-7);
    EXPECT_NEAR(l.z, 5.0, 1e-12);
  }
}

TEST(MoeRouter, LossesMatchDoubleSums) {
  const int64_t N = 17, E = 8, K = 2;
  const Tensor logits = random_tensor({N, E}, 304, -3.0f, 3.0f);
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    SCOPED_TRACE(kind == RouterScore::softmax ? "softmax" : "sigmoid");
    const Routed r = route(logits, Tensor(), kind, K);
    std::vector<double> count(static_cast<size_t>(E), 0.0), P(size_t(E), 0.0);
    for (int32_t e : ids_of(r.experts)) count[size_t(e)] += 1.0;
    double z = 0.0;
    for (int64_t n = 0; n < N; n++) {
      const float* s = r.scores.f32() + n * E;
      const double row = kind == RouterScore::softmax ? 1.0 : std::accumulate(s, s + E, 0.0);
      for (int64_t e = 0; e < E; e++) P[size_t(e)] += s[e] / row / double(N);
      z += double(r.lse.f32()[n]) * r.lse.f32()[n] / double(N);
    }
    double aux = 0.0;
    for (int64_t e = 0; e < E; e++) aux += double(E) * count[size_t(e)] / double(N) * P[size_t(e)];
    const RouterLosses l = moe_router_losses(r.experts, r.scores, r.lse, kind);
    EXPECT_NEAR(l.aux, aux, 1e-12);
    EXPECT_NEAR(l.z, z, 1e-12);
  }
}

struct BackwardCase {
  RouterScore kind;
  bool with_bias;
  float aux_scale, z_scale;
};

TEST(MoeRouter, BackwardMatchesFiniteDifferences) {
  const int64_t N = 6, E = 7, K = 3;
  const std::vector<BackwardCase> cases = {
      {RouterScore::softmax, false, 0.0f, 0.0f}, {RouterScore::softmax, false, 1.0f, 0.0f},
      {RouterScore::softmax, false, 0.0f, 1.0f}, {RouterScore::softmax, false, 0.7f, 0.3f},
      {RouterScore::sigmoid, false, 0.0f, 0.0f}, {RouterScore::sigmoid, false, 1.0f, 0.0f},
      {RouterScore::sigmoid, false, 0.0f, 1.0f}, {RouterScore::sigmoid, true, 0.7f, 0.3f},
  };
  Tensor logits = separated_logits(N, E, 305);
  const Tensor bias = testing::tensor_of({E}, {0.05f, -0.1f, 0.2f, 0.0f, -0.15f, 0.1f, 0.02f});
  const Tensor dweights = random_tensor({N, K}, 306);
  for (const BackwardCase& c : cases) {
    SCOPED_TRACE(::testing::Message() << (c.kind == RouterScore::softmax ? "softmax" : "sigmoid")
                                      << (c.with_bias ? " with bias" : "") << " aux_scale=" << c.aux_scale
                                      << " z_scale=" << c.z_scale);
    const Tensor b = c.with_bias ? bias : Tensor();
    const Routed base = route(logits, b, c.kind, K);
    // A step of h = 1e-2 in one logit moves a score by at most h/4 (sigmoid's and softmax's largest
    // slope), so two keys by at most h/2 relative to each other: the selection stays put.
    ASSERT_GT(selection_margin(base.scores, b, K), 0.006);
    auto loss = [&] {
      const Routed r = route(logits, b, c.kind, K);
      EXPECT_EQ(ids_of(r.experts), ids_of(base.experts)) << "the selection moved";
      const RouterLosses l = moe_router_losses(r.experts, r.scores, r.lse, c.kind);
      return testing::dot(r.weights, dweights) + c.aux_scale * l.aux + c.z_scale * l.z;
    };
    const std::vector<double> fd = testing::numeric_gradient(logits, loss, 1e-2f);
    Tensor dlogits = Tensor::zeros({N, E});
    moe_router_backward(dlogits, dweights, base.experts, base.weights, base.scores, base.lse, logits, c.kind,
                        c.aux_scale, c.z_scale);
    testing::expect_close(dlogits, fd, 2e-4, 2e-3, "dlogits");
  }
}

// Without renormalisation (Hugging Face's norm_topk_prob false: DeepSeek-V2, some Qwen MoEs) the
// weights are the chosen experts' scores themselves, the same experts chosen; the backward carries
// them through the score function alone (finite differences, softmax and sigmoid with its bias).
TEST(MoeRouter, UnrenormalisedWeightsAreTheChosenScores) {
  const int64_t N = 6, E = 7, K = 3;
  Tensor logits = separated_logits(N, E, 311);
  const Tensor bias = testing::tensor_of({E}, {0.05f, -0.1f, 0.2f, 0.0f, -0.15f, 0.1f, 0.02f});
  const Tensor dweights = random_tensor({N, K}, 312);
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    SCOPED_TRACE(kind == RouterScore::softmax ? "softmax" : "sigmoid");
    const Tensor b = kind == RouterScore::sigmoid ? bias : Tensor();
    const Routed base = route(logits, b, kind, K, false), renormalised = route(logits, b, kind, K);
    EXPECT_EQ(ids_of(base.experts), ids_of(renormalised.experts));
    for (int64_t n = 0; n < N; ++n)
      for (int64_t k = 0; k < K; ++k)
        EXPECT_EQ(base.weights.f32()[n * K + k], base.scores.f32()[n * E + base.experts.data<int32_t>()[n * K + k]]);
    auto loss = [&] {
      const Routed r = route(logits, b, kind, K, false);
      const RouterLosses l = moe_router_losses(r.experts, r.scores, r.lse, kind);
      return testing::dot(r.weights, dweights) + 0.7 * l.aux + 0.3 * l.z;
    };
    const std::vector<double> fd = testing::numeric_gradient(logits, loss, 1e-2f);
    Tensor dlogits = Tensor::zeros({N, E});
    moe_router_backward(dlogits, dweights, base.experts, base.weights, base.scores, base.lse, logits, kind, 0.7f, 0.3f,
                        nullptr, false);
    testing::expect_close(dlogits, fd, 2e-4, 2e-3, "dlogits");
  }
}

// DeepSeek's group limit against a plain loop: a group's score is the sum of its two best selection
// values (sigmoid, with the bias) or its best (softmax); the best `kept` groups stay and every other
// expert competes with value 0; the weights are the chosen scores as without a limit.
TEST(MoeRouter, GroupLimitedRoutingKeepsTheBestGroups) {
  const int64_t N = 40, E = 12, K = 3;
  const Tensor logits = random_tensor({N, E}, 321, -3.0f, 3.0f);
  const Tensor bias = random_tensor({E}, 322, -0.2f, 0.2f);
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    for (const RouterGroups groups : {RouterGroups{4, 2}, RouterGroups{3, 1}, RouterGroups{6, 5}}) {
      SCOPED_TRACE(::testing::Message() << (kind == RouterScore::softmax ? "softmax" : "sigmoid") << " groups "
                                        << groups.count << " keeping " << groups.kept);
      const bool sigmoid = kind == RouterScore::sigmoid;
      const Tensor b = sigmoid ? bias : Tensor();
      const Routed r = route(logits, b, kind, K, true, groups);
      const int64_t size = E / groups.count;
      for (int64_t n = 0; n < N; ++n) {
        std::vector<float> v(static_cast<size_t>(E)), score(static_cast<size_t>(groups.count));
        for (int64_t e = 0; e < E; ++e) v[size_t(e)] = r.scores.f32()[n * E + e] + (sigmoid ? b.f32()[e] : 0.0f);
        for (int64_t g = 0; g < groups.count; ++g) {
          std::vector<float> members(v.begin() + g * size, v.begin() + (g + 1) * size);
          std::sort(members.begin(), members.end(), std::greater<>());
          score[size_t(g)] = sigmoid ? members[0] + members[1] : members[0];
        }
        std::vector<int64_t> order(static_cast<size_t>(groups.count));
        std::iota(order.begin(), order.end(), 0);
        std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t c) { return score[size_t(a)] > score[size_t(c)]; });
        for (int64_t e = 0; e < E; ++e)
          if (std::find(order.begin(), order.begin() + groups.kept, e / size) == order.begin() + groups.kept)
            v[size_t(e)] = 0.0f;
        std::vector<int32_t> idx(static_cast<size_t>(E));
        std::iota(idx.begin(), idx.end(), 0);
        std::stable_sort(idx.begin(), idx.end(), [&](int32_t a, int32_t c) { return v[size_t(a)] > v[size_t(c)]; });
        for (int64_t k = 0; k < K; ++k) ASSERT_EQ(r.experts.data<int32_t>()[n * K + k], idx[size_t(k)]) << "row " << n;
      }
    }
  }
  // The zero rule: group 0 (0.9 and 0.45 - 0.5 = -0.05, sum 0.85) beats group 1 (0.4 and 0.42); expert 1
  // at -0.05 then loses the second place to expert 2 of the dropped group, at 0 (a -inf mask would give
  // it to expert 1, no limit to expert 3).
  const auto logit = [](double p) { return float(std::log(p / (1.0 - p))); };
  const Tensor hand = testing::tensor_of({1, 4}, {logit(0.9), logit(0.45), logit(0.4), logit(0.42)});
  const Tensor hand_bias = testing::tensor_of({4}, {0.0f, -0.5f, 0.0f, 0.0f});
  const Routed zero = route(hand, hand_bias, RouterScore::sigmoid, 2, true, RouterGroups{2, 1});
  EXPECT_EQ(ids_of(zero.experts), (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(ids_of(route(hand, hand_bias, RouterScore::sigmoid, 2).experts), (std::vector<int32_t>{0, 3}));
  Tensor experts = Tensor::zeros({1, 2}, DType::i32), weights = Tensor::zeros({1, 2}), scores = Tensor::zeros({1, 4});
  Tensor lse = Tensor::zeros({1});
  EXPECT_TRUE(testing::contains(testing::error_of([&] {
                                  moe_router_forward(experts, weights, scores, lse, hand, Tensor(),
                                                     RouterScore::softmax, true, RouterGroups{3, 1});
                                }),
                                "3 expert groups keeping 1 must divide the 4 experts"));
}

// Context parallelism's split: two ranks' halves of the tokens, their balance statistics summed,
// give the whole routing's aux loss, and each half's backward with the summed statistics (the same
// aux scale: the gradient of the whole's aux_scale * aux) gives the whole backward's rows.
TEST(MoeRouter, SummedBalanceOfTwoHalvesIsTheWholeRouting) {
  const int64_t N = 8, E = 4, K = 2, half = N / 2;
  const Tensor logits = random_tensor({N, E}, 311, -2.0f, 2.0f), dweights = random_tensor({N, K}, 312);
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    const Routed whole = route(logits, Tensor(), kind, K);
    const RouterLosses want = moe_router_losses(whole.experts, whole.scores, whole.lse, kind);
    Tensor want_dlogits = Tensor::zeros({N, E});
    moe_router_backward(want_dlogits, dweights, whole.experts, whole.weights, whole.scores, whole.lse, logits, kind,
                        0.5f, 0.0f);
    auto rows = [](const Tensor& t, int64_t first, int64_t count) {
      return testing::copy_of(t.view(first * t.size(1), {count, t.size(1)}));
    };
    RouterBalance parts[2], summed{std::vector<double>(size_t(E)), std::vector<double>(size_t(E)), 0.0};
    Routed halves[2];
    for (int h = 0; h < 2; ++h) {
      halves[h] = route(rows(logits, h * half, half), Tensor(), kind, K);
      moe_router_losses(halves[h].experts, halves[h].scores, halves[h].lse, kind, &parts[h]);
      EXPECT_EQ(parts[h].tokens, double(half));
      for (int64_t e = 0; e < E; ++e) {
        summed.counts[size_t(e)] += parts[h].counts[size_t(e)];
        summed.prob_sums[size_t(e)] += parts[h].prob_sums[size_t(e)];
      }
      summed.tokens += parts[h].tokens;
    }
    EXPECT_NEAR(summed.aux(), want.aux, 1e-9);
    for (int h = 0; h < 2; ++h) {
      Tensor dlogits = Tensor::zeros({half, E});
      moe_router_backward(dlogits, rows(dweights, h * half, half), halves[h].experts, halves[h].weights,
                          halves[h].scores, halves[h].lse, rows(logits, h * half, half), kind, 0.5f, 0.0f,
                          &summed);
      for (int64_t i = 0; i < half * E; ++i)
        EXPECT_NEAR(dlogits.f32()[i], want_dlogits.f32()[h * half * E + i], 1e-6) << "half " << h << " element " << i;
    }
  }
}

TEST(MoeRouter, BackwardWritesDlogits) {
  const int64_t N = 5, E = 6, K = 2;
  const Tensor logits = random_tensor({N, E}, 307, -2.0f, 2.0f), dweights = random_tensor({N, K}, 308);
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    const Routed r = route(logits, Tensor(), kind, K);
    Tensor dlogits = Tensor::zeros({N, E});
    moe_router_backward(dlogits, dweights, r.experts, r.weights, r.scores, r.lse, logits, kind, 0.1f, 0.01f);
    const Tensor first = testing::copy_of(dlogits);
    testing::fill(dlogits, testing::kNaN);  // written, never read
    moe_router_backward(dlogits, dweights, r.experts, r.weights, r.scores, r.lse, logits, kind, 0.1f, 0.01f);
    testing::expect_identical(dlogits, first, "dlogits");
  }
}

TEST(MoeRouter, OneThreadAndSeveralAgree) {
  const int64_t N = 700, E = 64, K = 6;  // above the parallel threshold
  const Tensor logits = random_tensor({N, E}, 309, -4.0f, 4.0f), bias = random_tensor({E}, 310, -0.1f, 0.1f);
  const Tensor dweights = random_tensor({N, K}, 311);
  for (const RouterScore kind : {RouterScore::softmax, RouterScore::sigmoid}) {
    const Tensor b = kind == RouterScore::sigmoid ? bias : Tensor();
    Routed r[2];
    Tensor dlogits[2];
    for (int run = 0; run < 2; run++) {
      testing::with_threads(run == 0 ? 1 : 3, [&] {
        r[run] = route(logits, b, kind, K);
        dlogits[run] = Tensor::zeros({N, E});
        moe_router_backward(dlogits[run], dweights, r[run].experts, r[run].weights, r[run].scores, r[run].lse, logits,
                            kind, 0.01f, 0.001f);
      });
    }
    EXPECT_EQ(ids_of(r[0].experts), ids_of(r[1].experts));
    testing::expect_identical(r[0].weights, r[1].weights, "weights");
    testing::expect_identical(r[0].scores, r[1].scores, "scores");
    testing::expect_identical(r[0].lse, r[1].lse, "lse");
    testing::expect_identical(dlogits[0], dlogits[1], "dlogits");
  }
}

TEST(MoeRouter, RejectsBadArguments) {
  const int64_t N = 4, E = 5, K = 2;
  const char* fwd = "moe_router_forward: ";
  Tensor logits = random_tensor({N, E}, 312), experts = Tensor::zeros({N, K}, DType::i32);
  Tensor weights = Tensor::zeros({N, K}), scores = Tensor::zeros({N, E}), lse = Tensor::zeros({N});
  Tensor too_many = Tensor::zeros({N, E + 1}, DType::i32), too_many_w = Tensor::zeros({N, E + 1});
  expect_error_with(
      [&] { moe_router_forward(too_many, too_many_w, scores, lse, logits, Tensor(), RouterScore::softmax); },
      {fwd, "K = 6", "E = 5"});
  const Tensor bias = Tensor::zeros({E}), short_bias = Tensor::zeros({E - 1});
  expect_error_with([&] { moe_router_forward(experts, weights, scores, lse, logits, bias, RouterScore::softmax); },
                    {fwd, "bias must be undefined for softmax"});
  expect_error_with(
      [&] { moe_router_forward(experts, weights, scores, lse, logits, short_bias, RouterScore::sigmoid); },
      {fwd, "bias has shape"});
  Tensor f32_experts = Tensor::zeros({N, K});
  expect_error_with(
      [&] { moe_router_forward(f32_experts, weights, scores, lse, logits, Tensor(), RouterScore::softmax); },
      {fwd, "experts must be i32"});
  const Tensor int_logits = Tensor::zeros({N, E}, DType::i32);
  expect_error_with(
      [&] { moe_router_forward(experts, weights, scores, lse, int_logits, Tensor(), RouterScore::softmax); },
      {fwd, "logits is i32", "in f32 on the CPU"});
  const Tensor bf16_logits = Tensor::zeros({N, E}, DType::bf16);
  expect_error_with(
      [&] { moe_router_forward(experts, weights, scores, lse, bf16_logits, Tensor(), RouterScore::softmax); },
      {fwd, "logits is bf16 on the CPU"});
  Tensor wrong_scores = Tensor::zeros({N, E + 1}), wrong_lse = Tensor::zeros({N + 1}),
         wrong_w = Tensor::zeros({N, K + 1});
  expect_error_with(
      [&] { moe_router_forward(experts, weights, wrong_scores, lse, logits, Tensor(), RouterScore::softmax); },
      {fwd, "scores has shape"});
  expect_error_with(
      [&] { moe_router_forward(experts, weights, scores, wrong_lse, logits, Tensor(), RouterScore::softmax); },
      {fwd, "lse has shape"});
  expect_error_with([&] { moe_router_forward(experts, wrong_w, scores, lse, logits, Tensor(), RouterScore::softmax); },
                    {fwd, "weights has shape"});
  Tensor vector_logits = Tensor::zeros({N});
  expect_error_with(
      [&] { moe_router_forward(experts, weights, scores, lse, vector_logits, Tensor(), RouterScore::softmax); },
      {fwd, "logits must be (N,E)"});

  const Tensor bad_ids = experts_of(N, K, {0, 1, 2, 5, 3, 4, 0, 1});
  expect_error_with([&] { moe_router_losses(bad_ids, scores, lse, RouterScore::softmax); },
                    {"moe_router_losses: experts[1,1] = 5 is outside [0, E = 5)"});
  expect_error_with([&] { moe_router_losses(experts, scores, wrong_lse, RouterScore::softmax); },
                    {"moe_router_losses: lse has shape"});
  Tensor dlogits = Tensor::zeros({N, E}), dweights = Tensor::zeros({N, K});
  expect_error_with(
      [&] {
        moe_router_backward(dlogits, dweights, bad_ids, weights, scores, lse, logits, RouterScore::softmax, 0, 0);
      },
      {"moe_router_backward: experts[1,1] = 5"});
  Tensor wrong_dlogits = Tensor::zeros({N, E - 1}), wrong_dweights = Tensor::zeros({N, K + 1});
  expect_error_with(
      [&] {
        moe_router_backward(wrong_dlogits, dweights, experts, weights, scores, lse, logits, RouterScore::softmax, 0, 0);
      },
      {"moe_router_backward: dlogits has shape"});
  expect_error_with(
      [&] {
        moe_router_backward(dlogits, wrong_dweights, experts, weights, scores, lse, logits, RouterScore::softmax, 0, 0);
      },
      {"moe_router_backward: dweights has shape"});
}

}  // namespace
}  // namespace tessera
