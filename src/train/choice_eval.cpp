// Scores multiple-choice examples with the fused classifier's per-token losses: one row per choice,
// targets only on the choice's tokens, so a row's losses sum to its choice's.
#include "train/choice_eval.h"

#include <algorithm>
#include <numeric>

#include "core/cuda/device.h"
#include "core/error.h"
#include "core/ignored_target.h"

namespace tessera {

std::vector<ChoiceRow> choice_rows(std::span<const ChoiceExample> examples, int64_t window) {
  TS_CHECK(window > 0, "choice_rows: the window must be positive, got ", window);
  std::vector<ChoiceRow> rows;
  for (const ChoiceExample& example : examples)
    for (size_t c = 0; c < example.choices.size(); ++c) {
      const std::vector<int32_t>& tokens = example.choices[c];
      TS_CHECK(int64_t(tokens.size()) <= window, "multiple-choice example on line ", example.line, ": choice ", c,
               " has ", tokens.size(), " tokens, more than the window of ", window, "; give --seq-len ",
               tokens.size(), " or more (at most the model's context)");
      const int64_t length = int64_t(example.context.size() + tokens.size());
      const int64_t dropped = std::max<int64_t>(0, length - 1 - window);
      ChoiceRow& row = rows.emplace_back();
      row.tokens.assign(example.context.begin() + dropped, example.context.end());
      row.first_target = int64_t(row.tokens.size()) - 1;
      row.tokens.insert(row.tokens.end(), tokens.begin(), tokens.end());
    }
  return rows;
}

void fill_choice_row(const ChoiceRow& row, int64_t T, int32_t* inputs, int32_t* targets) {
  TS_CHECK(row.inputs() <= T, "fill_choice_row: a row of ", row.inputs(), " inputs in a batch ", T, " wide");
  std::fill(inputs, inputs + T, 0);
  std::fill(targets, targets + T, kIgnoredTarget);
  std::copy(row.tokens.begin(), row.tokens.end() - 1, inputs);
  for (int64_t p = row.first_target; p < row.inputs(); ++p) targets[p] = row.tokens[size_t(p) + 1];
}

std::vector<std::vector<ChoiceLoss>> losses_by_choice(std::span<const ChoiceExample> examples,
                                                      std::span<const double> row_losses) {
  std::vector<std::vector<ChoiceLoss>> losses(examples.size());
  size_t row = 0;
  for (size_t e = 0; e < examples.size(); ++e)
    for (const std::vector<int32_t>& choice : examples[e].choices) {
      TS_CHECK(row < row_losses.size(), "losses_by_choice: ", row_losses.size(), " row losses for more rows");
      losses[e].push_back({row_losses[row++], int64_t(choice.size())});
    }
  TS_CHECK(row == row_losses.size(), "losses_by_choice: ", row_losses.size(), " row losses for ", row, " rows");
  return losses;
}

std::vector<std::vector<ChoiceLoss>> choice_losses(Decoder& model, std::span<const ChoiceExample> examples,
                                                   int64_t batch_rows, int64_t window,
                                                   const std::function<void(int64_t scored)>& progress) {
  TS_CHECK(batch_rows > 0, "choice_losses: batch_rows must be positive, got ", batch_rows);
  const std::vector<ChoiceRow> rows = choice_rows(examples, window);
  // Each example's first row and widest row; examples go through in order of their widest row, so
  // that a forward's rows are of about one width (less padding), their losses kept in file order.
  std::vector<size_t> first_row(examples.size() + 1, 0);
  std::vector<int64_t> width(examples.size(), 0);
  for (size_t e = 0; e < examples.size(); ++e) {
    first_row[e + 1] = first_row[e] + examples[e].choices.size();
    for (size_t r = first_row[e]; r < first_row[e + 1]; ++r) width[e] = std::max(width[e], rows[r].inputs());
  }
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t(0));
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return width[a] < width[b]; });
  std::vector<double> row_losses(rows.size());
  for (size_t first = 0; first < order.size();) {
    std::vector<size_t> batch;  // rows, by index into `rows`
    int64_t T = 0;
    size_t end = first;
    for (; end < order.size() && int64_t(batch.size()) < batch_rows; ++end) {
      for (size_t r = first_row[order[end]]; r < first_row[order[end] + 1]; ++r) batch.push_back(r);
      T = std::max(T, width[order[end]]);
    }
    const int64_t B = int64_t(batch.size());
    Tensor inputs = Tensor::zeros({B, T}, DType::i32);
    Tensor targets = Tensor::zeros({B, T}, DType::i32);
    for (int64_t b = 0; b < B; ++b)
      fill_choice_row(rows[batch[size_t(b)]], T, inputs.data<int32_t>() + b * T, targets.data<int32_t>() + b * T);
    model.forward(inputs, targets);
    const Tensor losses = tensor_to(model.losses(), Device::cpu);
    for (int64_t b = 0; b < B; ++b) {
      const float* l = losses.data<float>() + b * T;
      row_losses[batch[size_t(b)]] = std::accumulate(l, l + T, 0.0);
    }
    first = end;
    if (progress) progress(int64_t(first));
  }
  return losses_by_choice(examples, row_losses);
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
    accuracy.right_loss_sum += choice[size_t(examples[e].label)].mean();
    accuracy.chance_sum += 1.0 / double(choice.size());
  }
  return accuracy;
}

}  // namespace tessera
