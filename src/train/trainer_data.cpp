// The trainer's data position: which sequences of --train-data a step reads, counted over the run
// (Megatron's consumed_samples), and where a resumed run continues, also under another --batch-size.
#include <algorithm>
#include <functional>

#include "core/user_text.h"
#include "data/data_mixture.h"
#include "train/trainer.h"
#include "train/trainer_resume.h"

namespace tessera {

void Trainer::resume_data(const CheckpointState& state) {
  // A single source's epoch length in sequences under batch size B (its dataset's windows, cut to
  // whole batches); a mixture draws by the sequence index alone.
  const auto epoch_sequences = [&](int64_t batch_size) -> int64_t {
    if (train_data_->sources().size() > 1) return 0;
    if (batch_size == config_.batch_size) return epoch_batches_ * batch_size;
    const TokenDataset data = TokenDataset::open(config_.train_data, model_->config().vocab_size, "--train-data");
    return (data.num_tokens() - 1) / config_.seq_len / batch_size * batch_size;
  };
  const DataResume data = resume_data_position(config_, state, epoch_sequences);
  next_sequence_ = data.consumed;
  data_origin_ = data.origin;
  add_start_notice(data.notice);
  // Another data mix at a resume (annealing on other data) is allowed; the run says so.
  const std::string saved_data = state.run_config.value("train-data", std::string());
  if (!saved_data.empty() && !same_data_sources(saved_data, config_.train_data))
    add_start_notice("--train-data differs from the checkpoint's (" + quoted_text(saved_data) + "): batches from " +
               std::to_string(locate(next_sequence_).batch) + " on are drawn from the new data");
  add_start_notice(changed_flag_notices(config_, state.run_config, state.step));
}

BatchSequence Trainer::locate(int64_t sequence) const {
  return locate_sequence(sequence, data_origin_, config_.batch_size, epoch_batches_);
}

void Trainer::for_each_batch_piece(int64_t sequence, int64_t count,
                                   const std::function<void(BatchSequence at, int64_t done, int64_t n)>& piece) const {
  for (int64_t done = 0; done < count;) {  // a piece per global batch the sequences fall in
    const BatchSequence at = locate(sequence + done);
    const int64_t n = std::min(count - done, config_.batch_size - at.sequence);
    piece(at, done, n);
    done += n;
  }
}

void Trainer::fill_sequences(int64_t sequence, int64_t count, int32_t* inputs, int32_t* targets) const {
  const int64_t T = config_.seq_len;
  for_each_batch_piece(sequence, count, [&](BatchSequence at, int64_t done, int64_t n) {
    train_data_->fill(at.batch, at.sequence, n, inputs + done * T, targets + done * T);
    if (data_hook_) data_hook_(sequence + done, n, inputs + done * T);
  });
}

int64_t Trainer::count_trained(int64_t sequence, int64_t count) const {
  int64_t trained = 0;
  for_each_batch_piece(sequence, count, [&](BatchSequence at, int64_t, int64_t n) {
    trained += train_data_->count_trained(at.batch, at.sequence, n);
  });
  return trained;
}

}  // namespace tessera
