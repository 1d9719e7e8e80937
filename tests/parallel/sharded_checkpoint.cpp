// What a 2-rank run writes of a checkpoint: each rank's shard file holds exactly the moments it owns
// (its ZeRO-1 or ZeRO-3 shard; under ZeRO 0 half of the flat buffer) and, with sharded weights (by
// default under ZeRO-3), the weights of the same slices, and nothing else; the index's byte ranges
// and block CRCs point at the very bytes of each slice, and `tessera convert --to-hf` exports the
// checkpoint to a Hugging Face folder that imports back to the same weights; resuming ranks share the
// checksum reads and agree on a fallback.
#include <gtest/gtest.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>

#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_state.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/safetensors.h"
#include "nn/decoder_layout.h"
#include "parallel/dp/buckets.h"
#include "parallel/train_runs.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// Sorted, with touching ranges joined.
Ranges merged(Ranges ranges) {
  std::sort(ranges.begin(), ranges.end());
  Ranges out;
  for (const auto& r : ranges) {
    if (!out.empty() && out.back().second == r.first) out.back().second = r.second;
    else if (r.first < r.second) out.push_back(r);
  }
  return out;
}

// The flat elements dp rank `rank` of 2 owns: its ZeRO shard (the buckets of --bucket-mb 0.01; under
// ZeRO-3 one bucket per block, the embeddings and the final norm with the head), or under ZeRO 0 the
// rank's half.
Ranges owned(const ParameterLayout& layout, int zero, int rank) {
  if (zero == 0) return {{layout.total() * rank / 2, layout.total() * (rank + 1) / 2}};
  std::vector<int64_t> starts;
  for (const ParamSpec& spec : layout.specs())
    if (zero < 3 || starts.empty() || layout.block_range(spec.block, spec.block).begin == spec.offset)
      starts.push_back(spec.offset);
  const int64_t bucket_elems = zero < 3 ? int64_t(0.01 * (1 << 20)) / 4 : 1;
  Ranges ranges;
  for (const Bucket& b : make_buckets(starts, layout.total(), bucket_elems, rank, 2))
    ranges.push_back({b.owned_begin, b.owned_end});
  return merged(ranges);
}

class ShardedCheckpoint : public ::testing::TestWithParam<int> {};

}  // namespace

TEST_P(ShardedCheckpoint, EachRankWritesOnlyItsShareAndTheIndexPointsAtIt) {
  const int zero = GetParam();
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 23).string();
  train(Layout{2, 2, zero, 2}, dir / "run", shard, "--steps 1");
  const fs::path checkpoint = fs::canonical(dir / "run" / "ckpt-latest");
  const nlohmann::json state = read_state_json(checkpoint);
  EXPECT_EQ(state["layout"], (nlohmann::json{{"world_size", 2}, {"dp", 2}, {"tp", 1}, {"pp", 1}, {"zero", zero}}));
  const ParameterLayout layout = decoder_layout(state_model_config(state, checkpoint));
  for (int rank = 0; rank < 2; ++rank) {
    const std::string file = shard_file_name(rank, 2);
    const SafetensorsFile stored(checkpoint / file);
    std::map<std::string, Ranges> held;  // per moment ("m.", "v.") and the weights (""), the flat elements the file holds
    for (const SafetensorsInfo& t : stored.tensors()) {
      std::string tensor;
      int64_t begin = 0, end = 0;
      ASSERT_TRUE(parse_slice_name(t.name, tensor, begin, end)) << t.name;
      const std::string parameter(state_parameter_name(tensor));
      const std::string prefix = tensor.substr(0, tensor.size() - parameter.size());
      const int64_t offset = layout.find(parameter).offset;
      held[prefix].push_back({offset + begin, offset + end});
    }
    EXPECT_EQ(merged(held["m."]), owned(layout, zero, rank)) << file;
    EXPECT_EQ(merged(held["v."]), owned(layout, zero, rank)) << file;
    const bool sharded_weights = zero == 3;
    EXPECT_EQ(merged(held[""]), sharded_weights ? owned(layout, zero, rank) : Ranges{}) << file;
    EXPECT_EQ(fs::exists(checkpoint / "model.safetensors"), !sharded_weights);
    // Every slice the index places in this file: at the bytes the file's header gives, with their CRC.
    size_t slices = 0;
    for (const auto& [name, tensor] : state["tensors"].items())
      for (const nlohmann::json& s : tensor["slices"]) {
        if (s["file"] != file) continue;
        ++slices;
        const std::string stored_name = slice_name(name, s["elements"][0], s["elements"][1]);
        const SafetensorsInfo& info = stored.info(stored_name);
        EXPECT_EQ(s["bytes"][0].get<size_t>(), stored.header().size() + info.begin) << stored_name;
        EXPECT_EQ(s["bytes"][1].get<size_t>(), stored.header().size() + info.end) << stored_name;
        const std::span<const std::byte> bytes = stored.bytes(stored_name);
        char crc[16];
        std::snprintf(crc, sizeof crc, "%08lx",
                      static_cast<unsigned long>(crc32(0L, reinterpret_cast<const Bytef*>(bytes.data()), uInt(bytes.size()))));
        EXPECT_EQ(s["crc32"], nlohmann::json::array({crc})) << stored_name;
      }
    EXPECT_EQ(slices, stored.tensors().size()) << file;
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, ShardedCheckpoint, ::testing::Values(0, 1, 3),
                         [](const auto& info) { return "zero" + std::to_string(info.param); });

