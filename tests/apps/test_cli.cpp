// The tessera binary on bad input: every case ends with a non-zero exit and exactly one line on
// stderr that names the flag or file at fault. Plus the TOML config path and a short real run.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "core/build_info.h"
#include "core/cuda/device.h"
#include "data/token_shard.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/utf8_stream.h"

namespace tessera {
namespace {

struct Outcome {
  int exit_code;
  std::string stderr_text;
};

// Runs tessera with `args`, keeping only stderr.
Outcome tessera_run(const std::string& args) {
  testing::CommandResult r = testing::run_command("{ OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " " + args +
                                                  " > /dev/null; }");
  return {r.exit_code, r.output};
}

void expect_one_line_error(const std::string& args, const std::string& needle) {
  Outcome o = tessera_run(args);
  EXPECT_NE(o.exit_code, 0) << args;
  EXPECT_LT(o.exit_code, 128) << "crashed: " << args;
  ASSERT_FALSE(o.stderr_text.empty()) << args;
  EXPECT_EQ(std::count(o.stderr_text.begin(), o.stderr_text.end(), '\n'), 1) << o.stderr_text;
  EXPECT_NE(o.stderr_text.find("tessera: error: "), std::string::npos) << o.stderr_text;
  EXPECT_NE(o.stderr_text.find(needle), std::string::npos) << "'" << needle << "' not in: " << o.stderr_text;
}

class CliBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = testing::scratch_dir();
    shard = testing::write_random_shard(dir, 4096, 256, 3).string();
    base = "train --model gpt2-tiny --quiet --steps 2 --batch-size 2 --seq-len 16 --out-dir " + (dir / "run").string() +
           " --train-data " + shard;
  }
  // A Hugging Face folder holding only config.json for a gpt2-tiny-sized model with `heads` heads.
  std::filesystem::path hf_folder(int heads) {
    std::filesystem::path hf = dir / "hf";
    std::filesystem::create_directories(hf);
    testing::write_text(hf / "config.json", R"({"model_type": "gpt2", "n_layer": 2, "n_head": )" + std::to_string(heads) +
                                                R"(, "n_embd": 32, "vocab_size": 256, "n_positions": 64})");
    return hf;
  }
  std::filesystem::path dir;
  std::string shard, base;
};

// The JSON line of a two-step bench train of gpt2-tiny on the CPU with `flags`.
nlohmann::json bench_train_json(const std::string& flags) {
  const testing::CommandResult r = testing::run_command(
      "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) +
      " bench train --model gpt2-tiny --micro-batch-size 2 --seq-len 16 --steps 2 --warmup 1 --device cpu --json " +
      flags);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  const size_t at = r.output.find('{');
  return at == std::string::npos ? nlohmann::json::object() : nlohmann::json::parse(r.output.substr(at));
}

}  // namespace

TEST_F(CliBadInput, UnknownFlag) { expect_one_line_error(base + " --learning-rate 3", "--learning-rate"); }

TEST_F(CliBadInput, MissingData) {
  expect_one_line_error("train --model gpt2-tiny --seq-len 16 --train-data " + (dir / "nothing_*.bin").string(),
                        "--train-data");
}

TEST_F(CliBadInput, ShardWithWrongMagic) {
  std::filesystem::path bad = dir / "bad.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 12345;
  std::ofstream(bad, std::ios::binary).write(reinterpret_cast<char*>(header.data()), 1024);
  expect_one_line_error(base + " --train-data " + bad.string(), "bad.bin");
}

TEST_F(CliBadInput, ShardWithWrongVersion) {
  std::filesystem::path bad = dir / "v3.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 3;
  std::ofstream(bad, std::ios::binary).write(reinterpret_cast<char*>(header.data()), 1024);
  expect_one_line_error(base + " --train-data " + bad.string(), "v3.bin");
}

TEST_F(CliBadInput, ShardShorterThanItsHeader) {
  std::filesystem::path bad = dir / "short.bin";
  std::vector<int32_t> header(256, 0);
  header[0] = 20240520, header[1] = 2, header[2] = 1000;
  std::ofstream(bad, std::ios::binary).write(reinterpret_cast<char*>(header.data()), 1024 + 40);
  expect_one_line_error(base + " --train-data " + bad.string(), "short.bin");
}

TEST_F(CliBadInput, TokenIdBeyondTheVocabulary) {
  std::filesystem::path wide = dir / "wide";
  std::filesystem::create_directories(wide);
  std::string big = testing::write_random_shard(wide, 4096, 1000, 5).string();
  expect_one_line_error(base + " --train-data " + big, "vocab");
}

TEST_F(CliBadInput, ZeroAndNegativeSizes) {
  expect_one_line_error(base + " --batch-size 0", "--batch-size");
  expect_one_line_error(base + " --steps -3", "--steps");
  expect_one_line_error(base + " --seq-len 0", "--seq-len");
  expect_one_line_error(base + " --micro-batch-size -1", "--micro-batch-size");
}

TEST_F(CliBadInput, MicroBatchThatDoesNotDivideTheBatch) {
  expect_one_line_error(base + " --batch-size 6 --micro-batch-size 4", "--micro-batch-size");
}

TEST_F(CliBadInput, SequenceLongerThanTheContext) { expect_one_line_error(base + " --seq-len 65", "--seq-len"); }

