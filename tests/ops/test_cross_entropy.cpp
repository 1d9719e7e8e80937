// Fused softmax + cross-entropy: losses against a double reference, the in-place gradient by finite
// differences, padded vocabulary, huge logits, dloss == 0 leaving logits alone, ignored targets,
// bad input; the vocabulary-parallel parts against the whole op, with ignored targets too; Gemma 2's
// soft-capped logits (logit_softcap) and the gradient carried back to the raw logits, whole and sharded.
#include <gtest/gtest.h>

#include <cmath>

#include "core/ignored_target.h"
#include "ops/cross_entropy.h"
#include "ops/cross_entropy_shard.h"
#include "ops/logit_softcap.h"
#include "ops/op_testing.h"

namespace tessera {
namespace {

struct CrossEntropyCase {
  int64_t N = 6, V = 37, Vp = 48;
  Tensor logits = testing::random_tensor({N, Vp}, 101, -4.0f, 4.0f);
  Tensor targets = Tensor::zeros({N}, DType::i32);
  Tensor losses = Tensor::zeros({N});
  CrossEntropyCase() {
    const int32_t ids[] = {0, 36, 5, 5, 17, 30};
    std::copy(std::begin(ids), std::end(ids), targets.data<int32_t>());
    for (int64_t n = 0; n < N; n++)  // padding holds large values that must not count
      for (int64_t v = V; v < Vp; v++) logits.f32()[n * Vp + v] = 50.0f;
  }
  // -log softmax(logits[n, :V])[target] in double.
  std::vector<double> reference_losses() const {
    std::vector<double> ref;
    for (int64_t n = 0; n < N; n++) {
      const float* x = logits.f32() + n * Vp;
      double max_x = x[0], sum = 0.0;
      for (int64_t v = 0; v < V; v++) max_x = std::max(max_x, double(x[v]));
      for (int64_t v = 0; v < V; v++) sum += std::exp(double(x[v]) - max_x);
      ref.push_back(std::log(sum) + max_x - x[targets.data<int32_t>()[n]]);
    }
    return ref;
  }
};

TEST(CrossEntropy, LossesMatchDoubleReferenceAndLeaveLogitsAlone) {
  CrossEntropyCase e;
  const Tensor before = testing::copy_of(e.logits);
  softmax_cross_entropy(e.losses, e.logits, e.targets, e.V, 0.0f);
  testing::expect_close(e.losses, e.reference_losses(), 1e-5, 1e-5, "losses");
  for (int64_t i = 0; i < e.logits.numel(); i++) ASSERT_EQ(e.logits.f32()[i], before.f32()[i]) << i;
}

TEST(CrossEntropy, GradientMatchesFiniteDifferencesAndPaddingIsZero) {
  CrossEntropyCase e;
  const float dloss = 0.25f;
  auto loss = [&] {
    softmax_cross_entropy(e.losses, e.logits, e.targets, e.V, 0.0f);
    double total = 0.0;
    for (int64_t n = 0; n < e.N; n++) total += dloss * double(e.losses.f32()[n]);
    return total;
  };
  const std::vector<double> grad_fd = testing::numeric_gradient(e.logits, loss, 1e-2f);
  const std::vector<double> losses = e.reference_losses();
  softmax_cross_entropy(e.losses, e.logits, e.targets, e.V, dloss);
  testing::expect_close(e.losses, losses, 1e-5, 1e-5, "losses with gradient");
  testing::expect_close(e.logits, grad_fd, 2e-4, 2e-3, "dlogits");
  for (int64_t n = 0; n < e.N; n++) {
    double row_sum = 0.0;
    for (int64_t v = 0; v < e.Vp; v++) {
      const float g = e.logits.f32()[n * e.Vp + v];
      if (v >= e.V) {
        EXPECT_EQ(g, 0.0f) << "padding column " << v << " of row " << n;
      }
      // probability = g / dloss + onehot: padding has none, the rest is a distribution
      const double p = g / dloss + (v == e.targets.data<int32_t>()[n] ? 1.0 : 0.0);
      EXPECT_GE(p, 0.0);
      row_sum += p;
    }
    EXPECT_NEAR(row_sum, 1.0, 1e-5) << "row " << n;
  }
}

// logit_softcap caps every entry at cap tanh(x / cap); the cross-entropy of the capped logits, given the
// cap, writes the gradient of its loss with respect to the raw logits (finite differences through the cap).
TEST(CrossEntropy, SoftCappedLogitsGiveTheRawLogitsGradient) {
  CrossEntropyCase e;
  const float cap = 2.5f, dloss = 0.25f;  // the draws reach 4, well into the bend
  const Tensor raw = testing::copy_of(e.logits);
  logit_softcap(e.logits, cap);
  std::vector<double> want;
  for (int64_t i = 0; i < raw.numel(); i++) want.push_back(cap * std::tanh(double(raw.f32()[i]) / cap));
  testing::expect_close(e.logits, want, 1e-6, 1e-6, "capped logits");
  const std::vector<double> losses = e.reference_losses();  // of the capped logits
  Tensor x = testing::copy_of(raw);
  auto loss = [&] {
    Tensor capped = testing::copy_of(x);
    logit_softcap(capped, cap);
    softmax_cross_entropy(e.losses, capped, e.targets, e.V, 0.0f, cap);
    double total = 0.0;
    for (int64_t n = 0; n < e.N; n++) total += dloss * double(e.losses.f32()[n]);
    return total;
  };
  const std::vector<double> grad_fd = testing::numeric_gradient(x, loss, 1e-2f);
  softmax_cross_entropy(e.losses, e.logits, e.targets, e.V, dloss, cap);
  testing::expect_close(e.losses, losses, 1e-5, 1e-5, "losses");
  testing::expect_close(e.logits, grad_fd, 2e-4, 2e-3, "dlogits through the cap");
  for (int64_t n = 0; n < e.N; n++)
    for (int64_t v = e.V; v < e.Vp; v++) EXPECT_EQ(e.logits.f32()[n * e.Vp + v], 0.0f) << n << " " << v;
  for (float bad : {-1.0f, testing::kNaN}) {
    const std::string message = testing::error_of([&] { logit_softcap(x, bad); });
    EXPECT_NE(message.find("logit_softcap: softcap is"), std::string::npos) << message;
  }
  EXPECT_THROW(logit_softcap(x, 0.0f), Error);
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  const int64_t N = 3, V = 5, Vp = 8;
  Tensor logits = testing::tensor_of({N, Vp}, {1000, -1000, 0, 999, -1000, 0, 0, 0,        //
                                               -1000, -1000, -1000, -1000, -1000, 0, 0, 0,  //
                                               -1000, 1000, 1000, -1000, 0, 0, 0, 0});
  Tensor targets = Tensor::zeros({N}, DType::i32), losses = Tensor::zeros({N});
  targets.data<int32_t>()[0] = 1;  // a target 2000 below the max
  targets.data<int32_t>()[1] = 4;
  targets.data<int32_t>()[2] = 2;
  softmax_cross_entropy(losses, logits, targets, V, 1.0f);
  EXPECT_NEAR(losses.f32()[0], 2000.0 + std::log1p(std::exp(-1.0)), 1e-2);
  EXPECT_NEAR(losses.f32()[1], std::log(5.0), 1e-5);
  EXPECT_NEAR(losses.f32()[2], std::log(2.0), 1e-5);
  for (int64_t i = 0; i < logits.numel(); i++) EXPECT_TRUE(std::isfinite(logits.f32()[i])) << i;
  EXPECT_NEAR(logits.f32()[1], -1.0f, 1e-6);       // target with probability ~0
  EXPECT_NEAR(logits.f32()[Vp + 4], -0.8f, 1e-6);  // uniform row: 0.2 - 1
  EXPECT_NEAR(logits.f32()[2 * Vp + 2], -0.5f, 1e-6);
}

TEST(CrossEntropy, OneThreadAndSeveralAgree) {
  const int64_t N = 64, V = 1000, Vp = 1024;  // above the parallel threshold
  const Tensor logits = testing::random_tensor({N, Vp}, 105, -5.0f, 5.0f);
  Tensor targets = Tensor::zeros({N}, DType::i32);
  for (int64_t n = 0; n < N; n++) targets.data<int32_t>()[n] = int32_t((n * 37) % V);
  Tensor grads[2], losses[2];
  for (int run = 0; run < 2; run++) {
    grads[run] = testing::copy_of(logits);
    losses[run] = Tensor::zeros({N});
    testing::with_threads(run == 0 ? 1 : 3,
                          [&] { softmax_cross_entropy(losses[run], grads[run], targets, V, 1.0f / float(N)); });
  }
  testing::expect_identical(losses[0], losses[1], "losses");
  testing::expect_identical(grads[0], grads[1], "dlogits");
}

// Rows whose target is kIgnoredTarget (loss masks) have loss 0 and a gradient row of zeros, padding
// too, whatever their logits hold (inf, NaN); the other rows are what they are without them, bit for bit.
TEST(CrossEntropy, IgnoredTargetsHaveNoLossAndNoGradient) {
  CrossEntropyCase e;
  e.logits.f32()[1 * e.Vp + 3] = INFINITY;
  e.logits.f32()[4 * e.Vp + 20] = testing::kNaN;
  const float dloss = 0.25f;
  Tensor all_grad = testing::copy_of(e.logits), all_losses = Tensor::zeros({e.N});
  softmax_cross_entropy(all_losses, all_grad, e.targets, e.V, dloss);
  for (int64_t n : {1, 4}) e.targets.data<int32_t>()[n] = kIgnoredTarget;
  for (float d : {0.0f, dloss}) {
    Tensor grad = testing::copy_of(e.logits);
    softmax_cross_entropy(e.losses, grad, e.targets, e.V, d);
    for (int64_t n = 0; n < e.N; n++) {
      const bool ignored = n == 1 || n == 4;
      EXPECT_EQ(e.losses.f32()[n], ignored ? 0.0f : all_losses.f32()[n]) << "row " << n;
      if (d == 0.0f) continue;
      for (int64_t v = 0; v < e.Vp; v++)
        ASSERT_EQ(grad.f32()[n * e.Vp + v], ignored ? 0.0f : all_grad.f32()[n * e.Vp + v]) << n << ", " << v;
    }
  }
  e.targets.data<int32_t>()[2] = -2;  // only -1 means "ignored"
  const std::string message = testing::error_of([&] { softmax_cross_entropy(e.losses, e.logits, e.targets, e.V, 1.0f); });
  EXPECT_NE(message.find("target -2 of row 2 is outside the vocabulary [0, 37) and is not -1"), std::string::npos)
      << message;
}

TEST(CrossEntropy, RejectsBadInput) {
  CrossEntropyCase e;
  EXPECT_THROW(softmax_cross_entropy(e.losses, e.logits, e.targets, e.Vp + 1, 1.0f), Error);
  Tensor short_losses = Tensor::zeros({e.N - 1});
  EXPECT_THROW(softmax_cross_entropy(short_losses, e.logits, e.targets, e.V, 1.0f), Error);
  Tensor float_targets = Tensor::zeros({e.N});
  EXPECT_THROW(softmax_cross_entropy(e.losses, e.logits, float_targets, e.V, 1.0f), Error);
  e.targets.data<int32_t>()[2] = int32_t(e.V);  // a padding column is never a target
  EXPECT_THROW(softmax_cross_entropy(e.losses, e.logits, e.targets, e.V, 1.0f), Error);
  Tensor flat = Tensor::zeros({e.N * e.Vp});
  EXPECT_THROW(softmax_cross_entropy(e.losses, flat, e.targets, e.V, 1.0f), Error);
}

// The logits cut into column shards (tensor parallelism: 2, 3 and 4 shards, uneven ones, ones
// holding only padding, the target 36 = V - 1 in the last shard with real columns): the shards'
// statistics reduced as the ranks would reduce them give every row's loss on every shard, and the
// shards' gradients side by side are the whole op's gradient; with and without ignored targets, whose
// rows hold a NaN: target logit 0, then loss 0 and gradient 0 whatever their (NaN) statistics. Soft-capped
// logits too, the cap's derivative taken on each shard.
TEST(CrossEntropyShard, ShardsReducedGiveTheWholeLossAndGradient) {
  for (const std::vector<int64_t>& cuts : {std::vector<int64_t>{0, 24, 48}, {0, 10, 20, 37, 48}, {0, 36, 37, 48},
                                           {0, 16, 32, 40, 48}})
  for (bool ignore : {false, true})
  for (float cap : {0.0f, 2.5f}) {
    CrossEntropyCase e;
    const std::vector<int64_t> ignored_rows = ignore ? std::vector<int64_t>{0, 4} : std::vector<int64_t>{};
    for (int64_t n : ignored_rows) {
      e.targets.data<int32_t>()[n] = kIgnoredTarget;
      e.logits.f32()[n * e.Vp + 35] = testing::kNaN;
    }
    if (cap > 0.0f) logit_softcap(e.logits, cap);
    const float dloss = 0.25f;
    Tensor whole = testing::copy_of(e.logits);
    softmax_cross_entropy(e.losses, whole, e.targets, e.V, dloss, cap);
    const size_t K = cuts.size() - 1;
    std::vector<Tensor> shards, max(K), sum(K), target(K);
    for (size_t k = 0; k < K; k++) {
      const int64_t first = cuts[k], cols = cuts[k + 1] - first;
      Tensor shard = Tensor::zeros({e.N, cols});
      for (int64_t n = 0; n < e.N; n++)
        std::copy_n(e.logits.f32() + n * e.Vp + first, cols, shard.f32() + n * cols);
      max[k] = Tensor::zeros({e.N}), sum[k] = Tensor::zeros({e.N}), target[k] = Tensor::zeros({e.N});
      cross_entropy_shard_stats(max[k], sum[k], target[k], shard, e.targets, first, e.V);
      for (int64_t n : ignored_rows) EXPECT_EQ(target[k].f32()[n], 0.0f) << "ignored row " << n << ", shard " << k;
      shards.push_back(shard);
    }
    // The ranks' reductions: max, then each sum rescaled to it, then sums.
    Tensor global_max = Tensor::zeros({e.N}), global_sum = Tensor::zeros({e.N}), global_target = Tensor::zeros({e.N});
    for (int64_t n = 0; n < e.N; n++) {
      global_max.f32()[n] = -INFINITY;
      for (size_t k = 0; k < K; k++) global_max.f32()[n] = std::max(global_max.f32()[n], max[k].f32()[n]);
    }
    for (size_t k = 0; k < K; k++) {
      cross_entropy_shard_rescale(sum[k], max[k], global_max);
      for (int64_t n = 0; n < e.N; n++) {
        global_sum.f32()[n] += sum[k].f32()[n];
        global_target.f32()[n] += target[k].f32()[n];
      }
    }
    for (size_t k = 0; k < K; k++) {
      const int64_t first = cuts[k], cols = cuts[k + 1] - first;
      Tensor losses = Tensor::zeros({e.N});
      cross_entropy_shard_finish(losses, shards[k], e.targets, global_max, global_sum, global_target, first, e.V,
                                 dloss, cap);
      testing::expect_close(losses.f32(), std::vector<double>(e.losses.f32(), e.losses.f32() + e.N), 1e-6, 1e-6,
                            "losses");
      std::vector<double> want;
      for (int64_t n = 0; n < e.N; n++)
        for (int64_t c = 0; c < cols; c++) want.push_back(whole.f32()[n * e.Vp + first + c]);
      testing::expect_close(shards[k].f32(), want, 1e-7, 1e-6, "gradient shard");
    }
  }
}

// Bad arguments of each part are refused with a message naming the argument.
TEST(CrossEntropyShard, RejectsBadInput) {
  CrossEntropyCase e;
  Tensor max = Tensor::zeros({e.N}), sum = Tensor::zeros({e.N}), target = Tensor::zeros({e.N});
  Tensor shard = Tensor::zeros({e.N, 24}), short_stat = Tensor::zeros({e.N - 1});
  auto stats_error = [&](Tensor& m, const Tensor& logits, const Tensor& targets, int64_t first, int64_t V) {
    return testing::error_of([&] { cross_entropy_shard_stats(m, sum, target, logits, targets, first, V); });
  };
  auto finish_error = [&](Tensor& logits, const Tensor& s, int64_t first) {
    return testing::error_of(
        [&] { cross_entropy_shard_finish(e.losses, logits, e.targets, max, s, target, first, e.V, 1.0f); });
  };
  auto expect_has = [](const std::string& message, const std::string& part) {
    EXPECT_NE(message.find(part), std::string::npos) << message;
  };
  expect_has(stats_error(short_stat, shard, e.targets, 24, e.V), "cross_entropy_shard_stats: max has shape");
  expect_has(stats_error(max, Tensor::zeros({e.N * 24}), e.targets, 24, e.V), "logits_shard must be (N,Vs)");
  expect_has(stats_error(max, shard, Tensor::zeros({e.N}), 24, e.V), "targets must be i32");
  expect_has(stats_error(max, shard, e.targets, -1, e.V), "first_col -1 and vocab_size 37");
  expect_has(stats_error(max, shard, e.targets, 24, 0), "first_col 24 and vocab_size 0");
  expect_has(finish_error(shard, short_stat, 24), "cross_entropy_shard_finish: sum_exp has shape");
  Tensor half = Tensor::zeros({e.N, 24}, DType::bf16);
  expect_has(finish_error(half, sum, 24), "logits_shard is bf16 on the CPU");
  expect_has(testing::error_of([&] { cross_entropy_shard_rescale(sum, max, short_stat); }),
             "cross_entropy_shard_rescale: global_max has shape");
  e.targets.data<int32_t>()[3] = int32_t(e.V);  // a padding column is never a target
  expect_has(stats_error(max, shard, e.targets, 24, e.V), "target 37 of row 3 is outside the vocabulary [0, 37)");
  expect_has(finish_error(shard, sum, 24), "target 37 of row 3 is outside the vocabulary [0, 37)");
  e.targets.data<int32_t>()[3] = -2;  // only kIgnoredTarget (-1) lies outside the vocabulary
  expect_has(stats_error(max, shard, e.targets, 24, e.V), "target -2 of row 3 is outside the vocabulary [0, 37)");
  expect_has(finish_error(shard, sum, 24), "target -2 of row 3 is outside the vocabulary [0, 37) and is not -1");
}

}  // namespace
}  // namespace tessera