// Two ranks resuming share the checksum reads (file i of a candidate, in name order, is rank i % 2's
// to check) and agree on the verdict: a damaged shard that only rank 1 checks makes both skip to the
// previous checkpoint, and rank 0 names the skipped one.
TEST(ShardedCheckpoint, RanksShareTheResumeChecksAndAgreeOnTheFallback) {
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 8192, 256, 29).string();
  const Layout layout{2, 2, 1, 2};
  train(layout, dir / "run", shard, "--steps 4 --checkpoint-every 2");
  // model.safetensors, shard-00000-of-00002, shard-00001-of-00002: the second is rank 1's.
  const fs::path damaged = dir / "run" / checkpoint_dir_name(4) / shard_file_name(0, 2);
  {
    std::fstream f(damaged, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const std::streamoff middle = f.tellg() / 2;
    f.seekg(middle);
    const char byte = char(f.get() ^ 0x5a);
    f.seekp(middle);
    f.put(byte);
  }
  const std::string cmd = train_command(layout, dir / "run", shard, "--steps 6 --checkpoint-every 2 --resume");
  const testing::CommandResult r = testing::run_command(cmd);
  ASSERT_EQ(r.exit_code, 0) << cmd << "\n" << r.output;
  EXPECT_TRUE(testing::contains(r.output, checkpoint_dir_name(4))) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "resuming from " + checkpoint_dir_name(2))) << r.output;
}

// Whole or sharded weights alike: the export (which loads the checkpoint in one process, as
// `generate` and `eval` do) holds the run's weights.
TEST(ShardedCheckpoint, ConvertsToHuggingFace) {
  const fs::path root = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(root, 8192, 256, 23).string();
  const std::string exe = std::string("OMP_NUM_THREADS=1 ") + TESSERA_EXE;
  for (const std::string weights : {"whole", "sharded"}) {
    const fs::path dir = root / weights;
    train(Layout{2, 2, 1, 2}, dir / "run", shard, "--steps 1 --checkpoint-weights " + weights);
    EXPECT_EQ(fs::exists(dir / "run" / "ckpt-latest" / "model.safetensors"), weights == "whole");
    testing::CommandResult r =
        testing::run_command(exe + " convert --checkpoint " + (dir / "run").string() + " --to-hf " + (dir / "hf").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(fs::exists(dir / "hf" / "config.json"));
    r = testing::run_command(exe + " convert --from-hf " + (dir / "hf").string() + " --out " + (dir / "back").string());
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(testing::checkpoint_tensors(dir / "back" / "ckpt-latest") ==
                testing::checkpoint_tensors(dir / "run" / "ckpt-latest"))
        << weights;
  }
}

}  // namespace tessera