TEST_F(CliBadInput, HeadsThatDoNotDivideTheWidth) {
  std::filesystem::path hf = hf_folder(3);
  expect_one_line_error(base + " --init-from " + hf.string(), "num_heads");
}

TEST_F(CliBadInput, BrokenConfigJson) {
  std::filesystem::path hf = hf_folder(2);
  testing::write_text(hf / "config.json", "{\"n_layer\": 2,");
  expect_one_line_error(base + " --init-from " + hf.string(), "config.json");
}

TEST_F(CliBadInput, TruncatedSafetensors) {
  std::filesystem::path hf = hf_folder(2);
  testing::write_text(hf / "model.safetensors", std::string("\x40\x00\x00\x00\x00\x00\x00\x00{\"a\":", 13));
  expect_one_line_error(base + " --init-from " + hf.string(), "model.safetensors");
}

TEST_F(CliBadInput, BrokenToml) {
  std::filesystem::path toml = dir / "run.toml";
  testing::write_text(toml, "lr = 0.001\nsteps = = 3\n");
  expect_one_line_error(base + " --config " + toml.string(), "run.toml");
}

TEST_F(CliBadInput, UnknownTomlKey) {
  std::filesystem::path toml = dir / "run.toml";
  testing::write_text(toml, "learning_rate = 0.001\n");
  expect_one_line_error(base + " --config " + toml.string(), "learning_rate");
}

TEST_F(CliBadInput, NonFiniteLossNamesTheStep) {
  expect_one_line_error(base + " --steps 30 --lr 1e30 --grad-clip 0 --lr-schedule constant", "step ");
}

TEST_F(CliBadInput, ConfigThatIsNotAFile) {
  expect_one_line_error(base + " --config " + dir.string(), "not a regular file");
  expect_one_line_error(base + " --config /dev/null", "not a regular file");
  expect_one_line_error(base + " --config " + (dir / "missing.toml").string(), "no such file");
}

TEST_F(CliBadInput, SamplingFlagsOutOfRange) {
  const std::string generate = "generate --checkpoint " + (dir / "none").string();
  expect_one_line_error(generate + " --temperature nan", "--temperature: must be a finite number, got 'nan'");
  expect_one_line_error(generate + " --temperature -1", "--temperature must be a finite number >= 0");
  expect_one_line_error(generate + " --temperature inf", "--temperature: must be a finite number, got 'inf'");
  expect_one_line_error(generate + " --top-k -1", "--top-k must not be negative");
  expect_one_line_error(generate + " --top-p 0", "--top-p must be in (0, 1]");
  expect_one_line_error(generate + " --top-p 1.5", "--top-p must be in (0, 1]");
  expect_one_line_error(generate + " --top-p nan", "--top-p");
  expect_one_line_error(generate + " --max-new-tokens -5", "--max-new-tokens must not be negative");
}

TEST_F(CliBadInput, AbsurdThreadCount) { expect_one_line_error(base + " --threads 100000", "--threads 100000"); }

TEST_F(CliBadInput, DeviceAndPrecisionFlags) {
  expect_one_line_error(base + " --device gpu", "--device must be auto, cuda or cpu");
  expect_one_line_error(base + " --device cpu --dtype bf16", "--dtype bf16 computes on the GPU only");
  expect_one_line_error(base + " --device cpu --dtype fp16", "--dtype fp16 computes on the GPU only");
  expect_one_line_error(base + " --loss-scaling always", "--loss-scaling must be auto, dynamic or off");
  expect_one_line_error(base + " --dtype half", "--dtype must be auto, fp32, bf16 or fp16");
  expect_one_line_error(base + " --attention-kernel flash", "unknown attention kernel 'flash': valid kernels are");
  expect_one_line_error("bench train --model gpt2-tiny --attention-kernel flash",
                        "unknown attention kernel 'flash': valid kernels are");
  expect_one_line_error("bench train --model gpt2-tiny --fp8 e5m2", "--fp8 must be off, hybrid");
  expect_one_line_error("bench train --model gpt2-tiny --seq-len 16 --device cpu --document-length -1",
                        "--document-length -1 must be 0");
  // Checked before --device auto's notice, so the error is the only line.
  expect_one_line_error("bench train --model gpt2-tiny --steps 0", "--steps must be positive");
  expect_one_line_error("bench train --model gpt2-tiny --seq-len 65", "exceeds the model's context of 64");
  expect_one_line_error("bench train --model gpt2-tiny --steps 9223372036854775807 --warmup 1",
                        "is past a 64-bit count of steps");
  expect_one_line_error("bench train --model gpt2-tiny --matmul-tuning 4294967298", "--matmul-tuning 4294967298: time");
  expect_one_line_error(base + " --matmul-tuning 0", "--matmul-tuning 0: time between 1");
  expect_one_line_error(base + " --tp 2 --matmul-tuning 4", "--matmul-tuning 4 times cuBLASLt's algorithms on each rank");
  // The default run (no data flags) checks its flags before it tokenizes the corpus into its folder.
  const std::filesystem::path demo = dir / "demo";
  expect_one_line_error("train --zero 7 --out-dir " + demo.string(), "--zero must be 0, 1, 2 or 3");
  EXPECT_FALSE(std::filesystem::exists(demo / "data"));
  // Refusals of the configuration exit 2, as a bad flag does, so that tessera launch does not restart them.
  for (const std::string flag : {"--dtype xyz", "--lr-schedule cosinus"}) {
    expect_one_line_error("train " + flag + " --out-dir " + demo.string(), flag.substr(0, flag.find(' ')));
    EXPECT_EQ(tessera_run("train " + flag + " --out-dir " + demo.string()).exit_code, 2) << flag;
  }
  EXPECT_FALSE(std::filesystem::exists(demo));
  // A data flag without --train-data (or an empty one, an unset $DATA) is a mistake, not the demo.
  expect_one_line_error("train --val-data 'x/val_*.bin' --out-dir " + demo.string(),
                        "--val-data was given without --train-data");
  expect_one_line_error("train --tokenizer tok.json --out-dir " + demo.string(),
                        "--tokenizer was given without --train-data");
  expect_one_line_error("train --train-data '' --out-dir " + demo.string(), "--train-data is empty");
  EXPECT_FALSE(std::filesystem::exists(demo / "data"));
  expect_one_line_error(base + " --device-comm gloo", "--device-comm must be auto, nccl or host");
  expect_one_line_error("convert --checkpoint a --to-hf b --from-hf c --out d",
                        "convert: give either --checkpoint and --to-hf (export) or --from-hf and --out (import), not both");
  expect_one_line_error("convert --from-hf c --out d --chat-template chatml",
                        "--chat-template sets an export's template (with --to-hf)");
}

