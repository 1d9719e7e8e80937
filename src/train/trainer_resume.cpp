// The checks and notices of a run that starts from a checkpoint or an imported model.
#include "train/trainer_resume.h"

#include <cstdio>
#include <vector>

#include "core/error.h"
#include "core/user_text.h"
#include "data/data_mixture.h"
#include "optim/lr_schedule.h"

namespace tessera {
namespace {

// saved[key] when the checkpoint's run recorded it as a value of T's kind, else nothing.
template <typename T>
std::optional<T> saved_value(const nlohmann::json& saved, const char* key) {
  const auto it = saved.find(key);
  if (it == saved.end()) return std::nullopt;
  if constexpr (std::is_same_v<T, std::string>) {
    if (it->is_string()) return it->get<std::string>();
  } else if constexpr (std::is_floating_point_v<T>) {
    if (it->is_number()) return it->get<T>();
  } else {
    if (it->is_number_integer()) return it->get<T>();
  }
  return std::nullopt;
}

}  // namespace

std::string changed_flag_notices(const TrainConfig& c, const nlohmann::json& saved, int64_t step) {
  // The checkpoint's schedule: its recorded values, the current ones where it recorded none.
  const std::string saved_kind = saved_value<std::string>(saved, "lr-schedule").value_or(c.lr_schedule);
  const LrSchedule before{parse_lr_schedule(saved_kind), saved_value<float>(saved, "lr").value_or(c.lr),
                          saved_value<float>(saved, "min-lr").value_or(c.min_lr),
                          saved_value<int64_t>(saved, "warmup").value_or(c.warmup),
                          saved_value<int64_t>(saved, "steps").value_or(c.steps),
                          saved_value<float>(saved, "decay-fraction").value_or(c.decay_fraction)};
  const LrSchedule now{parse_lr_schedule(c.lr_schedule), c.lr, c.min_lr, c.warmup, c.steps, c.decay_fraction};
  const std::string next = std::to_string(step + 1);
  const std::string rates = "; step " + next + "'s learning rate is " + number_text(now.at(step + 1)) +
                            " (the checkpoint's schedule: " + number_text(before.at(step + 1)) + ")";
  std::vector<std::string> lines;
  auto changed = [&](const char* flag, const std::string& value, const std::string& was, const std::string& effect) {
    if (value != was) lines.push_back(std::string(flag) + " " + value + " (was " + was + "): " + effect);
  };
  const auto steps = saved_value<int64_t>(saved, "steps");
  if (steps)
    changed("--steps", std::to_string(c.steps), std::to_string(*steps),
            (now.kind == LrScheduleKind::constant ? "the run now ends at step " + std::to_string(c.steps)
                                                  : "the " + c.lr_schedule + " schedule is recomputed to end at step " +
                                                        std::to_string(c.steps)) + rates);
  if (const auto lr = saved_value<float>(saved, "lr"))
    changed("--lr", number_text(c.lr), number_text(*lr), "the schedule's peak learning rate changes" + rates);
  if (const auto min_lr = saved_value<float>(saved, "min-lr"))
    changed("--min-lr", number_text(c.min_lr), number_text(*min_lr),
            "the schedule now decays to the new floor" + rates);
  if (const auto warmup = saved_value<int64_t>(saved, "warmup"))
    changed("--warmup", std::to_string(c.warmup), std::to_string(*warmup),
            "the schedule's warmup is recomputed for the new length" + rates);
  if (saved.contains("lr-schedule"))
    changed("--lr-schedule", c.lr_schedule, saved_kind, "the learning rate follows the new schedule from step " + next +
                                                           rates);
  const bool wsd = now.kind == LrScheduleKind::wsd || before.kind == LrScheduleKind::wsd;
  if (const auto fraction = saved_value<float>(saved, "decay-fraction"); fraction && wsd)
    changed("--decay-fraction", number_text(c.decay_fraction), number_text(*fraction),
            "wsd decays over the new share of the steps" + rates);
  if (const auto decay = saved_value<float>(saved, "weight-decay"))
    changed("--weight-decay", number_text(c.weight_decay), number_text(*decay),
            "AdamW decays the weights at the new rate from step " + next);
  if (const auto seed = saved_value<uint64_t>(saved, "seed")) {
    const bool shuffled = c.data_order == "shuffled" || parse_data_sources(c.train_data, "--train-data").size() > 1;
    changed("--seed", std::to_string(c.seed), std::to_string(*seed),
            shuffled ? "the data order from step " + next + " on is drawn from the new seed, so windows already "
                       "trained on may come again and others never; resume with --seed " + std::to_string(*seed) +
                       " to keep the run's order"
                     : "the random draws from step " + next + " on (AdamW's stochastic rounding, samples) follow "
                       "the new seed; the data order is sequential and does not change");
  }
  std::string text;
  for (const std::string& line : lines) text += (text.empty() ? "" : "\n") + line;
  return text;
}

DataResume resume_data_position(const TrainConfig& config, const CheckpointState& state,
                                const std::function<int64_t(int64_t batch_size)>& epoch_sequences) {
  const int64_t saved_batch = saved_value<int64_t>(state.run_config, "batch-size").value_or(config.batch_size);
  DataResume r;
  r.consumed = state.consumed_sequences.value_or(state.next_batch * saved_batch);
  // Other data is read by the sequence index alone, from the zero origin.
  const bool same_data =
      same_data_sources(saved_value<std::string>(state.run_config, "train-data").value_or(config.train_data),
                        config.train_data);
  r.origin = same_data ? state.data_origin : SequenceOrigin{};
  if (saved_batch == config.batch_size) return r;
  // The same single source in another batch size: its epochs change length (E·B), so the new ones
  // start where the old run stood in its epoch. A mixture draws by the sequence index alone.
  const int64_t new_epoch = same_data ? epoch_sequences(config.batch_size) : 0;
  if (new_epoch > 0) r.origin = continue_epoch(r.consumed, r.origin, epoch_sequences(saved_batch), new_epoch);
  r.notice = "--batch-size " + std::to_string(config.batch_size) + " (was " + std::to_string(saved_batch) +
             "): continuing at sequence " + std::to_string(r.consumed);
  return r;
}

}  // namespace tessera
