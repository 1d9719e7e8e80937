// Trainer::evaluate_choices: --choices scored under the run's layout. Each rank fills its micro-batch
// buffers with whole rows (a row's inputs, then padding with ignored targets), the feed gives each
// cp rank its share, and a row's token losses, summed over dp×cp, are its choice's loss.
#include <algorithm>
#include <numeric>

#include "core/cuda/device.h"
#include "core/ignored_target.h"
#include "train/trainer.h"

namespace tessera {

ChoiceAccuracy Trainer::evaluate_choices() {
  const int64_t rows = int64_t(choice_rows_.size()), T = config_.seq_len;
  const EvalShare share = eval_share((rows + micro_batch_ - 1) / micro_batch_);
  std::vector<double> row_losses(size_t(rows), 0.0);
  for (int64_t m = 0; m < share.runs; ++m) {
    const int64_t first_row = share.index(m) * micro_batch_;
    int32_t* inputs = feed_->inputs().data<int32_t>();
    int32_t* targets = feed_->targets().data<int32_t>();
    for (int64_t b = 0; b < micro_batch_; ++b) {
      if (first_row + b < rows) {
        fill_choice_row(choice_rows_[size_t(first_row + b)], T, inputs + b * T, targets + b * T);
      } else {
        std::fill(inputs + b * T, inputs + (b + 1) * T, 0);
        std::fill(targets + b * T, targets + (b + 1) * T, kIgnoredTarget);
      }
    }
    feed_->forward(*model_, 0.0f);
    if (m >= share.mine) continue;
    const Tensor losses = tensor_to(model_->losses(), Device::cpu);  // (micro-batch, this cp rank's positions)
    const int64_t width = losses.size(1);
    for (int64_t b = 0; b < micro_batch_ && first_row + b < rows; ++b) {
      const float* row = losses.data<float>() + b * width;
      row_losses[size_t(first_row + b)] = std::accumulate(row, row + width, 0.0);
    }
  }
  const std::vector<double> summed = data_parallel_->sum(row_losses);
  return choice_accuracy(choice_examples_, losses_by_choice(choice_examples_, summed));
}

}  // namespace tessera