TEST_F(CliBadInput, CudaWithoutAGpuSaysWhy) {
  if (cuda_device_count() > 0) GTEST_SKIP() << "this machine has a GPU";
  expect_one_line_error(base + " --device cuda", "--device cuda: ");
  expect_one_line_error("bench train --model gpt2-tiny --seq-len 16 --device cuda", "--device cuda: ");
}

// bench train on the CPU: one JSON line with the figures a GPU run reports (MFU needs a peak there).
TEST(Cli, BenchTrainReportsThroughputAsJson) {
  const nlohmann::json j = bench_train_json("--peak-tflops 1");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["device"], "cpu");
  EXPECT_EQ(j["dtype"], "fp32");
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_GT(j["forward_ms"].get<double>(), 0.0);
  EXPECT_NEAR(j["mfu"].get<double>(), j["tokens_per_s"].get<double>() * j["flops_per_token"].get<double>() / 1e12,
              1e-9);
  EXPECT_GT(j["final_loss"].get<double>(), 5.0);  // about ln(256) for a fresh gpt2-tiny
  EXPECT_EQ(j["fp8"], "off");
  EXPECT_EQ(j["deterministic"], true);
  EXPECT_TRUE(j["attention_used"].is_null()) << "reported for 16-bit GPU runs only";
  // The commit the binary was built from (cmake/build_commit.cmake), which A/B runs tell apart by.
  EXPECT_EQ(j["commit"], std::string(build_commit()));
  EXPECT_TRUE(std::regex_match(std::string(build_commit()), std::regex("[0-9a-f]{7}\\+?|unknown"))) << build_commit();
}

// bench train --nondeterministic is recorded; the CPU's kernels sum in one order either way, so the loss
// is the same to the bit.
TEST(Cli, BenchTrainNondeterministicKeepsTheCpuBits) {
  const nlohmann::json fixed = bench_train_json(""), free = bench_train_json("--nondeterministic");
  ASSERT_FALSE(fixed.empty());
  ASSERT_FALSE(free.empty());
  EXPECT_EQ(free["deterministic"], false);
  EXPECT_EQ(free["final_loss"], fixed["final_loss"]);
}

// bench train --fp8: the same figures, the recipe recorded, the loss still a fresh model's.
TEST(Cli, BenchTrainWithFp8) {
  const nlohmann::json j = bench_train_json("--fp8 hybrid");
  ASSERT_FALSE(j.empty());
  EXPECT_EQ(j["fp8"], "hybrid");
  EXPECT_GT(j["tokens_per_s"].get<double>(), 0.0);
  EXPECT_NEAR(j["final_loss"].get<double>(), std::log(256.0), 0.3);
}

// bench train --document-length: the windows packed with documents under the document mask; the
// same tokens as the causal run, so only the mask changes the loss.
TEST(Cli, BenchTrainWithPackedDocuments) {
  const nlohmann::json causal = bench_train_json(""), packed = bench_train_json("--document-length 4");
  ASSERT_FALSE(causal.empty());
  ASSERT_FALSE(packed.empty());
  EXPECT_EQ(causal["document_length"], 0);
  EXPECT_EQ(packed["document_length"], 4);
  EXPECT_GT(packed["tokens_per_s"].get<double>(), 0.0);
  EXPECT_NE(packed["final_loss"].get<double>(), causal["final_loss"].get<double>());
  EXPECT_EQ(bench_train_json("--document-length 16")["final_loss"], causal["final_loss"])
      << "one document as long as the window is the causal mask";
}

