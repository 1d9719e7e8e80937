// DataMixture: the sources' syntax, and the closed-form split of the global sequence index. Level d
// of the split gives source d, of the sequences the earlier sources left, the first n of which take
// taken(split_d, n) = round(split_d · n): a sequence is source d's where that count steps up. Each
// level is off its share by at most half a sequence, so with D sources every source's count is
// within (D - 1) / 2 sequences of its share at every point of the run, and finding sequence g's
// source and index is one pass over the sources.
#include "data/data_mixture.h"

#include <algorithm>
#include <array>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>

#include "core/error.h"
#include "core/rng.h"

namespace tessera {
namespace {

std::string_view trimmed(std::string_view text) {
  while (!text.empty() && text.front() == ' ') text.remove_prefix(1);
  while (!text.empty() && text.back() == ' ') text.remove_suffix(1);
  return text;
}

// The weight in front of "W:GLOB", if the text before the first ':' is a whole number.
std::optional<double> weight_prefix(std::string_view item) {
  const size_t colon = item.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const std::string_view number = trimmed(item.substr(0, colon));
  double weight = 0;
  const auto [end, error] = std::from_chars(number.data(), number.data() + number.size(), weight);
  if (number.empty() || error != std::errc() || end != number.data() + number.size()) return std::nullopt;
  return weight;
}

// Whether two globs are one source: the same path once '.', '..' and doubled slashes are normalised.
bool same_glob(std::string_view a, std::string_view b) {
  return std::filesystem::path(a).lexically_normal() == std::filesystem::path(b).lexically_normal();
}

// Where the source starting at `start` ends: the next comma outside a glob's {a,b} alternatives, or
// the text's end.
size_t source_end(std::string_view text, size_t start) {
  int depth = 0;
  for (size_t i = start; i < text.size(); ++i) {
    if (text[i] == '{') ++depth;
    if (text[i] == '}' && depth > 0) --depth;
    if (text[i] == ',' && depth == 0) return i;
  }
  return text.size();
}

// How many of the first n sequences reaching split level `split` that level's source takes.
int64_t taken(double split, int64_t n) { return int64_t(std::floor(split * double(n) + 0.5)); }

// Each source's samplers draw their own shuffled order: the seed is derived from (seed, source).
uint64_t source_seed(uint64_t seed, size_t source) {
  const std::array<uint32_t, 4> words = philox(seed, stream_id("data.source"), source);
  return uint64_t(words[0]) << 32 | words[1];
}

}  // namespace

std::vector<DataSource> parse_data_sources(std::string_view text, std::string_view flag_name) {
  const char* syntax = "; give one glob, or weighted globs: 0.7:web/train_*.bin,0.3:code/train_*.bin";
  std::vector<DataSource> sources;
  std::vector<bool> weighted;
  for (size_t start = 0; start <= text.size();) {
    const size_t comma = source_end(text, start);
    const std::string_view item = trimmed(text.substr(start, comma - start));
    start = comma + 1;
    const std::optional<double> weight = weight_prefix(item);
    const std::string_view glob = weight ? trimmed(item.substr(item.find(':') + 1)) : item;
    TS_CHECK(!glob.empty(), flag_name, ": source ", sources.size() + 1, " of '", text, "' has no glob", syntax);
    TS_CHECK(!weight || (std::isfinite(*weight) && *weight > 0), flag_name, ": the weight of '", glob,
             "' must be a positive number, got ", *weight);
    sources.push_back({std::string(glob), weight.value_or(1.0)});
    weighted.push_back(weight.has_value());
  }
  for (size_t s = 0; s < sources.size() && sources.size() > 1; ++s)
    TS_CHECK(weighted[s], flag_name, ": '", sources[s].glob, "' has no weight; in a mixture every source has one",
             syntax);
  for (size_t s = 0; s < sources.size(); ++s)
    for (size_t earlier = 0; earlier < s; ++earlier)
      TS_CHECK(!same_glob(sources[earlier].glob, sources[s].glob), flag_name, ": '", sources[s].glob, "' is given ",
               "twice; name each source once (to give it more of the sequences, raise its weight)");
  double total = 0;
  for (const DataSource& source : sources) total += source.weight;
  for (DataSource& source : sources) source.weight /= total;
  return sources;
}

bool same_data_sources(std::string_view a, std::string_view b) {
  if (a == b) return true;
  try {
    const std::vector<DataSource> first = parse_data_sources(a, "--train-data"), second = parse_data_sources(b, "--train-data");
    if (first.size() != second.size()) return false;
    const auto files = [](const DataSource& source) {
      std::vector<std::filesystem::path> paths;
      for (const std::string& path : expand_glob(source.glob, "--train-data"))
        paths.push_back(std::filesystem::weakly_canonical(path));
      return paths;
    };
    for (size_t s = 0; s < first.size(); ++s)
      if (std::abs(first[s].weight - second[s].weight) > 1e-12 || files(first[s]) != files(second[s])) return false;
    return true;
  } catch (const Error&) {
    return false;
  } catch (const std::filesystem::filesystem_error&) {
    return false;
  }
}

DataMixture::DataMixture(const std::string& text, int64_t vocab_size, int64_t batch_size, int64_t seq_len,
                         DataOrder order, uint64_t seed, std::string_view flag_name)
    : sources_(parse_data_sources(text, flag_name)), batch_size_(batch_size), seq_len_(seq_len) {
  const size_t count = sources_.size();
  for (const DataSource& source : sources_)
    datasets_.push_back(std::make_unique<TokenDataset>(TokenDataset::open(source.glob, vocab_size, flag_name)));
  if (count == 1) {
    samplers_.push_back(std::make_unique<BatchSampler>(*datasets_[0], batch_size, seq_len, order, seed));
    return;
  }
  TS_CHECK(batch_size > 0, "--batch-size must be positive, got ", batch_size);
  std::vector<double> rest(count + 1, 0.0);  // rest[d] = w_d + ... + w_last, summed from the end
  for (size_t d = count; d-- > 0;) rest[d] = rest[d + 1] + sources_[d].weight;
  require_distinct_shards(flag_name);
  for (size_t d = 0; d < count; ++d) {
    split_.push_back(d + 1 < count ? std::min(1.0, sources_[d].weight / rest[d]) : 1.0);
    samplers_.push_back(source_sampler(d, seq_len, order, seed, flag_name));
  }
}

void DataMixture::require_distinct_shards(std::string_view flag_name) const {
  std::map<std::filesystem::path, size_t> source_of;  // shard -> the first source matching it
  for (size_t d = 0; d < datasets_.size(); ++d)
    for (const TokenShard& shard : datasets_[d]->shards()) {
      const auto [at, added] = source_of.emplace(std::filesystem::path(shard.path()).lexically_normal(), d);
      TS_CHECK(added || at->second == d, flag_name, ": shard ", shard.path().string(), " is matched by source ",
               at->second + 1, " ('", sources_[at->second].glob, "') and source ", d + 1, " ('", sources_[d].glob,
               "'); give the sources globs that match distinct shards");
    }
}

// A mixture's source is read a sequence at a time (the mixture draws every sequence of a global
// batch on its own), so it needs one window of T + 1 tokens, whatever --batch-size is.
std::unique_ptr<BatchSampler> DataMixture::source_sampler(size_t d, int64_t seq_len, DataOrder order, uint64_t seed,
                                                          std::string_view flag_name) const {
  const TokenDataset& dataset = *datasets_[d];
  const std::string source =
      std::string(flag_name) + ": source " + std::to_string(d + 1) + " ('" + sources_[d].glob + "')";
  TS_CHECK(seq_len <= 0 || dataset.num_tokens() > seq_len, source, " holds ", dataset.num_tokens(),
           " tokens, too few for one sequence of --seq-len ", seq_len, ", which needs ", seq_len + 1,
           " (a mixture draws each source a sequence at a time); add data to it, drop it from the mixture or lower ",
           "--seq-len");
  try {
    return std::make_unique<BatchSampler>(dataset, 1, seq_len, order, source_seed(seed, d));
  } catch (const Error& e) {
    std::string_view message = e.what();
    if (message.starts_with(flag_name) && message.substr(flag_name.size()).starts_with(": "))
      message.remove_prefix(flag_name.size() + 2);  // the dataset's errors name the flag too
    throw Error(source + ": " + std::string(message), e.where());
  }
}

int64_t DataMixture::batches_per_epoch() const {
  TS_CHECK(sources_.size() == 1, "DataMixture: a mixture has no epochs of its own; read its sources one at a time");
  return samplers_[0]->batches_per_epoch();
}

DataMixture::Draw DataMixture::draw(int64_t global_sequence) const {
  int64_t n = global_sequence;
  for (size_t d = 0; d + 1 < split_.size(); ++d) {
    const int64_t before = taken(split_[d], n);
    if (taken(split_[d], n + 1) > before) return {int(d), before};
    n -= before;  // the sequences before n that source d took
  }
  return {int(sources_.size()) - 1, n};
}

int64_t DataMixture::drawn_from(int source, int64_t num_sequences) const {
  if (sources_.size() == 1) return num_sequences;
  int64_t n = num_sequences;
  for (int d = 0; d < source; ++d) n -= taken(split_[size_t(d)], n);
  return size_t(source) + 1 < sources_.size() ? taken(split_[size_t(source)], n) : n;
}

void DataMixture::fill(int64_t batch_index, int64_t first_sequence, int64_t num_sequences, int32_t* inputs,
                       int32_t* targets) const {
  if (sources_.size() == 1) return samplers_[0]->fill(batch_index, first_sequence, num_sequences, inputs, targets);
  check_batch_range(batch_index, first_sequence, num_sequences, batch_size_);
  for (int64_t i = 0; i < num_sequences; ++i) {
    const Draw d = draw(batch_index * batch_size_ + first_sequence + i);
    samplers_[size_t(d.source)]->fill(d.index, 0, 1, inputs + i * seq_len_, targets + i * seq_len_);
  }
}

int64_t DataMixture::count_trained(int64_t batch_index, int64_t first_sequence, int64_t num_sequences) const {
  if (sources_.size() == 1) return samplers_[0]->count_trained(batch_index, first_sequence, num_sequences);
  check_batch_range(batch_index, first_sequence, num_sequences, batch_size_);
  int64_t count = 0;
  for (int64_t i = 0; i < num_sequences; ++i) {
    const Draw d = draw(batch_index * batch_size_ + first_sequence + i);
    count += samplers_[size_t(d.source)]->count_trained(d.index, 0, 1);
  }
  return count;
}

bool DataMixture::has_loss_masks() const {
  return std::any_of(datasets_.begin(), datasets_.end(), [](const auto& d) { return d->has_loss_mask(); });
}

bool DataMixture::has_packed_records() const {
  return std::any_of(datasets_.begin(), datasets_.end(), [](const auto& d) { return d->packed_seq_len() > 0; });
}

std::string DataMixture::summary(int64_t batches) const {
  std::string lines;
  for (size_t d = 0; d < sources_.size(); ++d) {
    const int64_t windows = samplers_[d]->num_windows();
    const double epochs = sources_.size() == 1 ? double(batches) / double(batches_per_epoch())
                                               : double(drawn_from(int(d), batches * batch_size_)) / double(windows);
    char line[160];
    std::snprintf(line, sizeof line, "%5.1f%% of the sequences, %lld tokens (%lld sequences), %.2f epochs in %lld batches: ",
                  100.0 * sources_[d].weight, (long long)datasets_[d]->num_tokens(), (long long)windows, epochs,
                  (long long)batches);
    if (d > 0) lines += '\n';
    lines.append(line).append(sources_[d].glob);
    if (datasets_[d]->has_loss_mask()) {
      std::snprintf(line, sizeof line, " (loss masks: %.1f%% of the tokens are targets)",
                    100.0 * double(datasets_[d]->num_trained()) / double(std::max<int64_t>(datasets_[d]->num_tokens(), 1)));
      lines.append(line);
    }
  }
  return lines;
}

}  // namespace tessera
