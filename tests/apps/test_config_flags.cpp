// --config files and flags as a user scripting runs writes them: each TOML value must have its flag's
// type, unknown keys and flags name the nearest known one, errors name the file and line, keys given
// on the command line too are still checked and the override is said, and numbers on the command line
// read as written (no octal, no empty value).
#include <gtest/gtest.h>

#include <algorithm>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

struct Outcome {
  int exit_code;
  std::string stderr_text;
};

// Runs tessera with `args` in `cwd`, keeping only stderr.
Outcome tessera_in(const fs::path& cwd, const std::string& args) {
  const testing::CommandResult r = testing::run_command("{ cd " + cwd.string() + " && OMP_NUM_THREADS=1 " +
                                                        std::string(TESSERA_EXE) + " " + args + " > /dev/null; }");
  return {r.exit_code, r.output};
}

class ConfigFlags : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = testing::scratch_dir();
    shard = testing::write_random_shard(dir, 4096, 256, 3);
    train = "train --model gpt2-tiny --quiet --device cpu --batch-size 2 --seq-len 16 --train-data " + shard.string() +
            " --out-dir " + (dir / "run").string();
  }
  // The one error line of `args` (exit non-zero, no crash), or a failure.
  std::string error_of(const std::string& args) {
    const Outcome o = tessera_in(dir, args);
    EXPECT_GE(o.exit_code, 1) << args;
    EXPECT_LT(o.exit_code, 124) << "crashed: " << args;
    EXPECT_EQ(std::count(o.stderr_text.begin(), o.stderr_text.end(), '\n'), 1) << o.stderr_text;
    EXPECT_TRUE(o.stderr_text.starts_with("tessera: error: ")) << o.stderr_text;
    return o.stderr_text;
  }
  std::string config_error(const std::string& text, const std::string& flags = " --steps 1") {
    testing::write_text(dir / "c.toml", text);
    return error_of(train + flags + " --config " + (dir / "c.toml").string());
  }
  fs::path dir, shard;
  std::string train;
};

TEST_F(ConfigFlags, EachValueMustHaveItsFlagsType) {
  const struct {
    const char* text;
    const char* message;
  } cases[] = {
      {"lr = 0.001\nwarmup = \"3\"\n", "line 2: key 'warmup' takes a whole number, not the string '3': write it without quotes"},
      {"warmup = 3.5\n", "line 1: key 'warmup' takes a whole number, not the float 3.5"},
      {"warmup = 3.0\n", "line 1: key 'warmup' takes a whole number: write warmup = 3, not the float 3.0"},
      {"warmup = [1, 2]\n", "line 1: key 'warmup' takes one value, not an array of 2; write warmup = <value>"},
      {"warmup = {a = 1}\n", "line 1: key 'warmup' takes a whole number, not a table"},
      {"warmup = 1979-05-27\n", "line 1: key 'warmup' takes a whole number, not a date or time"},
      {"lr = \"1e-3\"\n", "line 1: key 'lr' takes a number, not the string '1e-3': write it without quotes"},
      {"lr = true\n", "line 1: key 'lr' takes a number, not the boolean true"},
      {"lr-schedule = 5\n", "line 1: key 'lr-schedule' takes a string, not the integer 5: write it in quotes"},
      {"resume = \"true\"\n", "line 1: key 'resume' is a switch: write resume = true or resume = false (no quotes), not "
                              "the string 'true'"},
      {"resume = 1\n", "key 'resume' is a switch: write resume = true or resume = false (no quotes), not the integer 1"},
      {"\n\nresume = [true]\n", "line 3: key 'resume' takes one value, not an array of 1"},
      {"pipeline-boundaries = []\n", "key 'pipeline-boundaries' is an empty array"},
      {"threads = 4294967297\n", "key 'threads': '4294967297' is outside --threads's range"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.text);
    const std::string error = config_error(c.text);
    EXPECT_TRUE(testing::contains(error, "--config '" + (dir / "c.toml").string() + "', ")) << error;
    EXPECT_TRUE(testing::contains(error, c.message)) << error;
  }
}

