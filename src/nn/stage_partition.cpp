// Cost-balanced and explicit pipeline stage boundaries (see stage_partition.h). The balanced split is
// the linear-partition dynamic programme over prefix sums: O(chunks · L²), small for any real model.
#include "nn/stage_partition.h"

#include <algorithm>
#include <limits>
#include <string>

#include "core/error.h"
#include "nn/decoder_layout.h"

namespace tessera {

namespace {

// Each block's parameters. The layout planner asks about one model thousands of times, so the last
// model's counts are kept (per thread).
const std::vector<double>& block_parameters(const ModelConfig& c) {
  thread_local ModelConfig model;
  thread_local std::vector<double> counts;
  if (!counts.empty() && model == c) return counts;
  counts.assign(size_t(c.num_layers), 0.0);
  const ParameterLayout layout = decoder_layout(c);
  for (const ParamSpec& spec : layout.specs())
    if (spec.block >= 0 && spec.block < c.num_layers) counts[size_t(spec.block)] += double(spec.numel());
  model = c;
  return counts;
}

}  // namespace

std::vector<double> block_costs(const ModelConfig& c, int64_t seq_len) {
  std::vector<double> costs = block_parameters(c);
  const double idle_experts = double(c.moe.num_experts - c.moe.top_k) * 3.0 * double(c.moe.expert_hidden * c.channels);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    double& cost = costs[size_t(l)];
    if (c.is_moe_block(l)) cost -= idle_experts;  // a token runs top_k of the experts
    cost = 6.0 * cost + 6.0 * double(c.channels) * double(seq_len);
  }
  return costs;
}

double head_cost(const ModelConfig& c) { return 6.0 * double(c.padded_vocab_size()) * double(c.channels); }

std::vector<double> chunk_costs(const ModelConfig& c, int64_t seq_len, const StageBoundaries& b) {
  const std::vector<double> blocks = block_costs(c, seq_len);
  std::vector<double> costs;
  for (size_t k = 0; k + 1 < b.size(); ++k) {
    double cost = 0;
    for (int64_t l = b[k]; l < b[k + 1]; ++l) cost += blocks[size_t(l)];
    costs.push_back(cost);
  }
  if (!costs.empty()) costs.back() += head_cost(c);
  return costs;
}

StageBoundaries balanced_boundaries(const ModelConfig& c, int64_t seq_len, int chunks) {
  const int64_t L = c.num_layers;
  TS_CHECK(chunks >= 1, "pipeline: ", chunks, " chunks; at least 1 is needed");
  TS_CHECK(chunks <= L, "pipeline: --pp × --virtual-stages = ", chunks, " chunks but the model has ", L,
           " blocks, and each chunk needs one; use at most ", L, " chunks");
  const std::vector<double> blocks = block_costs(c, seq_len);
  std::vector<double> prefix(size_t(L) + 1, 0.0);
  for (int64_t l = 0; l < L; ++l) prefix[size_t(l) + 1] = prefix[size_t(l)] + blocks[size_t(l)];
  const double head = head_cost(c);
  // best[k][i]: the cheapest most-expensive chunk when the first k chunks hold blocks [0, i); the
  // last chunk also carries the head.
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(size_t(chunks) + 1, std::vector<double>(size_t(L) + 1, inf));
  std::vector<std::vector<int64_t>> cut(size_t(chunks) + 1, std::vector<int64_t>(size_t(L) + 1, 0));
  best[0][0] = 0.0;
  for (int k = 1; k <= chunks; ++k)
    for (int64_t i = k; i <= L - (chunks - k); ++i)
      for (int64_t j = k - 1; j < i; ++j) {
        const double cost = prefix[size_t(i)] - prefix[size_t(j)] + (k == chunks ? head : 0.0);
        const double worst = std::max(best[size_t(k) - 1][size_t(j)], cost);
        if (worst < best[size_t(k)][size_t(i)]) {
          best[size_t(k)][size_t(i)] = worst;
          cut[size_t(k)][size_t(i)] = j;
        }
      }
  StageBoundaries b(size_t(chunks) + 1);
  b[size_t(chunks)] = L;
  for (int k = chunks; k > 0; --k) b[size_t(k) - 1] = cut[size_t(k)][size_t(b[size_t(k)])];
  return b;
}

StageBoundaries explicit_boundaries(const std::vector<int64_t>& interior, int64_t L, int chunks) {
  TS_CHECK(int(interior.size()) == chunks - 1, "--pipeline-boundaries gives ", interior.size(), " boundaries, but ",
           chunks, " chunks (--pp × --virtual-stages) need ", chunks - 1, ": the first block of every chunk but the first");
  StageBoundaries b{0};
  for (const int64_t first : interior) {
    TS_CHECK(first > b.back() && first < L, "--pipeline-boundaries: ", first, " after ", b.back(),
             " must be greater than it and below the model's ", L,
             " blocks; boundaries are strictly increasing first blocks of chunks 1, 2, ...");
    b.push_back(first);
  }
  b.push_back(L);
  return b;
}

bool DecoderStage::holds_block(int64_t block) const {
  return std::any_of(chunks.begin(), chunks.end(), [&](const BlockRange& r) { return r.contains(block); });
}

DecoderStage whole_decoder(int64_t num_layers) { return DecoderStage{{BlockRange{0, num_layers}}, num_layers}; }

DecoderStage pipeline_stage(const StageBoundaries& b, int stages, int rank) {
  TS_CHECK(b.size() >= 2 && stages >= 1 && rank >= 0 && rank < stages && (b.size() - 1) % size_t(stages) == 0,
           "pipeline_stage: rank ", rank, " of ", stages, " over ", b.size() - 1, " chunks");
  DecoderStage stage{{}, b.back()};
  for (size_t c = size_t(rank); c + 1 < b.size(); c += size_t(stages)) stage.chunks.push_back({b[c], b[c + 1]});
  return stage;
}

}  // namespace tessera