// A key naming a negated flag means what the flag means: no-sequence-parallel = true turns sequence
// parallelism off (it used to keep it on), so the run stops on the world size as with the flags, not on
// the sequence length; a value a flag cannot read is refused naming the key.
TEST(Cli, TomlConfigNegatedFlagsMeanWhatTheFlagsMean) {
  auto dir = testing::scratch_dir();
  const std::filesystem::path toml = dir / "run.toml";
  const std::string flags = "--model gpt2-tiny --tp 2 --seq-len 15 --train-data /nonexistent/*.bin";
  testing::write_text(toml, "no-sequence-parallel = true\nnondeterministic = true\nno-overlap = true\n");
  const Outcome from_file = tessera_run("train " + flags + " --config " + toml.string());
  const Outcome from_flags = tessera_run("train " + flags + " --no-sequence-parallel --nondeterministic --no-overlap");
  EXPECT_NE(from_file.exit_code, 0);
  EXPECT_EQ(from_file.stderr_text, from_flags.stderr_text);
  EXPECT_TRUE(testing::contains(from_file.stderr_text, "does not divide the world size")) << from_file.stderr_text;
  testing::write_text(toml, "nondeterministic = \"sometimes\"\n");
  const Outcome bad = tessera_run("train " + flags + " --config " + toml.string());
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_TRUE(testing::contains(bad.stderr_text, "key 'nondeterministic'")) << bad.stderr_text;
}

// A subcommand's required flags may come from --config: checked once the file's keys are in, so a
// missing one names the key too, and a broken file reports its syntax error, not a missing flag.
TEST(Cli, TomlConfigGivesRequiredFlags) {
  auto dir = testing::scratch_dir();
  const std::filesystem::path toml = dir / "eval.toml";
  const std::string checkpoint = (dir / "no-such-run").string();
  testing::write_text(toml, "checkpoint = \"" + checkpoint + "\"\nval-data = \"" + (dir / "val_*.bin").string() + "\"\n");
  const Outcome given = tessera_run("eval --config " + toml.string());
  EXPECT_NE(given.exit_code, 0);
  EXPECT_FALSE(testing::contains(given.stderr_text, "is required")) << given.stderr_text;
  EXPECT_TRUE(testing::contains(given.stderr_text, "no-such-run")) << given.stderr_text;
  testing::write_text(toml, "tokenizer = \"" + (dir / "tok.json").string() + "\"\nin = [\"" + (dir / "a.txt").string() +
                                "\"]\n");
  expect_one_line_error("tokenize --config " + toml.string(),
                        "--out is required (on the command line, or as the key 'out' of a --config file)");
  expect_one_line_error("tokenize --in a.txt --out x", "--tokenizer is required");
  // eval needs one of two flags, whichever way they come.
  testing::write_text(toml, "checkpoint = \"" + checkpoint + "\"\n");
  expect_one_line_error("eval --config " + toml.string(),
                        "eval: give --val-data (token shards: the loss) or --choices (a multiple-choice file");
  testing::write_text(toml, "in = [\n");
  expect_one_line_error("tokenize --config " + toml.string(), "eval.toml': line 1, column 8");
}

TEST(Cli, TomlConfigWithFlagOverrides) {
  auto dir = testing::scratch_dir();
  std::string shard = testing::write_random_shard(dir, 4096, 256, 3).string();
  std::filesystem::path toml = dir / "run.toml";
  testing::write_text(toml, "model = \"gpt2-tiny\"\nsteps = 5\nbatch-size = 2\nseq-len = 16\nlr = 0.001\n"
                            "lr-schedule = \"constant\"\n"
                            "train-data = \"" + shard + "\"\nout-dir = \"" + (dir / "run").string() + "\"\n");
  Outcome o = tessera_run("train --config " + toml.string() + " --steps 3 --quiet");
  ASSERT_EQ(o.exit_code, 0) << o.stderr_text;
  auto lines = testing::read_metrics(dir / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 3u);  // the flag won over the file
  EXPECT_NEAR(lines[0]["lr"].get<double>(), 0.001, 1e-9);  // from the file
}

// Re-running a finished run says so and succeeds; shape flags equal to the checkpoint's are fine.
TEST_F(CliBadInput, ResumingAFinishedRunSaysSo) {
  ASSERT_EQ(tessera_run(base).exit_code, 0);
  const testing::CommandResult r =
      testing::run_command("OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " " + base + " --resume --layers 2");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "already finished at step 2 (--steps 2)")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "checkpoint: " + (dir / "run" / "ckpt-00000002").string())) << r.output;
  EXPECT_FALSE(testing::contains(r.output, "loss 0.0000")) << r.output;
}

// A model vocabulary larger than the tokenizer's: samples draw only ids the tokenizer can decode
// (the closing sample used to fail the run after all its work).
TEST_F(CliBadInput, TokenizerSmallerThanTheModelSamplesItsOwnTokens) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
  testing::write_text(dir / "corpus.txt", text);
  const std::string exe = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);
  ASSERT_EQ(testing::run_command(exe + " tokenizer-train --vocab-size 300 --in " + (dir / "corpus.txt").string() +
                                 " --out " + (dir / "tok.json").string()).exit_code, 0);
  const testing::CommandResult r =
      testing::run_command(exe + " " + base + " --tokenizer " + (dir / "tok.json").string() + " --vocab-size 4000");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--- sample ---")) << r.output;
}

TEST_F(CliBadInput, DataMixtureFlags) {
  const std::string run = "train --model gpt2-tiny --quiet --steps 2 --batch-size 2 --seq-len 16 --out-dir " +
                          (dir / "run").string() + " --train-data ";
  expect_one_line_error(run + "'" + shard + "," + shard + "'", "'" + shard + "' has no weight");
  expect_one_line_error(run + "'0:" + shard + ",1:" + shard + "'", "must be a positive number");
  expect_one_line_error(run + "'0.5:" + shard + ",0.5:" + (dir / "none_*.bin").string() + "'",
                        "no file matches '" + (dir / "none_*.bin").string() + "'");
  expect_one_line_error(run + shard + " --val-data '" + shard + ",x'", "--val-data: '" + shard + "' has no weight");
}

