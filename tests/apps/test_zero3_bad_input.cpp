// `--zero 3` beside what it cannot be combined with (it shards over --dp alone): `tessera train`
// refuses at start-up, before any rank computes or writes, with an exit code in 1..123 and exactly
// one line on stderr naming the flag, its number and a valid choice (--zero 2, or dropping the flag).
#include <gtest/gtest.h>

#include <algorithm>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

struct Refused {
  const char* name;
  const char* flags;
  const char* needle;
};

void PrintTo(const Refused& r, std::ostream* os) { *os << r.name; }

class Zero3Refuses : public ::testing::TestWithParam<Refused> {};

TEST_P(Zero3Refuses, OneLineNamingTheFlagAndAValidChoice) {
  const Refused& c = GetParam();
  const fs::path dir = testing::scratch_dir();
  const std::string shard = testing::write_random_shard(dir, 4096, 256, 3).string();
  const std::string args = std::string(" train --quiet --model gpt2-tiny --device cpu --batch-size 4 --seq-len 16 ") +
                           "--steps 1 --train-data " + shard + " --out-dir " + (dir / "run").string() + " " + c.flags;
  const testing::CommandResult r = testing::run_command("{ timeout 60 env OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) +
                                                        args + " > /dev/null; }");
  const std::string& err = r.output;
  EXPECT_GE(r.exit_code, 1) << args;
  EXPECT_LT(r.exit_code, 124) << "crashed or hung: " << args << "\n" << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_TRUE(err.starts_with("tessera: error: ")) << err;
  EXPECT_TRUE(testing::contains(err, c.needle)) << "'" << c.needle << "' not in: " << err;
  EXPECT_FALSE(fs::exists(dir / "run")) << "the refused run wrote " << (dir / "run").string();
}

const Refused kRefused[] = {
    {"Pipeline", "--zero 3 --pp 2", "--zero 3 shards over --dp alone and cannot be combined with --pp 2; use --zero 2 "
                                    "with --pp 2, or drop --pp"},
    {"Tensor", "--zero 3 --tp 2", "cannot be combined with --tp 2; use --zero 2 with --tp 2, or drop --tp"},
    {"Context", "--zero 3 --cp 2", "cannot be combined with --cp 2; use --zero 2 with --cp 2, or drop --cp"},
    {"Expert", "--zero 3 --ep 4", "cannot be combined with --ep 4; use --zero 2 with --ep 4, or drop --ep"},
    {"PipelineAndTensor", "--zero 3 --tp 2 --pp 2", "cannot be combined with --tp 2"},
    {"StageAboveThree", "--zero 4", "--zero must be 0, 1, 2 or 3, got 4"},
};

INSTANTIATE_TEST_SUITE_P(Combinations, Zero3Refuses, ::testing::ValuesIn(kRefused),
                         [](const ::testing::TestParamInfo<Refused>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace tessera
