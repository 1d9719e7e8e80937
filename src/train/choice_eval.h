// Multiple-choice evaluation (HellaSwag and the like): every choice of an example is scored by the
// model's loss on the choice's tokens after the context, and the example counts as right when the
// right choice scores best. Two scores, as the peers report them: the summed loss (lm-evaluation-
// harness's acc) and the mean loss per token (llm.c's acc_norm, the figure its GPT-2 runs quote).
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
  int64_t correct = 0;       // the right choice had the lowest summed loss
  int64_t correct_norm = 0;  // the right choice had the lowest mean loss per token
  double accuracy() const { return examples > 0 ? double(correct) / double(examples) : 0.0; }
  double accuracy_norm() const { return examples > 0 ? double(correct_norm) / double(examples) : 0.0; }
};

// The losses of every choice of every example, by example then choice. Each choice is one row of
// its context and its own tokens; a forward takes whole examples, at least `batch_rows` rows, as
// wide as the longest of them. A row longer than `window` tokens loses the start of its context
// (a choice longer than the window throws, naming its line and the window). `progress` (if given)
// hears the examples scored so far after each forward.
std::vector<std::vector<ChoiceLoss>> choice_losses(Decoder& model, std::span<const ChoiceExample> examples,
                                                   int64_t batch_rows, int64_t window,
                                                   const std::function<void(int64_t scored)>& progress = {});

// Counts the examples whose right choice scores lowest; a tie goes to the earlier choice.
ChoiceAccuracy choice_accuracy(std::span<const ChoiceExample> examples,
                               const std::vector<std::vector<ChoiceLoss>>& losses);

}  // namespace tessera