// A weighted mixture trains, evaluates on a mixture, and the run's start says what each source gives.
TEST(Cli, TrainsOnAWeightedMixture) {
  const auto dir = testing::scratch_dir();
  std::filesystem::create_directories(dir / "web");
  std::filesystem::create_directories(dir / "code");
  const std::string web = testing::write_random_shard(dir / "web", 4096, 256, 3).string();
  const std::string code = testing::write_random_shard(dir / "code", 2048, 256, 4).string();
  const std::string mixture = "'3:" + web + ",1:" + code + "'";
  const testing::CommandResult r = testing::run_command(
      "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) +
      " train --model gpt2-tiny --device cpu --steps 4 --batch-size 4 --seq-len 16 --eval-every 2 --out-dir " +
      (dir / "run").string() + " --train-data " + mixture + " --val-data " + mixture);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--train-data mixes 2 sources:")) << r.output;
  // 4 steps of 4 sequences: 12 of web's 255 windows and 4 of code's 127.
  EXPECT_TRUE(testing::contains(r.output, " 75.0% of the sequences, 4096 tokens (255 sequences), 0.05 epochs in 4 batches: " +
                                          web)) << r.output;
  EXPECT_TRUE(testing::contains(r.output, " 25.0% of the sequences, 2048 tokens (127 sequences), 0.03 epochs in 4 batches: " +
                                          code)) << r.output;
  // Validation: each source alone, and their weighted mean.
  const auto lines = testing::read_metrics(dir / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 6u);  // 4 steps, evaluations after steps 2 and 4
  ASSERT_TRUE(lines[2].contains("val_loss_by_source")) << lines[2];
  const double web_loss = lines[2]["val_loss_by_source"][web], code_loss = lines[2]["val_loss_by_source"][code];
  EXPECT_NEAR(lines[2]["val_loss"].get<double>(), 0.75 * web_loss + 0.25 * code_loss, 1e-5);
  EXPECT_NE(web_loss, code_loss);
  const std::string svg = testing::read_text(dir / "run" / "loss.svg");
  for (const std::string& source : {web, code}) EXPECT_TRUE(testing::contains(svg, ">" + source + "</text>")) << source;
  // eval reports each source and the mean the same way.
  const testing::CommandResult eval = testing::run_command(
      "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " eval --checkpoint " + (dir / "run").string() +
      " --seq-len 16 --batch-size 4 --batches 2 --val-data " + mixture);
  ASSERT_EQ(eval.exit_code, 0) << eval.output;
  EXPECT_TRUE(testing::contains(eval.output, web + ": val_loss ")) << eval.output;
  EXPECT_TRUE(testing::contains(eval.output, code + ": val_loss ")) << eval.output;
  EXPECT_TRUE(testing::contains(eval.output, ": the sources' weighted mean")) << eval.output;
}

// Resuming on another mix of data (annealing) is allowed and said.
TEST_F(CliBadInput, ResumingOnOtherDataSaysSo) {
  ASSERT_EQ(tessera_run(base).exit_code, 0);
  std::filesystem::copy_file(shard, dir / "other.bin");
  const std::string mixed = "'0.5:" + shard + ",0.5:" + (dir / "other.bin").string() + "'";
  const testing::CommandResult r = testing::run_command(
      "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " train --model gpt2-tiny --steps 3 --batch-size 2 --seq-len 16 "
      "--resume --out-dir " + (dir / "run").string() + " --train-data " + mixed);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--train-data differs from the checkpoint's ('" + shard +
                                          "'): batches from 2 on are drawn from the new data")) << r.output;
}

// JSON lines end to end: a tokenizer trained on them, shards made from them with a progress line,
// and a bad line is one error naming the file and the line.
TEST_F(CliBadInput, TokenizesJsonLines) {
  std::string jsonl;
  for (int i = 0; i < 200; ++i) jsonl += "{\"text\": \"the quick brown fox " + std::to_string(i) + "\\n\", \"id\": 1}\n";
  testing::write_text(dir / "docs.jsonl", jsonl);
  const std::string exe = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);
  testing::CommandResult r = testing::run_command(exe + " tokenizer-train --vocab-size 300 --in " +
                                                  (dir / "docs.jsonl").string() + " --out " + (dir / "tok.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(exe + " tokenize --tokenizer " + (dir / "tok.json").string() + " --in " +
                           (dir / "docs.jsonl").string() + " --out " + (dir / "data").string() + " --val-every 10");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "100.0% of ")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "200 documents -> ")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "data" / "val_000000.bin"));
  testing::write_text(dir / "bad.jsonl", jsonl + "not json\n");
  expect_one_line_error("tokenize --quiet --tokenizer " + (dir / "tok.json").string() + " --in " +
                            (dir / "bad.jsonl").string() + " --out " + (dir / "bad").string(),
                        "bad.jsonl' line 201: not a JSON object");
}

