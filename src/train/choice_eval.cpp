// Scores multiple-choice examples with the fused classifier's per-token losses: one row per choice,
// targets only on the choice's tokens, padding after a row's end ignored.
#include "train/choice_eval.h"

#include <algorithm>

#include "core/cuda/device.h"
#include "core/error.h"
#include "core/ignored_target.h"

namespace tessera {
namespace {

// One row: a choice after its context, cut to the window from the left. `first_target` is the
// input position that predicts the choice's first token.
struct ChoiceRow {
  std::vector<int32_t> tokens;  // inputs then the last target: length = inputs + 1
  int64_t first_target = 0;
};

ChoiceRow row_of(const ChoiceExample& example, size_t choice, int64_t window) {
  const std::vector<int32_t>& tokens = example.choices[choice];
  TS_CHECK(int64_t(tokens.size()) <= window, "multiple-choice example on line ", example.line, ": choice ", choice,
           " has ", tokens.size(), " tokens, more than the window of ", window, "; give --seq-len ", tokens.size(),
           " or more (at most the model's context)");
  const int64_t length = int64_t(example.context.size() + tokens.size());
  const int64_t dropped = std::max<int64_t>(0, length - 1 - window);
  ChoiceRow row;
  row.tokens.assign(example.context.begin() + dropped, example.context.end());
  row.first_target = int64_t(row.tokens.size()) - 1;
  row.tokens.insert(row.tokens.end(), tokens.begin(), tokens.end());
  return row;
}

}  // namespace

std::vector<std::vector<ChoiceLoss>> choice_losses(Decoder& model, std::span<const ChoiceExample> examples,
                                                   int64_t batch_rows, int64_t window,
                                                   const std::function<void(int64_t scored)>& progress) {
  TS_CHECK(batch_rows > 0 && window > 0, "choice_losses: batch_rows and window must be positive");
  std::vector<std::vector<ChoiceLoss>> losses(examples.size());
  for (size_t first = 0; first < examples.size();) {
    std::vector<ChoiceRow> rows;
    size_t end = first;
    while (end < examples.size() && int64_t(rows.size()) < batch_rows) {
      for (size_t c = 0; c < examples[end].choices.size(); ++c) rows.push_back(row_of(examples[end], c, window));
      ++end;
    }
    int64_t T = 0;
    for (const ChoiceRow& row : rows) T = std::max<int64_t>(T, int64_t(row.tokens.size()) - 1);
    const int64_t B = int64_t(rows.size());
    Tensor inputs = Tensor::zeros({B, T}, DType::i32);
    Tensor targets = Tensor::zeros({B, T}, DType::i32);
    for (int64_t b = 0; b < B; ++b) {
      const std::vector<int32_t>& tokens = rows[size_t(b)].tokens;
      int32_t* in = inputs.data<int32_t>() + b * T;
      int32_t* target = targets.data<int32_t>() + b * T;
      std::fill(target, target + T, kIgnoredTarget);
      std::copy(tokens.begin(), tokens.end() - 1, in);
      for (size_t p = size_t(rows[size_t(b)].first_target); p + 1 < tokens.size(); ++p) target[p] = tokens[p + 1];
    }
    model.forward(inputs, targets);
    const Tensor row_losses = tensor_to(model.losses(), Device::cpu);
    size_t row = 0;
    for (size_t e = first; e < end; ++e) {
      for (size_t c = 0; c < examples[e].choices.size(); ++c, ++row) {
        ChoiceLoss loss;
        const float* l = row_losses.data<float>() + int64_t(row) * T;
        for (int64_t p = rows[row].first_target; p + 1 < int64_t(rows[row].tokens.size()); ++p) loss.sum += l[p];
        loss.tokens = int64_t(examples[e].choices[c].size());
        losses[e].push_back(loss);
      }
    }
    first = end;
    if (progress) progress(int64_t(first));
  }
  return losses;
}

ChoiceAccuracy choice_accuracy(std::span<const ChoiceExample> examples,
                               const std::vector<std::vector<ChoiceLoss>>& losses) {
  TS_CHECK(losses.size() == examples.size(), "choice_accuracy: ", losses.size(), " scores for ", examples.size(),
           " examples");
  ChoiceAccuracy accuracy;
  for (size_t e = 0; e < examples.size(); ++e) {
    const std::vector<ChoiceLoss>& choice = losses[e];
    size_t best = 0, best_norm = 0;
    for (size_t c = 1; c < choice.size(); ++c) {
      if (choice[c].sum < choice[best].sum) best = c;
      if (choice[c].mean() < choice[best_norm].mean()) best_norm = c;
    }
    ++accuracy.examples;
    accuracy.correct += int64_t(best) == examples[e].label;
    accuracy.correct_norm += int64_t(best_norm) == examples[e].label;
  }
  return accuracy;
}

}  // namespace tessera