// A config refused is a command line refused: exit 2, as for a bad flag, which `tessera launch` does
// not restart (it restarted exit 1 until it ran out of restarts).
TEST_F(ConfigFlags, ARefusedConfigExitsTwoAndIsNotRestarted) {
  testing::write_text(dir / "c.toml", "stepps = 2\n");
  EXPECT_EQ(tessera_in(dir, train + " --config c.toml").exit_code, 2);
  EXPECT_EQ(tessera_in(dir, "eval --checkpoint x").exit_code, 2);  // a required flag missing
  const testing::CommandResult r = testing::run_command("cd " + dir.string() + " && " + std::string(TESSERA_EXE) +
                                                        " launch --max-restarts 2 --restart-delay 0 -- " +
                                                        std::string(TESSERA_EXE) + " " + train + " --config c.toml 2>&1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(testing::contains(r.output, "restart 1 of 2")) << r.output;
}

// A key the command line also gives is checked all the same: the file is wrong whatever the flags say.
TEST_F(ConfigFlags, OverriddenKeysAreCheckedToo) {
  EXPECT_TRUE(testing::contains(config_error("steps = [1, 2]\n", " --steps 1"), "key 'steps' takes one value"));
  EXPECT_TRUE(testing::contains(config_error("stepps = 2\n", " --steps 1"), "unknown key 'stepps'"));
}

TEST_F(ConfigFlags, UnknownKeysNameTheNearestFlag) {
  EXPECT_TRUE(testing::contains(config_error("lr = 0.01\nlr-schedul = \"wsd\"\n"),
                                "line 2: unknown key 'lr-schedul' (did you mean 'lr-schedule'?); keys are the flag "
                                "names of 'train'"));
  EXPECT_TRUE(testing::contains(config_error("stepps = 2\n"), "unknown key 'stepps' (did you mean 'steps'?)"));
  EXPECT_TRUE(testing::contains(config_error("zzzz = 2\n"), "unknown key 'zzzz'; keys are the flag names"));
  EXPECT_TRUE(testing::contains(config_error("help = true\n"), "unknown key 'help'"));
  EXPECT_TRUE(testing::contains(config_error("[train]\nsteps = 2\n"),
                                "line 1: unknown key 'train' (a [table]: a config holds flat `flag = value` lines"));
  EXPECT_TRUE(testing::contains(config_error("checkpoint = \"x\"\n"), "unknown key 'checkpoint'"));  // eval's, not train's
}

TEST_F(ConfigFlags, TwoKeysForOneFlagOrTwoFilesAreRefused) {
  EXPECT_TRUE(testing::contains(config_error("sequence-parallel = true\nno-sequence-parallel = true\n"),
                                "line 2: key 'no-sequence-parallel' sets the same flag as 'sequence-parallel' on line 1"));
  testing::write_text(dir / "a.toml", "lr = 0.01\n");
  testing::write_text(dir / "b.toml", "lr = 0.02\n");
  EXPECT_TRUE(testing::contains(error_of(train + " --steps 1 --config a.toml --config b.toml"),
                                "--config given 2 times ('a.toml', 'b.toml'); give one file"));
}

// An error raised once the flags are read (by the trainer's own checks) says which key of which file set
// the flag it names.
TEST_F(ConfigFlags, LaterErrorsNameTheKeysLine) {
  EXPECT_TRUE(testing::contains(config_error("lr = 0.01\nwarmup = -4\n"),
                                "(from --config: warmup on line 2 of '" + (dir / "c.toml").string() + "')"));
  EXPECT_TRUE(testing::contains(config_error("lr-schedule = \"cosinee\"\n"),
                                "unknown schedule 'cosinee'; use constant, cosine, linear or wsd (from --config: "
                                "lr-schedule on line 1"));
}

// Flags win, a note on stderr says which, and relative paths in the file are read from the current
// directory, as the same paths on the command line are (configs/gpt2-124m.toml's data/... from the
// repository root).
TEST_F(ConfigFlags, FlagsWinAndSaySoPathsAreRelativeToTheCurrentDirectory) {
  testing::write_text(dir / "c.toml", "steps = 3\nlr = 0.002\nlr-schedule = \"constant\"\ntrain-data = \"" +
                                          shard.filename().string() + "\"\nout-dir = \"relative-run\"\n");
  const Outcome o = tessera_in(dir, "train --model gpt2-tiny --quiet --device cpu --batch-size 2 --seq-len 16 --config "
                                    "c.toml --steps 2");
  ASSERT_EQ(o.exit_code, 0) << o.stderr_text;
  EXPECT_EQ(o.stderr_text, "tessera: note: flags on the command line override keys of 'c.toml': --steps (line 1)\n");
  const auto lines = testing::read_metrics(dir / "relative-run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 2u);  // --steps 2, not the file's 3
  EXPECT_NEAR(lines[1]["lr"].get<double>(), 0.002, 1e-9);  // the file's, constant (fp32)
}

TEST_F(ConfigFlags, NumbersOnTheCommandLineReadAsWritten) {
  EXPECT_TRUE(testing::contains(error_of(train + " --steps 010"),
                                "--steps: '010' starts with a zero, which would read as octal; write 10"));
  EXPECT_TRUE(testing::contains(error_of(train + " --steps ''"), "--steps: the value is empty; give a number"));
  EXPECT_TRUE(testing::contains(error_of(train + " --steps 1k"), "--steps: '1k' is not a whole number"));
  EXPECT_TRUE(testing::contains(error_of(train + " --steps 1e2"), "--steps: '1e2' is not a whole number"));
  EXPECT_TRUE(testing::contains(error_of(train + " --lr 1,5"), "--lr: '1,5' is not a number (write a decimal point"));
  EXPECT_TRUE(testing::contains(error_of(train + " --lr ''"), "--lr: the value is empty"));
  // Spaces around a number and hex are fine: --steps ' 2 ' and --steps=0x2 run two steps.
  for (const char* steps : {" --steps ' 2 '", " --steps=0x2"}) {
    fs::remove_all(dir / "run");
    const Outcome o = tessera_in(dir, train + steps);
    ASSERT_EQ(o.exit_code, 0) << o.stderr_text;
    EXPECT_EQ(testing::read_metrics(dir / "run" / "metrics.jsonl").size(), 2u) << steps;
  }
}

TEST_F(ConfigFlags, StrayArgumentsNameTheFlagMeant) {
  EXPECT_TRUE(testing::contains(error_of(train + " --step 3"),
                                "unknown flag '--step' of 'tessera train'; did you mean --steps?"));
  EXPECT_TRUE(testing::contains(error_of(train + " --Steps=3"), "did you mean --steps?"));
  EXPECT_TRUE(testing::contains(error_of("eval --batchs 3"), "unknown flag '--batchs' of 'tessera eval'; did you mean --batches?"));
  EXPECT_TRUE(testing::contains(error_of("plan memory --model gpt2-tiny --zzzz"),
                                "unknown flag '--zzzz' of 'tessera plan memory'; see 'tessera plan memory --help'"));
  EXPECT_TRUE(testing::contains(error_of(train + " --quiet true"),
                                "unexpected argument 'true': --quiet is a switch that takes no value; write --quiet "
                                "alone to turn it on (or --quiet=false to turn it off)"));
  EXPECT_TRUE(testing::contains(error_of(train + " 100"), "unexpected argument '100' to 'tessera train', which takes no "
                                                          "positional arguments"));
}

// Every subcommand that takes --config holds it to the same rules.
TEST_F(ConfigFlags, EverySubcommandChecksItsKeys) {
  testing::write_text(dir / "c.toml", "max-new-tokens = \"5\"\n");
  EXPECT_TRUE(testing::contains(error_of("generate --checkpoint x --config c.toml"),
                                "line 1: key 'max-new-tokens' takes a whole number"));
  testing::write_text(dir / "c.toml", "in = [\"a.txt\", 3]\n");
  EXPECT_TRUE(testing::contains(error_of("tokenize --config c.toml"), "key 'in' takes a string, not the integer 3"));
  testing::write_text(dir / "c.toml", "vocab-size = 300\nvocabsize = 300\n");
  EXPECT_TRUE(testing::contains(error_of("tokenizer-train --config c.toml"), "line 2: unknown key 'vocabsize' (did you "
                                                                              "mean 'vocab-size'?)"));
  testing::write_text(dir / "c.toml", "dtype = \"bf16\"\nto-hf = 1\n");
  EXPECT_TRUE(testing::contains(error_of("convert --config c.toml"), "line 2: key 'to-hf' takes a string"));
  testing::write_text(dir / "c.toml", "batches = 2\neval-batches = 3\n");
  EXPECT_TRUE(testing::contains(error_of("eval --config c.toml"),
                                "line 2: key 'eval-batches' sets the same flag as 'batches' on line 1"));
}

}  // namespace
}  // namespace tessera