// Supervised fine-tuning end to end: prompt/completion JSON lines tokenized with loss masks, a run
// that learns the completions (all the same answer after varied prompts: the mean over the targets
// falls far below the untrained one), eval that counts the targets, and a misused flag.
TEST_F(CliBadInput, FineTunesOnPromptsAndCompletions) {
  std::string jsonl, vocabulary;
  for (int i = 0; i < 300; ++i) {
    const std::string prompt = "question " + std::to_string(i * 7919 % 1000) + " is";
    jsonl += nlohmann::json{{"prompt", prompt}, {"completion", " fine"}}.dump() + "\n";
    vocabulary += prompt + " fine\n";
  }
  testing::write_text(dir / "sft.jsonl", jsonl);
  testing::write_text(dir / "vocab.txt", vocabulary);
  const std::string exe = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);
  testing::CommandResult r = testing::run_command(exe + " tokenizer-train --vocab-size 300 --in " +
                                                  (dir / "vocab.txt").string() + " --out " + (dir / "tok.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(exe + " tokenize --quiet --tokenizer " + (dir / "tok.json").string() + " --in " +
                           (dir / "sft.jsonl").string() + " --jsonl-prompt-key prompt --jsonl-key completion --out " +
                           (dir / "sft").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "loss masks beside the shards: ")) << r.output;
  ASSERT_TRUE(std::filesystem::exists(dir / "sft" / "train_000000.mask"));
  r = testing::run_command(exe + " train --model gpt2-tiny --device cpu --steps 40 --batch-size 4 --seq-len 32 --lr 1e-2 "
                           "--warmup 2 --tokenizer " + (dir / "tok.json").string() + " --out-dir " +
                           (dir / "run").string() + " --train-data '" + (dir / "sft" / "train_*.bin").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "% of the tokens are targets)")) << r.output;
  const auto lines = testing::read_metrics(dir / "run" / "metrics.jsonl");
  ASSERT_EQ(lines.size(), 40u);
  EXPECT_GT(lines.front()["loss"].get<double>(), 4.5);  // about log(300) untrained
  EXPECT_LT(lines.back()["loss"].get<double>(), 0.5);    // the answer and the end of it are learnt
  r = testing::run_command(exe + " eval --checkpoint " + (dir / "run").string() + " --seq-len 32 --batch-size 4 " +
                           "--batches 2 --val-data '" + (dir / "sft" / "train_*.bin").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "targets under loss masks)")) << r.output;
  const std::string at_32 = r.output;
  // Without --seq-len eval reads the run's training --seq-len (32, where a default of 1024 was refused
  // and the model's context, 64, is not what val_loss measured), as many batches as the data holds
  // when --eval-batches (train's name) asks for more, and says so.
  r = testing::run_command(exe + " eval --checkpoint " + (dir / "run").string() + " --batch-size 4 --eval-batches 2 " +
                           "--val-data '" + (dir / "sft" / "train_*.bin").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, at_32);
  EXPECT_TRUE(testing::contains(r.output, " over 2 batches of 4 x 32 tokens")) << r.output;
  // Multiple choice: after a prompt the run learnt, " fine" scores best among four choices wherever
  // it stands; a defect of the file is refused by its line.
  std::string choices;
  for (int i = 0; i < 12; ++i) {
    std::vector<std::string> options = {"question", "is", "7"};
    options.insert(options.begin() + i % 4, "fine");
    choices += nlohmann::json{{"context", "question " + std::to_string(i * 37 % 1000) + " is"}, {"choices", options},
                              {"label", i % 4}}.dump() + "\n";
  }
  testing::write_text(dir / "choices.jsonl", choices);
  r = testing::run_command(exe + " eval --checkpoint " + (dir / "run").string() + " --choices " +
                           (dir / "choices.jsonl").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "choices.jsonl': acc 1.0000 acc_norm 1.0000 loss 0.")) << r.output;
  testing::write_text(dir / "bad_choices.jsonl", choices + R"({"context": "He", "choices": ["a", "b"], "label": 2})");
  expect_one_line_error("eval --checkpoint " + (dir / "run").string() + " --choices " +
                            (dir / "bad_choices.jsonl").string(),
                        "bad_choices.jsonl' line 13: \"label\" '2' is not the index of one of its 2 choices (0 to 1)");
  r = testing::run_command(exe + " eval --checkpoint " + (dir / "run").string() + " --batch-size 4 --batches 100000 " +
                           "--val-data '" + (dir / "sft" / "train_*.bin").string() + "'");
  EXPECT_TRUE(testing::contains(r.output, "(all the data holds, short of --batches 100000)")) << r.output;
  expect_one_line_error("eval --device cpu --checkpoint " + (dir / "run").string() + " --seq-len 65 --val-data '" +
                            (dir / "sft" / "train_*.bin").string() + "'",
                        "--seq-len 65 exceeds the model's context of 64; give --seq-len 64 or less");
  expect_one_line_error("tokenize --quiet --tokenizer " + (dir / "tok.json").string() + " --in " +
                            (dir / "vocab.txt").string() + " --jsonl-prompt-key prompt --out " + (dir / "bad").string(),
                        "--jsonl-prompt-key needs JSON lines");
  // Packed for --seq-len 32, the shards train at 32 and are refused at 16.
  r = testing::run_command(exe + " tokenize --tokenizer " + (dir / "tok.json").string() + " --in " +
                           (dir / "sft.jsonl").string() + " --jsonl-prompt-key prompt --jsonl-key completion " +
                           "--pack-seq-len 32 --quiet --out " + (dir / "packed").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "packed for --seq-len 32: ")) << r.output;
  const std::string packed = " --train-data '" + (dir / "packed" / "train_*.bin").string() + "'";
  const std::string run32 = exe + " train --model gpt2-tiny --quiet --steps 2 --batch-size 2 --seq-len 32 --tokenizer " +
                            (dir / "tok.json").string() + packed + " --out-dir ";
  r = testing::run_command(run32 + (dir / "run32").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;  // records that see each other's tokens are pointed out
  EXPECT_TRUE(testing::contains(r.output, "--attention-mask document keeps every record to itself")) << r.output;
  r = testing::run_command(run32 + (dir / "run32docs").string() + " --attention-mask document");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(testing::contains(r.output, "--attention-mask document keeps")) << r.output;
  expect_one_line_error("train --model gpt2-tiny --quiet --steps 2 --batch-size 2 --seq-len 16 --tokenizer " +
                            (dir / "tok.json").string() + " --out-dir " + (dir / "run16").string() + packed,
                        "the shards were packed for sequences of 32 tokens");
}

