// Multiple-choice evaluation (HellaSwag and the like): every choice of an example is scored by the
// model's loss on the choice's tokens after the context, and the example counts as right when the
// right choice scores best. Two scores, as the peers report them: the summed loss (lm-evaluation-
// harness's acc) and the mean loss per token (llm.c's acc_norm, the figure its GPT-2 runs quote).
// choice_losses() scores with one whole model (tessera eval); a training run deals the same rows
// over its ranks (Trainer::evaluate_choices) and sums their losses the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "data/choice_examples.h"
#include "nn/decoder.h"

namespace tessera {

// One choice's score: the summed loss of its tokens given the context, and how many there are.
struct ChoiceLoss {
  double sum = 0;
  int64_t tokens = 0;
  double mean() const { return sum / double(tokens); }
};

struct ChoiceAccuracy {
  int64_t examples = 0;
  int64_t correct = 0;         // the right choice had the lowest summed loss
  int64_t correct_norm = 0;    // the right choice had the lowest mean loss per token
  double right_loss_sum = 0;   // the right choices' mean losses per token, summed over the examples
  double chance_sum = 0;       // 1 / choices, summed over the examples
  double accuracy() const { return examples > 0 ? double(correct) / double(examples) : 0.0; }
  double accuracy_norm() const { return examples > 0 ? double(correct_norm) / double(examples) : 0.0; }
  // The right choices' mean loss per token, over the examples: a smooth figure beside the counts.
  double right_loss() const { return examples > 0 ? right_loss_sum / double(examples) : 0.0; }
  // The accuracy of a guess (0.25 for HellaSwag's four endings).
  double chance() const { return examples > 0 ? chance_sum / double(examples) : 0.0; }
};

// A choice after its context, cut to `window` inputs from the context's start: inputs are
// tokens[0, n-1), targets tokens[1, n) from input position first_target on (ignored before).
struct ChoiceRow {
  std::vector<int32_t> tokens;
  int64_t first_target = 0;
  int64_t inputs() const { return int64_t(tokens.size()) - 1; }
};

// Every choice of every example as a row, example by example. A choice longer than the window
// throws, naming its line and the --seq-len that holds it.
std::vector<ChoiceRow> choice_rows(std::span<const ChoiceExample> examples, int64_t window);

// Row `row` into a batch of width T >= row.inputs(): its inputs then zeros, its targets on its
// choice's tokens and ignored elsewhere (so a row's token losses sum to the choice's loss).
void fill_choice_row(const ChoiceRow& row, int64_t T, int32_t* inputs, int32_t* targets);

// The rows' summed losses (choice_rows' order) regrouped by example then choice.
std::vector<std::vector<ChoiceLoss>> losses_by_choice(std::span<const ChoiceExample> examples,
                                                      std::span<const double> row_losses);

// The losses of every choice of every example with one whole model. A forward takes whole
// examples, at least `batch_rows` rows, as wide as the longest of them; examples go in order of
// their longest row, so that little of a forward is padding. `progress` (if given) hears how many
// examples are scored after each forward.
std::vector<std::vector<ChoiceLoss>> choice_losses(Decoder& model, std::span<const ChoiceExample> examples,
                                                   int64_t batch_rows, int64_t window,
                                                   const std::function<void(int64_t scored)>& progress = {});

// Counts the examples whose right choice scores lowest; a tie goes to the earlier choice.
ChoiceAccuracy choice_accuracy(std::span<const ChoiceExample> examples,
                               const std::vector<std::vector<ChoiceLoss>>& losses);

}  // namespace tessera
