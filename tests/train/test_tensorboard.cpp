// TensorBoard event files: CRC-32C against RFC 3720's vectors, and a run's metrics read back by an
// independent reader (tests/train/read_tfevents.py: its own CRC-32C, the protobuf runtime's decoder)
// as the scalars TensorBoard would plot, step by step; each file marks a session's start at its first
// step, which makes TensorBoard hide what older files logged from there on (a resume's repeated steps).
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/tensorboard_events.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {

// Runs read_tfevents.py on `file` with Debian's python3 and its protobuf; nullopt when that is not installed.
std::optional<nlohmann::json> read_events(const std::filesystem::path& file) {
  const std::string python = "/usr/bin/python3";
  if (testing::run_command(python + " -c 'import google.protobuf'").exit_code != 0) return std::nullopt;
  const std::filesystem::path out = file.parent_path().parent_path() / "events.json";
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/tests/train/read_tfevents.py";
  const testing::CommandResult r =
      testing::run_command(python + " '" + script + "' '" + file.string() + "' '" + out.string() + "'");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(testing::read_text(out));
}

}  // namespace

TEST(Crc32c, MatchesTheRfc3720Vectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

// A MoE run with a capacity, so that its lines hold per-layer arrays (each element a scalar "key/index").
TEST(TensorBoard, EveryMetricIsAScalarAtItsStep) {
  const auto dir = testing::scratch_dir();
  TrainConfig c = testing::tiny_run(dir);
  c.model = "mixtral-tiny";
  c.moe_capacity_factor = 1.0f;
  c.val_data = c.train_data;
  c.eval_every = 2;
  c.steps = 4;
  c.tensorboard_dir = (dir / "tb").string();
  Trainer(c).run();
  std::vector<std::filesystem::path> files;
  for (const auto& e : std::filesystem::directory_iterator(dir / "tb")) files.push_back(e.path());
  ASSERT_EQ(files.size(), 1u);
  EXPECT_TRUE(files[0].filename().string().starts_with("events.out.tfevents.")) << files[0];
  const std::optional<nlohmann::json> events = read_events(files[0]);
  if (!events) GTEST_SKIP() << "python3-protobuf is not installed (scripts/setup.sh installs it)";
  EXPECT_EQ((*events)["file_version"], "brain.Event:2");
  EXPECT_EQ((*events)["session_starts"], nlohmann::json::array({1}));
  std::map<std::pair<int64_t, std::string>, double> scalars;
  for (const auto& s : (*events)["scalars"]) scalars[{s[0].get<int64_t>(), s[1].get<std::string>()}] = s[2];
  const auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);
  size_t expected = 0;
  auto expect_scalar = [&](int64_t step, const std::string& tag, double value) {
    ++expected;
    const auto it = scalars.find({step, tag});
    ASSERT_NE(it, scalars.end()) << tag << " at step " << step;
    EXPECT_EQ(float(it->second), float(value)) << tag << " at step " << step;
  };
  for (const nlohmann::json& line : lines)
    for (const auto& [key, value] : line.items()) {
      const int64_t step = line["step"].get<int64_t>();
      if (key != "step" && value.is_number()) expect_scalar(step, key, value.get<double>());
      if (value.is_array())
        for (size_t i = 0; i < value.size(); ++i) expect_scalar(step, key + "/" + std::to_string(i), value[i].get<double>());
    }
  EXPECT_EQ(scalars.size(), expected);
  EXPECT_TRUE(scalars.contains({4, "val_loss"}));
  EXPECT_TRUE(scalars.contains({1, "loss"}));
  EXPECT_TRUE(scalars.contains({1, "expert_load_max"}));
  EXPECT_TRUE(scalars.contains({1, "dropped_fraction"}));
  EXPECT_TRUE(scalars.contains({1, "expert_load_max_over_mean/1"}));  // mixtral-tiny's second MoE layer
}

TEST(TensorBoard, AResumedFileStartsItsSessionAtItsFirstStep) {
  const auto dir = testing::scratch_dir();
  std::filesystem::path file;
  {
    TensorBoardEvents resumed(dir / "tb");
    resumed.write_scalars(301, {{"loss", 2.5}});
    resumed.write_scalars(302, {{"loss", 2.25}});
    file = resumed.path();
  }
  const std::optional<nlohmann::json> events = read_events(file);
  if (!events) GTEST_SKIP() << "python3-protobuf is not installed (scripts/setup.sh installs it)";
  EXPECT_EQ((*events)["session_starts"], nlohmann::json::array({301}));
  EXPECT_EQ((*events)["scalars"], nlohmann::json::parse("[[301, \"loss\", 2.5], [302, \"loss\", 2.25]]"));
}

TEST(TensorBoard, AFolderThatCannotBeMadeIsOneLine) {
  const auto dir = testing::scratch_dir();
  testing::write_text(dir / "file", "x");
  testing::expect_error_with([&] { TensorBoardEvents events(dir / "file" / "tb"); },
                             {"--tensorboard-dir", "cannot create the folder"});
}

}  // namespace tessera