// Document masks end to end: JSON-lines documents tokenized (each starting with <|endoftext|>), a run
// validating under --attention-mask document, and eval with the same mask reproducing its validation
// loss over the same batches, without it another; a checkpoint without its tokenizer is refused.
TEST_F(CliBadInput, EvaluatesUnderTheRunsDocumentMask) {
  std::string jsonl, text;
  for (int i = 0; i < 200; ++i) {
    const std::string doc = "document " + std::to_string(i * 7919 % 1000) + std::string(size_t(i % 7), '!');
    jsonl += nlohmann::json{{"text", doc}}.dump() + "\n";
    text += doc + "\n";
  }
  testing::write_text(dir / "docs.jsonl", jsonl);
  testing::write_text(dir / "docs.txt", text);
  const std::string exe = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE), tok = (dir / "tok.json").string();
  testing::CommandResult r = testing::run_command(exe + " tokenizer-train --vocab-size 280 --in " +
                                                  (dir / "docs.txt").string() + " --out " + tok);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(exe + " tokenize --quiet --tokenizer " + tok + " --in " + (dir / "docs.jsonl").string() +
                           " --val-every 2 --out " + (dir / "data").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const std::string val = " --val-data '" + (dir / "data" / "val_*.bin").string() + "'";
  r = testing::run_command(exe + " train --model gpt2-tiny --quiet --steps 6 --batch-size 4 --seq-len 32 --eval-every 6 "
                           "--eval-batches 3 --attention-mask document --tokenizer " + tok + " --out-dir " +
                           (dir / "run").string() + " --train-data '" + (dir / "data" / "train_*.bin").string() + "'" + val);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const double trained = testing::read_metrics(dir / "run" / "metrics.jsonl").back()["val_loss"].get<double>();
  auto eval_loss = [&](const std::string& checkpoint, const std::string& mask) {
    const testing::CommandResult e = testing::run_command(exe + " eval --device cpu --checkpoint " + checkpoint +
                                                          " --seq-len 32 --batch-size 4 --batches 3" + val + mask);
    EXPECT_EQ(e.exit_code, 0) << e.output;
    return std::stod(e.output.substr(e.output.find("val_loss ") + 9));
  };
  EXPECT_NEAR(eval_loss((dir / "run").string(), " --attention-mask document"), trained, 2e-6);
  EXPECT_GT(std::fabs(eval_loss((dir / "run").string(), "") - trained), 1e-4);
  // A Hugging Face export holds no tokenizer.json here: no start token to find the documents by.
  ASSERT_EQ(tessera_run("convert --checkpoint " + (dir / "run").string() + " --to-hf " + (dir / "hf").string()).exit_code, 0);
  std::filesystem::remove(dir / "hf" / "tokenizer.json");
  expect_one_line_error("eval --init-from " + (dir / "hf").string() + " --seq-len 32 --attention-mask document" + val,
                        "--attention-mask document needs the model's tokenizer");
}

// Chat fine-tuning end to end: conversations rendered with ChatML (special tokens added to a trained
// tokenizer), a run that learns the assistant's answer, and generate replying to a user's message
// in the template, stopping at <|im_end|>; chat flags misused.
TEST_F(CliBadInput, FineTunesOnConversationsAndChats) {
  std::string jsonl, vocabulary;
  for (int i = 0; i < 300; ++i) {
    const std::string question = "question " + std::to_string(i * 7919 % 1000) + " is";
    const nlohmann::json messages = {{{"role", "user"}, {"content", question}}, {{"role", "assistant"}, {"content", "fine"}}};
    jsonl += nlohmann::json{{"messages", messages}}.dump() + "\n";
    vocabulary += "user\n" + question + " assistant\nfine\n";
  }
  testing::write_text(dir / "chat.jsonl", jsonl);
  testing::write_text(dir / "vocab.txt", vocabulary);
  const std::string exe = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);
  testing::CommandResult r = testing::run_command(exe + " tokenizer-train --vocab-size 300 --in " +
                                                  (dir / "vocab.txt").string() + " --out " + (dir / "tok.json").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  testing::add_special_tokens(dir / "tok.json", {"<|im_start|>", "<|im_end|>"});
  const std::string tok = " --tokenizer " + (dir / "tok.json").string();
  r = testing::run_command(exe + " tokenize --quiet" + tok + " --in " + (dir / "chat.jsonl").string() +
                           " --jsonl-key messages --chat-template chatml --out " + (dir / "chat").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = testing::run_command(exe + " train --quiet --model gpt2-tiny --device cpu --steps 60 --batch-size 4 --seq-len 32 "
                           "--lr 1e-2 --warmup 2" + tok + " --out-dir " + (dir / "run").string() + " --train-data '" +
                           (dir / "chat" / "train_*.bin").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_LT(testing::read_metrics(dir / "run" / "metrics.jsonl").back()["loss"].get<double>(), 0.2);
  r = testing::run_command(exe + " generate --device cpu --checkpoint " + (dir / "run").string() + " --chat-template chatml "
                           "--prompt 'question 7 is' --temperature 0 --max-new-tokens 20 --system 'Be brief.'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "fine\n");  // the reply alone, ended by <|im_end|> long before 20 tokens
  // Drawn near uniformly, byte tokens break characters apart: what is printed stays valid UTF-8.
  r = testing::run_command(exe + " generate --device cpu --checkpoint " + (dir / "run").string() +
                           " --prompt 'question' --temperature 100 --top-k 0 --max-new-tokens 200 --seed 3");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  Utf8Stream utf8;
  EXPECT_EQ(utf8.add(r.output) + utf8.finish(), r.output);
  EXPECT_TRUE(testing::contains(r.output, "\xEF\xBF\xBD")) << r.output;  // U+FFFD where bytes formed no character
  expect_one_line_error("generate --checkpoint " + (dir / "run").string() + " --prompt hi --system 'Be brief.'",
                        "--system needs --chat-template");
  expect_one_line_error("generate --checkpoint " + (dir / "run").string() + " --prompt hi --chat-template chatml "
                        "--no-thinking", "--no-thinking needs --chat-template qwen3 (the chatml template has no think blocks)");
  // The chat tokenizer lacks <think>: qwen3 names the token.
  expect_one_line_error("generate --device cpu --checkpoint " + (dir / "run").string() + " --prompt hi --chat-template qwen3",
                        "--chat-template qwen3: the tokenizer");
  expect_one_line_error("generate --device cpu --checkpoint " + (dir / "run").string() + " --prompt hi --chat-template llama3",
                        "--chat-template llama3: the tokenizer");
  // A tokenizer larger than the model's vocabulary would give it ids past its embedding: refused at load.
  nlohmann::json tokenizer = nlohmann::json::parse(testing::read_text(dir / "tok.json"));
  for (int i = 0; i < 1000; ++i) {
    const int id = int(tokenizer["model"]["vocab"].size());
    tokenizer["model"]["vocab"]["zz" + std::to_string(i)] = id;
  }
  testing::write_text(dir / "big.json", tokenizer.dump());
  expect_one_line_error("generate --device cpu --checkpoint " + (dir / "run").string() + " --prompt hi --tokenizer " +
                            (dir / "big.json").string(),
                        "tokens but the model's vocabulary holds only");
}

TEST(Cli, HelpListsTheTrainFlags) {
  testing::CommandResult r = testing::run_command(std::string(TESSERA_EXE) + " train --help");
  EXPECT_EQ(r.exit_code, 0);
  for (const char* flag : {"--config", "--init-from", "--model", "--train-data", "--val-data", "--tokenizer",
                           "--batch-size", "--micro-batch-size", "--seq-len", "--steps", "--lr", "--min-lr",
                           "--lr-schedule", "--warmup", "--weight-decay", "--beta1", "--beta2", "--eps", "--grad-clip",
                           "--data-order", "--seed", "--eval-every", "--checkpoint-every", "--keep-checkpoints",
                           "--checkpoint-weights", "--attention-mask", "--out-dir",
                           "--metrics-file", "--threads"})
    EXPECT_NE(r.output.find(flag), std::string::npos) << flag;
  // A negated switch reads as itself, without CLI11's "{false}".
  EXPECT_NE(r.output.find("--no-overlap "), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("{false}"), std::string::npos) << r.output;
}

}  // namespace tessera

namespace tessera {

// A missing or mistyped command is named with the commands there are (CLI11 said "A subcommand is
// required" for `tessera`, `tessera trian` and `tessera plan memroy` alike), exit 106 as before.
TEST(Cli, MissingOrMistypedCommandListsTheCommands) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "give a command after 'tessera': train, eval, generate, tokenize, tokenizer-train, convert, bench, launch, plan"},
      {"trian", "unknown command 'trian' of 'tessera'; did you mean 'tessera train'?"},
      {"nosuch", "unknown command 'nosuch' of 'tessera' (commands: train, eval,"},
      {"plan", "give a command after 'tessera plan': pipeline, memory, layout"},
      {"plan memroy", "did you mean 'tessera plan memory'?"},
      {"bench tran", "did you mean 'tessera bench train'?"},
  };
  for (const auto& [args, message] : cases) {
    Outcome o = tessera_run(args);
    EXPECT_EQ(o.exit_code, 106) << args;
    EXPECT_EQ(o.stderr_text, "tessera: error: " + o.stderr_text.substr(16)) << args;
    EXPECT_NE(o.stderr_text.find(message), std::string::npos) << args << ": " << o.stderr_text;
  }
  // A required flag of a named command keeps its own message.
  Outcome o = tessera_run("tokenize --in x");
  EXPECT_NE(o.stderr_text.find("--tokenizer is required"), std::string::npos) << o.stderr_text;
}

}  // namespace tessera
