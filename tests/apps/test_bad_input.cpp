// Issue 13's robustness table: bad input of every kind (run-folder mistakes, corrupt checkpoints,
// numbers, files of the wrong kind, hostile TOML, library text) given to the tessera binary. Every
// case starts from a finished 2-step run of its own, breaks one thing, and must end with an exit code
// in 1..127, exactly one printable line on stderr naming the culprit, no raw library text, and the
// run folder byte-for-byte as it was before tessera ran.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "train/train_fixtures.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

const std::string kTessera = "OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE);

// What every case starts from, in `dir`: run/ (a finished run with checkpoints at steps 1 and 2),
// hf/ (its export) and train_000000.bin.
void prepare_run(const fs::path& dir) {
  testing::write_random_shard(dir, 4096, 256, 3);
  const testing::CommandResult train = testing::run_command(
      kTessera + " train --model gpt2-tiny --quiet --device cpu --steps 2 --checkpoint-every 1 --batch-size 2 "
                 "--seq-len 16 --train-data " + (dir / "train_000000.bin").string() + " --out-dir " +
      (dir / "run").string());
  ASSERT_EQ(train.exit_code, 0) << train.output;
  const testing::CommandResult hf = testing::run_command(kTessera + " convert --checkpoint " + (dir / "run").string() +
                                                         " --to-hf " + (dir / "hf").string());
  ASSERT_EQ(hf.exit_code, 0) << hf.output;
}

void edit_json(const fs::path& file, const std::function<void(nlohmann::json&)>& edit) {
  nlohmann::json j = nlohmann::json::parse(testing::read_text(file));
  edit(j);
  testing::write_text(file, j.dump());
}

// Overwrites 4 bytes at `from_end` bytes before the end of `file` with `value`.
void poke_float(const fs::path& file, size_t from_end, float value) {
  std::string bytes = testing::read_text(file);
  std::memcpy(bytes.data() + bytes.size() - from_end, &value, 4);
  testing::write_text(file, bytes);
}

std::string crc_hex(const std::string& bytes, size_t begin, size_t length) {
  char crc[16];
  std::snprintf(crc, sizeof crc, "%08lx",
                static_cast<unsigned long>(crc32(0L, reinterpret_cast<const Bytef*>(bytes.data() + begin), uInt(length))));
  return crc;
}

// Records the file's current size and CRC-32, and the block CRCs of its slices, in its checkpoint's
// state.json, as if it had been written so: the damage is then for the finiteness checks to find.
void rerecord(const fs::path& checkpoint, const std::string& file) {
  const std::string bytes = testing::read_text(checkpoint / file);
  constexpr size_t kBlock = size_t(4) << 20;
  edit_json(checkpoint / "state.json", [&](nlohmann::json& j) {
    j["files"][file] = {{"bytes", bytes.size()}, {"crc32", crc_hex(bytes, 0, bytes.size())}};
    for (auto& [name, tensor] : j["tensors"].items())
      for (nlohmann::json& slice : tensor["slices"]) {
        if (slice["file"] != file) continue;
        const size_t begin = slice["bytes"][0], end = slice["bytes"][1];
        slice["crc32"] = nlohmann::json::array();
        for (size_t at = begin; at < end; at += kBlock) slice["crc32"].push_back(crc_hex(bytes, at, std::min(kBlock, end - at)));
      }
  });
}

void make_fifo(const fs::path& path) {
  fs::remove_all(path);
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0) << path;
}

struct BadInput {
  std::string kind;  // the issue's kinds: run folder, checkpoint, number, file, toml, message
  std::string name;
  // Breaks something under `dir` (a copy of the template) and returns the tessera arguments.
  std::function<std::string(const fs::path& dir)> setup;
  std::string needle;  // must appear in the error line
};

// gtest prints a case by its name instead of its bytes.
void PrintTo(const BadInput& c, std::ostream* os) { *os << c.kind << "/" << c.name; }

std::string base_train(const fs::path& dir) {
  return "train --model gpt2-tiny --quiet --device cpu --batch-size 2 --seq-len 16 --train-data " +
         (dir / "train_000000.bin").string() + " --out-dir " + (dir / "run").string();
}
// A tokenizer of 300 tokens trained on a small corpus, as `dir`/tok.json; its path.
std::string trained_tokenizer(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 50; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
  testing::write_text(dir / "corpus.txt", text);
  testing::run_command(kTessera + " tokenizer-train --vocab-size 300 --in " + (dir / "corpus.txt").string() + " --out " +
                       (dir / "tok.json").string());
  return (dir / "tok.json").string();
}
std::string fresh_train(const fs::path& dir) {
  return "train --model gpt2-tiny --quiet --device cpu --steps 1 --batch-size 2 --seq-len 16 --train-data " +
         (dir / "train_000000.bin").string() + " --out-dir " + (dir / "fresh").string();
}
std::string resume(const fs::path& dir) { return base_train(dir) + " --steps 4 --resume"; }
const std::string kShard = "shard-00000-of-00001.safetensors";  // a one-process run's moments
fs::path ckpt(const fs::path& dir, int step) { return dir / "run" / ("ckpt-0000000" + std::to_string(step)); }
std::string generate(const fs::path& checkpoint) {
  return "generate --checkpoint " + checkpoint.string() + " --max-new-tokens 1 --tokenizer " +
         (checkpoint / "missing").string();
}
std::string with_toml(const fs::path& dir, const std::string& text) {
  testing::write_text(dir / "c.toml", text);
  return fresh_train(dir) + " --config " + (dir / "c.toml").string();
}
std::string with_toml_bytes(const fs::path& dir, const std::string& head, size_t repeat, const std::string& unit,
                            const std::string& tail) {
  std::string text = head;
  for (size_t i = 0; i < repeat; ++i) text += unit;
  return with_toml(dir, text + tail);
}

std::vector<BadInput> run_folder_cases() {
  return {
      {"run folder", "TrainWithoutResumeIntoARun", [](auto d) { return base_train(d) + " --steps 4"; },
       "already holds checkpoints"},
      {"run folder", "ResumeBelowTheCheckpointStep", [](auto d) { return base_train(d) + " --steps 1 --resume"; },
       "--steps 1 is below step 2"},
      {"run folder", "ResumeWithOtherLayers", [](auto d) { return resume(d) + " --layers 3"; },
       "--layers gives layers 3, the checkpoint has 2"},
      {"run folder", "ResumeWithOtherPreset",
       [](auto d) { return resume(d) + " --model gpt2-mini"; }, "--model gpt2-mini gives layers 4"},
      {"run folder", "ResumeWithOtherVocabulary", [](auto d) { return resume(d) + " --vocab-size 300"; },
       "--vocab-size gives vocab_size 300"},
      {"run folder", "ResumeWhenNoCheckpointIsComplete",
       [](auto d) {
         fs::remove(ckpt(d, 1) / "model.safetensors");
         fs::remove(ckpt(d, 2) / "state.json");
         return resume(d);
       },
       "no complete checkpoint"},
      {"run folder", "ResumeWithOnlyADanglingLatest",
       [](auto d) {
         fs::remove_all(ckpt(d, 1));
         fs::remove_all(ckpt(d, 2));
         return resume(d);
       },
       "ckpt-latest points at 'ckpt-00000002', which does not exist"},
      {"run folder", "ResumeWithATruncatedOnlyCheckpoint",
       [](auto d) {
         fs::remove_all(ckpt(d, 1));
         fs::resize_file(ckpt(d, 2) / kShard, 100);
         return resume(d);
       },
       "the file is truncated or replaced"},
      {"run folder", "ExportIntoACheckpoint",
       [](auto d) { return "convert --checkpoint " + (d / "run").string() + " --to-hf " + ckpt(d, 1).string(); },
       "is not empty"},
      {"run folder", "ExportOverAFile",
       [](auto d) {
         return "convert --checkpoint " + (d / "run").string() + " --to-hf " + (d / "run" / "metrics.jsonl").string();
       },
       "exists and is not a folder"},
      {"run folder", "ImportIntoATrainedRun",
       [](auto d) { return "convert --from-hf " + (d / "hf").string() + " --out " + (d / "run").string(); },
       "already holds a checkpoint"},
      {"run folder", "ImportIntoACheckpointFolder",
       [](auto d) { return "convert --from-hf " + (d / "hf").string() + " --out " + ckpt(d, 2).string(); },
       "already holds a checkpoint"},
  };
}

std::vector<BadInput> checkpoint_cases() {
  return {
      {"checkpoint", "NanBytesInTheModelWithMatchingChecksum",
       [](auto d) {
         poke_float(ckpt(d, 2) / "model.safetensors", 400, std::numeric_limits<float>::quiet_NaN());
         rerecord(ckpt(d, 2), "model.safetensors");
         return generate(ckpt(d, 2));
       },
       "holds nan"},
      {"checkpoint", "InfinityInTheOptimizerWithMatchingChecksum",
       [](auto d) {
         poke_float(ckpt(d, 2) / kShard, 8, std::numeric_limits<float>::infinity());
         rerecord(ckpt(d, 2), kShard);
         return resume(d);
       },
       "holds inf"},
      {"checkpoint", "NegativeSecondMoment",
       [](auto d) {
         poke_float(ckpt(d, 2) / kShard, 8, -1.0f);
         rerecord(ckpt(d, 2), kShard);
         return resume(d);
       },
       "holds -1"},
      {"checkpoint", "StateWithFewerLayers",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["model"]["num_layers"] = 1; });
         return generate(ckpt(d, 2));
       },
       "state.json says 1 layers but model.safetensors holds 2"},
      {"checkpoint", "StateWithABillionLayers",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["model"]["num_layers"] = 1000000000; });
         return resume(d);
       },
       "model.num_layers 1000000000, more than"},
      {"checkpoint", "StateWithOtherWidth",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) {
           j["model"]["channels"] = 64;
           j["model"]["num_heads"] = 2;
         });
         return generate(ckpt(d, 2));
       },
       "the files do not belong together"},
      {"checkpoint", "StateWithAStringWidth",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["model"]["channels"] = "32"; });
         return generate(ckpt(d, 2));
       },
       "'model.channels' must be a positive integer"},
      {"checkpoint", "StateWithANegativeStep",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["step"] = -3; });
         return generate(ckpt(d, 2));
       },
       "'step' must be a non-negative integer"},
      {"checkpoint", "StateWithAFractionalDataPosition",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["next_batch"] = 1.5; });
         return generate(ckpt(d, 2));
       },
       "'next_batch' must be a non-negative integer"},
      {"checkpoint", "StateWithANegativeSeed",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["seed"] = -1; });
         return generate(ckpt(d, 2));
       },
       "'seed' must be a non-negative integer"},
      {"checkpoint", "StateWithATextFp8History",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["fp8_amax_history"] = "high"; });
         return generate(ckpt(d, 2));
       },
       "'fp8_amax_history' must be an array of numbers"},
      {"checkpoint", "StateWithARaggedFp8History",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["fp8_amax_history"] = {1.0, 2.0, 3.0}; });
         return resume(d) + " --fp8 hybrid";
       },
       "the fp8 amax history holds 3 values, not a whole number of steps of 36"},
      {"checkpoint", "StateNamingAFileOutsideTheCheckpoint",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json",
                   [](auto& j) { j["files"]["../../etc/passwd"] = {{"bytes", 1}, {"crc32", "00000000"}}; });
         return generate(ckpt(d, 2));
       },
       "which is not a checkpoint file"},
      {"checkpoint", "StateWithABadChecksumField",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["files"]["model.safetensors"]["crc32"] = 7; });
         return generate(ckpt(d, 2));
       },
       "'files.model.safetensors' must be"},
      // The moments' shard matters to a resume only (generate and eval read the weights alone).
      {"checkpoint", "MissingShardFile",
       [](auto d) {
         fs::remove_all(ckpt(d, 1));
         fs::remove(ckpt(d, 2) / kShard);
         return resume(d);
       },
       kShard + "' is missing"},
      {"checkpoint", "TruncatedShardFile",
       [](auto d) {
         fs::remove_all(ckpt(d, 1));
         fs::resize_file(ckpt(d, 2) / kShard, fs::file_size(ckpt(d, 2) / kShard) / 2);
         return resume(d);
       },
       kShard + "' holds"},
      {"checkpoint", "ShardChecksumMismatch",
       [](auto d) {
         fs::remove_all(ckpt(d, 1));
         poke_float(ckpt(d, 2) / kShard, 8, 0.5f);
         return resume(d);
       },
       kShard + "' is corrupt: its CRC-32"},
      {"checkpoint", "IndexWithAGapBetweenSlices",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) {
           nlohmann::json& slice = j["tensors"]["m.wte"]["slices"][0];
           slice["elements"][0] = 1;
           slice["bytes"][0] = slice["bytes"][0].get<uint64_t>() + 4;
         });
         return generate(ckpt(d, 2));
       },
       "'m.wte' slice [1, "},
      {"checkpoint", "IndexWithASlicePastItsFile",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) {
           nlohmann::json& bytes = j["tensors"]["wte"]["slices"][0]["bytes"];
           bytes = {bytes[0].get<uint64_t>() + 4096, bytes[1].get<uint64_t>() + 4096};
         });
         return generate(ckpt(d, 2));
       },
       "past the end of model.safetensors"},
      {"checkpoint", "IndexThatIsNotAnObject",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["tensors"] = 5; });
         return generate(ckpt(d, 2));
       },
       "'tensors' must be an object"},
      {"checkpoint", "IndexWithABadBlockChecksum",
       [](auto d) {
         edit_json(ckpt(d, 2) / "state.json", [](auto& j) { j["tensors"]["wte"]["slices"][0]["crc32"][0] = "xyz"; });
         return generate(ckpt(d, 2));
       },
       "must hold CRC-32s of 8 lowercase hex digits"},
      {"checkpoint", "StateThatIsNotJson",
       [](auto d) {
         testing::write_text(ckpt(d, 2) / "state.json", "{\"step\": 2,");
         return generate(ckpt(d, 2));
       },
       "not a JSON object"},
      {"checkpoint", "StateThatIsAnArray",
       [](auto d) {
         testing::write_text(ckpt(d, 2) / "state.json", "[1, 2]");
         return generate(ckpt(d, 2));
       },
       "not a JSON object"},
      {"checkpoint", "StateLargerThanItsBound",
       [](auto d) {
         fs::resize_file(ckpt(d, 2) / "state.json", uint64_t(17) << 20);
         return generate(ckpt(d, 2));
       },
       "-byte limit"},
      {"checkpoint", "TruncatedModelFile",
       [](auto d) {
         fs::resize_file(ckpt(d, 2) / "model.safetensors", 1000);
         return generate(ckpt(d, 2));
       },
       "model.safetensors' holds 1000 bytes, state.json records"},
      {"checkpoint", "ModelFileReplacedByAnother",
       [](auto d) {
         fs::copy_file(ckpt(d, 1) / "model.safetensors", ckpt(d, 2) / "model.safetensors",
                       fs::copy_options::overwrite_existing);
         return generate(ckpt(d, 2));
       },
       "model.safetensors' is corrupt: bytes ["},
  };
}

std::vector<BadInput> number_cases() {
  auto flag = [](std::string name, std::string flags, std::string needle) {
    return BadInput{"number", std::move(name), [flags](auto d) { return fresh_train(d) + " " + flags; },
                    std::move(needle)};
  };
  return {
      flag("StepsPastInt64", "--steps 9223372036854775808", "--steps: '9223372036854775808' does not fit"),
      flag("StepsFarPastInt64", "--steps 99999999999999999999", "--steps: '99999999999999999999' does not fit"),
      flag("StepsBelowInt64", "--steps -9223372036854775809", "does not fit a 64-bit integer"),
      flag("HexStepsPastInt64", "--steps 0xFFFFFFFFFFFFFFFFF", "does not fit a 64-bit integer"),
      flag("NegativeSeed", "--seed -1", "--seed: must not be negative"),
      flag("SeedPastUint64", "--seed 18446744073709551616", "--seed: '18446744073709551616' does not fit"),
      flag("DpPastInt32", "--dp 2147483648", "--dp: '2147483648' is not a number this flag takes"),
      flag("ThreadsPastInt32", "--threads 4294967297", "--threads: '4294967297' is not a number this flag takes"),
      flag("RepeatedFlagNamesTheValueRead", "--seq-len 16 --seq-len 0.5", "--seq-len: '0.5' is not a whole number"),
      flag("ZeroTensorParallel", "--tp 0", "--tp must be at least 1, got 0"),
      flag("NegativePipeline", "--pp -2", "--pp must be at least 1, got -2"),
      flag("LrOverflowingFloat", "--lr 1e40", "--lr must be a finite number"),
      flag("InfiniteLr", "--lr inf", "--lr: must be a finite number"),
      flag("NanLr", "--lr nan", "--lr: must be a finite number"),
      flag("InfiniteWeightDecay", "--weight-decay inf", "--weight-decay: must be a finite number"),
      flag("NanBeta1", "--beta1 nan", "--beta1: must be a finite number"),
      flag("InfiniteGradClip", "--grad-clip inf", "--grad-clip: must be a finite number"),
      flag("InfiniteEps", "--eps inf", "--eps: must be a finite number"),
      flag("HugeBucket", "--bucket-mb 1e300", "--bucket-mb must be in"),
      flag("InfiniteCommTimeout", "--comm-timeout inf", "--comm-timeout: must be a finite number"),
      flag("AbsurdThreads", "--threads 100000", "--threads 100000"),
      flag("NegativeKeep", "--keep-checkpoints -1", "--keep-checkpoints must not be negative"),
      flag("TensorBoardDirUnderAFile", "--tensorboard-dir /dev/null/tb", "--tensorboard-dir"),
      flag("UnknownCheckpointWeights", "--checkpoint-weights split", "--checkpoint-weights must be auto, whole or sharded"),
      flag("FractionalSteps", "--steps 1.5", "--steps"),
      flag("BillionLayers", "--layers 1000000000", "--layers 1000000000 is above 10000"),
      flag("VocabularyPastInt32", "--vocab-size 9000000000000000000", "--vocab-size 9000000000000000000 is above"),
      flag("ContextPastItsLimit", "--context 9000000000000000000", "--context 9000000000000000000 is above"),
      // ZeRO 2 and 3 reduce a block's gradients before zero-bubble's deferred weight gradients.
      flag("Zero3WithZeroBubble", "--zero 3 --pp 2 --pipeline-schedule zero-bubble",
           "before zero-bubble's deferred weight gradients; use --pipeline-schedule 1f1b, gpipe or interleaved with --zero 3"),
      flag("Zero2WithZeroBubble", "--zero 2 --pp 2 --pipeline-schedule zero-bubble",
           "use --pipeline-schedule 1f1b, gpipe or interleaved with --zero 2, or --zero 1 with zero-bubble"),
      flag("ZeroStageFour", "--zero 4", "--zero must be 0, 1, 2 or 3, got 4"),
      flag("CpCommUnknown", "--cp-comm tree", "--cp-comm must be ring or all-to-all, got 'tree'"),
      flag("CpCommWithoutCp", "--cp-comm all-to-all", "with --cp 1 there are none: give --cp above 1 or drop --cp-comm"),
      flag("KeptGatheredBlocksWithoutZero3", "--zero 2 --no-reshard-after-forward",
           "with --zero 2 every rank holds its whole weights already: use --zero 3 or drop it"),
      // Document masks: an unknown mask, and one without the tokenizer whose start token marks documents.
      flag("AttentionMaskSideways", "--attention-mask sideways", "--attention-mask must be causal or document"),
      flag("DocumentMaskWithoutTokenizer", "--attention-mask document", "--attention-mask document needs --tokenizer"),
      flag("ChoicesWithoutTokenizer", "--choices hellaswag_val.jsonl", "--choices needs --tokenizer"),
      // Compressed reductions: an unknown wire dtype, and PowerSGD where it cannot apply.
      flag("GradReduceDtypeFp8", "--grad-reduce-dtype fp8", "--grad-reduce-dtype must be fp32 or bf16"),
      flag("NegativePowerSgdRank", "--powersgd-rank -1", "--powersgd-rank must be in [0, 1024] (0 = off), got -1"),
      flag("PowerSgdWithZero3", "--powersgd-rank 4 --zero 3", "use --zero 1 with --powersgd-rank, or drop it"),
      flag("PowerSgdWithZero2", "--powersgd-rank 4 --zero 2", "ZeRO 2 reduce-scatters each block instead"),
      flag("PowerSgdInBf16", "--powersgd-rank 4 --grad-reduce-dtype bf16",
           "--powersgd-rank sends its factors in fp32; drop --grad-reduce-dtype bf16"),
      flag("PowerSgdWithFp16", "--powersgd-rank 4 --dtype fp16", "use --dtype bf16 or fp32 with it"),
      flag("LossScaleNotPowerOfTwo", "--loss-scaling dynamic --loss-scale 1000",
           "--loss-scale 1000 must be a power of two, so that dividing it out of the gradients is exact: use 1024"),
      // fp8: an unknown recipe, fp16 beside it, histories and margins out of range.
      flag("Fp8E5m2Recipe", "--fp8 e5m2", "--fp8 must be off, hybrid (E4M3 inputs and weights, E5M2 gradients) or e4m3"),
      flag("Fp8WithFp16", "--fp8 hybrid --dtype fp16", "use --dtype bf16 (or fp32 on the CPU) with it"),
      flag("Fp8WithoutHistory", "--fp8 hybrid --fp8-amax-history 0", "--fp8-amax-history must be in [1, 1024] steps"),
      flag("Fp8MarginTooWide", "--fp8 hybrid --fp8-margin 20", "--fp8-margin must be in [0, 8] powers of two, got 20"),
      {"number", "EvalBatchPastInt64",
       [](auto d) {
         return "eval --checkpoint " + (d / "run").string() + " --val-data " + (d / "train_000000.bin").string() +
                " --batch-size 9223372036854775808";
       },
       "--batch-size: '9223372036854775808' does not fit"},
      {"number", "GenerateNanTemperature", [](auto d) { return generate(ckpt(d, 2)) + " --temperature nan"; },
       "--temperature: must be a finite number"},
      {"number", "TomlStepsPastInt64", [](auto d) { return with_toml(d, "steps = 9223372036854775808\n"); },
       "not representable in 64 bits"},
      {"number", "TomlInfiniteLr", [](auto d) { return with_toml(d, "lr = inf\n"); }, "key 'lr': --lr: must be a finite"},
      {"number", "TomlNanLr", [](auto d) { return with_toml(d, "lr = nan\n"); }, "key 'lr': --lr: must be a finite"},
      {"number", "TomlNegativeSeed", [](auto d) { return with_toml(d, "seed = -1\n"); }, "--seed: must not be negative"},
      {"number", "TomlZero3WithZeroBubble",
       [](auto d) { return with_toml(d, "zero = 3\npp = 2\npipeline-schedule = \"zero-bubble\"\n"); },
       "use --pipeline-schedule 1f1b, gpipe or interleaved with --zero 3"},
  };
}

std::vector<BadInput> file_cases() {
  return {
      {"file", "ConfigFifo",
       [](auto d) {
         make_fifo(d / "c.toml");
         return fresh_train(d) + " --config " + (d / "c.toml").string();
       },
       "is a FIFO (named pipe), not a regular file"},
      {"file", "ConfigDevice", [](auto d) { return fresh_train(d) + " --config /dev/zero"; },
       "is a character device, not a regular file"},
      {"file", "ConfigLargerThanItsBound",
       [](auto d) {
         testing::write_text(d / "c.toml", "");
         fs::resize_file(d / "c.toml", uint64_t(17) << 20);
         return fresh_train(d) + " --config " + (d / "c.toml").string();
       },
       "-byte limit"},
      {"file", "ShardFifo",
       [](auto d) {
         make_fifo(d / "fifo.bin");
         return fresh_train(d) + " --train-data " + (d / "fifo.bin").string();
       },
       "is a FIFO (named pipe)"},
      {"file", "ShardDevice", [](auto d) { return fresh_train(d) + " --train-data /dev/zero"; },
       "is a character device"},
      {"file", "ShardDirectory",
       [](auto d) {
         fs::create_directories(d / "dir.bin");
         return fresh_train(d) + " --train-data " + (d / "dir.bin").string();
       },
       "is a directory"},
      {"file", "TokenizerFifo",
       [](auto d) {
         make_fifo(d / "tokenizer.json");
         return fresh_train(d) + " --tokenizer " + (d / "tokenizer.json").string();
       },
       "is a FIFO (named pipe)"},
      {"file", "TokenizerDevice", [](auto d) { return fresh_train(d) + " --tokenizer /dev/zero"; },
       "is a character device"},
      {"file", "EncoderJsonFifo",
       [](auto d) {
         fs::create_directories(d / "gpt2");
         make_fifo(d / "gpt2" / "encoder.json");
         testing::write_text(d / "gpt2" / "vocab.bpe", "#version: 0.2\n");
         return fresh_train(d) + " --tokenizer " + (d / "gpt2").string();
       },
       "is a FIFO (named pipe)"},
      {"file", "CheckpointModelFifo",
       [](auto d) {
         make_fifo(ckpt(d, 2) / "model.safetensors");
         return generate(ckpt(d, 2));
       },
       "model.safetensors"},
      {"file", "CheckpointStateDirectory",
       [](auto d) {
         fs::remove(ckpt(d, 2) / "state.json");
         fs::create_directories(ckpt(d, 2) / "state.json");
         return generate(ckpt(d, 2));
       },
       "is a directory, not a regular file"},
      {"file", "HfWeightsDirectory",
       [](auto d) {
         fs::remove(d / "hf" / "model.safetensors");
         fs::create_directories(d / "hf" / "model.safetensors");
         return fresh_train(d) + " --init-from " + (d / "hf").string();
       },
       "is a directory, not a regular file"},
      {"file", "TextDevice",
       [](auto d) { return "tokenize --tokenizer " + trained_tokenizer(d) + " --in /dev/zero --out " + (d / "shards").string(); },
       "is a character device"},
      {"file", "ChoicesWithALabelPastItsChoices",
       [](auto d) {
         const std::string tokenizer = trained_tokenizer(d);
         testing::write_text(d / "choices.jsonl", R"({"ctx": "the", "endings": ["quick", "fox"], "label": 1})" "\n"
                                                  R"({"ctx": "the", "endings": ["quick", "fox"], "label": 2})" "\n");
         return fresh_train(d) + " --tokenizer " + tokenizer + " --choices " + (d / "choices.jsonl").string();
       },
       "choices.jsonl' line 2: \"label\" '2' is not the index of one of its 2 choices"},
      {"file", "MetricsFifo",
       [](auto d) {
         make_fifo(d / "metrics.fifo");
         return fresh_train(d) + " --metrics-file " + (d / "metrics.fifo").string();
       },
       "--metrics-file '"},
      {"file", "MetricsDevice", [](auto d) { return fresh_train(d) + " --metrics-file /dev/full"; },
       "is a character device"},
      {"file", "ShardLongerThanItsHeader",
       [](auto d) {
         std::string bytes = testing::read_text(d / "train_000000.bin");
         const int32_t fewer = 4000;  // of the 4096 tokens the file holds
         std::memcpy(bytes.data() + 8, &fewer, 4);
         testing::write_text(d / "long.bin", bytes);
         return fresh_train(d) + " --train-data " + (d / "long.bin").string();
       },
       "header says 4000 tokens but the file holds 4096; the file is not the shard its header describes"},
      {"file", "MixtureSourceTooSmall",
       [](auto d) {
         fs::create_directories(d / "tiny");
         testing::write_random_shard(d / "tiny", 9, 256, 4);
         return fresh_train(d) + " --train-data '0.9:" + (d / "train_000000.bin").string() + ",0.1:" +
                (d / "tiny" / "train_*.bin").string() + "'";
       },
       "source 2 ('"},
      {"file", "MixtureDuplicateSource",
       [](auto d) {
         const std::string shard = (d / "train_000000.bin").string();
         return fresh_train(d) + " --train-data '0.5:" + shard + ",0.5:" + shard + "'";
       },
       "is given twice; name each source once"},
      {"file", "OutDirIsAFile",
       [](auto d) {
         return "train --model gpt2-tiny --quiet --device cpu --steps 1 --batch-size 2 --seq-len 16 --train-data " +
                (d / "train_000000.bin").string() + " --out-dir " + (d / "train_000000.bin").string();
       },
       "is a file, not a folder"},
  };
}

std::vector<BadInput> toml_cases() {
  return {
      {"toml", "TableHeaderNestedDeep", [](auto d) { return with_toml_bytes(d, "", 100000, "[", "\n"); },
       "brackets nested deeper than 16 levels"},
      {"toml", "ArrayNestedDeep", [](auto d) { return with_toml_bytes(d, "steps = ", 100000, "[", "\n"); },
       "brackets nested deeper than 16 levels"},
      {"toml", "InlineTableNestedDeep", [](auto d) { return with_toml_bytes(d, "steps = ", 100000, "{a=", "\n"); },
       "brackets nested deeper than 16 levels"},
      {"toml", "DottedKeyDeep", [](auto d) { return with_toml_bytes(d, "a", 100000, ".a", " = 1\n"); },
       "a key or value of 200001 characters"},
      {"toml", "SpacedDottedKeyDeep", [](auto d) { return with_toml_bytes(d, "a", 100000, " . a", " = 1\n"); },
       "a key dotted deeper than 64 levels"},
      {"toml", "TenMegabyteKey", [](auto d) { return with_toml_bytes(d, "", 10000000, "k", " = 1\n"); },
       "a key or value of 10000000 characters"},
      {"toml", "HugeQuotedKey", [](auto d) { return with_toml_bytes(d, "\"", 100000, "k", "\" = 1\n"); },
       "a string longer than 65536 bytes"},
      {"toml", "UnknownKeyWithControlCharacters",
       [](auto d) { return with_toml(d, "\"\\u001b[31mred\\u0007\" = 1\n"); }, "unknown key '\\x1B[31mred\\x07'"},
      {"toml", "TableThatIsNoFlag", [](auto d) { return with_toml(d, "[optimizer]\nlr = 2\n"); },
       "unknown key 'optimizer'"},
  };
}

std::vector<BadInput> message_cases() {
  return {
      {"message", "BinaryTokenizerJson",
       [](auto d) {
         testing::write_text(d / "tokenizer.json", std::string("\x1b[2J\x00\x01\xff binary", 14));
         return fresh_train(d) + " --tokenizer " + (d / "tokenizer.json").string();
       },
       "tokenizer.json"},
      {"message", "TokenizerJsonOfTheWrongShape",
       [](auto d) {
         testing::write_text(d / "tokenizer.json", R"({"model": {"type": "BPE", "vocab": [1, 2], "merges": 3}})");
         return fresh_train(d) + " --tokenizer " + (d / "tokenizer.json").string();
       },
       "tokenizer.json"},
      {"message", "TokenizerJsonNestedDeep",
       [](auto d) {
         testing::write_text(d / "tokenizer.json", std::string(100000, '[') + std::string(100000, ']'));
         return fresh_train(d) + " --tokenizer " + (d / "tokenizer.json").string();
       },
       "tokenizer.json"},
      {"message", "StateJsonNestedDeep",
       [](auto d) {
         testing::write_text(ckpt(d, 2) / "state.json",
                             "{\"step\": " + std::string(100000, '[') + std::string(100000, ']') + "}");
         return generate(ckpt(d, 2));
       },
       "'step' must be a non-negative integer"},
      {"message", "SafetensorsHeaderNestedDeep",
       [](auto d) {
         const std::string header = "{\"a\": " + std::string(100000, '[') + std::string(100000, ']') + "}";
         const uint64_t n = header.size();
         testing::write_text(d / "hf" / "model.safetensors", std::string(reinterpret_cast<const char*>(&n), 8) + header);
         return fresh_train(d) + " --init-from " + (d / "hf").string();
       },
       "model.safetensors"},
      {"message", "SafetensorsShapeNestedDeep",
       [](auto d) {
         const std::string header = "{\"wte\": {\"dtype\": \"F32\", \"shape\": [" + std::string(100000, '[') +
                                    std::string(100000, ']') + "], \"data_offsets\": [0, 0]}}";
         const uint64_t n = header.size();
         testing::write_text(d / "hf" / "model.safetensors", std::string(reinterpret_cast<const char*>(&n), 8) + header);
         return fresh_train(d) + " --init-from " + (d / "hf").string();
       },
       "not an integer: an array of 1 elements"},
      {"message", "HfConfigFieldNestedDeep",
       [](auto d) {
         edit_json(d / "hf" / "config.json", [](auto& j) { j["model_type"] = nlohmann::json::array(); });
         std::string text = testing::read_text(d / "hf" / "config.json");
         text.replace(text.find("[]"), 2, std::string(100000, '[') + std::string(100000, ']'));
         testing::write_text(d / "hf" / "config.json", text);
         return fresh_train(d) + " --init-from " + (d / "hf").string();
       },
       "field 'model_type' is an array of 1 elements"},
      {"message", "HfConfigWithAStringLayerCount",
       [](auto d) {
         edit_json(d / "hf" / "config.json", [](auto& j) { j["n_layer"] = "2"; });
         return fresh_train(d) + " --init-from " + (d / "hf").string();
       },
       "config.json"},
      {"message", "BinaryShardPattern",
       [](auto d) { return fresh_train(d) + " --train-data '" + (d / "\x1b[31m*.bin").string() + "'"; },
       "--train-data"},
  };
}

std::vector<BadInput> all_cases() {
  std::vector<BadInput> cases;
  for (auto part : {run_folder_cases(), checkpoint_cases(), number_cases(), file_cases(), toml_cases(),
                    message_cases()})
    cases.insert(cases.end(), part.begin(), part.end());
  return cases;
}

class BadInputTable : public ::testing::TestWithParam<BadInput> {};

TEST_P(BadInputTable, OneLineNonZeroExitRunFolderUnchanged) {
  const BadInput& c = GetParam();
  const fs::path dir = testing::scratch_dir();
  ASSERT_NO_FATAL_FAILURE(prepare_run(dir));
  const std::string args = c.setup(dir);
  const auto before = testing::folder_snapshot(dir / "run");
  const testing::CommandResult r = testing::run_command("{ timeout 60 env OMP_NUM_THREADS=1 " +
                                                        std::string(TESSERA_EXE) + " " + args + " > /dev/null; }");
  const std::string& err = r.output;
  EXPECT_GE(r.exit_code, 1) << args;
  EXPECT_LT(r.exit_code, 124) << "crashed or hung: " << args << "\n" << err;
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_TRUE(err.starts_with("tessera: error: ")) << err;
  EXPECT_TRUE(testing::contains(err, c.needle)) << "'" << c.needle << "' not in: " << err;
  EXPECT_LT(err.size(), 2100u) << err;
  for (const char* raw : {"[json.exception", "filesystem error", "std::bad_alloc", "basic_string"})
    EXPECT_FALSE(testing::contains(err, raw)) << err;
  EXPECT_TRUE(std::all_of(err.begin(), err.end() - 1, [](char ch) { return ch == '\t' || ch >= 0x20 || ch < 0; }))
      << "control characters in: " << err;
  EXPECT_TRUE(before == testing::folder_snapshot(dir / "run")) << "the run folder changed: " << args;
}

INSTANTIATE_TEST_SUITE_P(Cases, BadInputTable, ::testing::ValuesIn(all_cases()),
                         [](const ::testing::TestParamInfo<BadInput>& info) { return info.param.name; });

// tokenize and tokenizer-train on corpora and folders that would give data a run should not train
// on: an output folder with an earlier run's shards, a run failing part way, empty corpora, a
// vocabulary the corpus cannot fill, conversations without an assistant.
class TokenizeBadInput : public ::testing::Test {
 protected:
  void SetUp() override {
    dir = testing::scratch_dir();
    std::string text;
    for (int i = 0; i < 50; ++i) text += "the quick brown fox " + std::to_string(i) + "\n";
    testing::write_text(dir / "corpus.txt", text);
    ASSERT_EQ(tessera("tokenizer-train --vocab-size 300 --in " + path("corpus.txt") + " --out " + path("tok.json"))
                  .exit_code, 0);
  }
  std::string path(const std::string& name) const { return (dir / name).string(); }
  static testing::CommandResult tessera(const std::string& args) { return testing::run_command(kTessera + " " + args); }
  // The names of the files in folder `name`, sorted.
  std::vector<std::string> files_in(const std::string& name) const {
    std::vector<std::string> files;
    if (fs::is_directory(dir / name))
      for (const auto& e : fs::directory_iterator(dir / name)) files.push_back(e.path().filename().string());
    std::sort(files.begin(), files.end());
    return files;
  }
  fs::path dir;
};

TEST_F(TokenizeBadInput, EarlierShardsAreRefusedOrOverwritten) {
  const std::string tokenize = "tokenize --quiet --tokenizer " + path("tok.json") + " --in " + path("corpus.txt") +
                               " --out " + path("out");
  ASSERT_EQ(tessera(tokenize).exit_code, 0);
  testing::write_text(dir / "out" / "train_000003.bin", "stale");
  testing::write_text(dir / "out" / "val_000000.mask", "stale");
  testing::write_text(dir / "out" / "README", "mine");
  testing::expect_one_line_error(tessera(tokenize),
                                 "--out '" + path("out") + "' already holds 3 shard files of an earlier run");
  const testing::CommandResult r = tessera(tokenize + " --overwrite");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--overwrite: deleted 3 shard files of an earlier run first")) << r.output;
  EXPECT_EQ(files_in("out"), (std::vector<std::string>{"README", "train_000000.bin"}));
}

TEST_F(TokenizeBadInput, AFailedRunLeavesNoShards) {
  std::string jsonl;
  for (int i = 0; i < 20000; ++i) {
    std::string words;
    for (int k = 0; k < 5; ++k) words += "doc number " + std::to_string(i) + " with some words ";
    jsonl += i == 15000 ? "oops\n" : nlohmann::json{{"text", words}}.dump() + "\n";
  }
  testing::write_text(dir / "latebad.jsonl", jsonl);
  const testing::CommandResult r = tessera("tokenize --tokenizer " + path("tok.json") + " --in " + path("latebad.jsonl") +
                                           " --out " + path("lb") + " --quiet --threads 1 --shard-tokens 100000");
  testing::expect_one_line_error(r, "latebad.jsonl' line 15001: not a JSON object");
  EXPECT_TRUE(testing::contains(r.output, " shard files this run had written under '" + path("lb") + "'")) << r.output;
  EXPECT_EQ(files_in("lb"), std::vector<std::string>{});
}

TEST_F(TokenizeBadInput, EmptyAndSmallCorpora) {
  testing::write_text(dir / "empty.txt", "");
  testing::expect_one_line_error(
      tessera("tokenize --tokenizer " + path("tok.json") + " --in " + path("empty.txt") + " --out " + path("e")),
      "tokenize: no documents in '" + path("empty.txt") + "' (empty files)");
  testing::write_text(dir / "blank.jsonl", "{\"text\": \"\"}\n{\"text\": \"\"}\n");
  testing::expect_one_line_error(
      tessera("tokenize --tokenizer " + path("tok.json") + " --in " + path("blank.jsonl") + " --out " + path("b")),
      "no text in '" + path("blank.jsonl") + "': all 2 documents are empty");
  testing::expect_one_line_error(
      tessera("tokenizer-train --in " + path("empty.txt") + " --out " + path("empty.json")),
      "tokenizer-train: no text to learn from in '" + path("empty.txt") + "'");
  EXPECT_FALSE(fs::exists(dir / "empty.json"));
  const testing::CommandResult r =
      tessera("tokenizer-train --vocab-size 20000 --in " + path("corpus.txt") + " --out " + path("big.json"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "note: the corpus ran out of pairs to merge: the tokenizer has ")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "tokens, not the --vocab-size 20000 asked for")) << r.output;
}

TEST_F(TokenizeBadInput, ConversationsWithoutAnAssistant) {
  testing::add_special_tokens(dir / "tok.json", {"<|im_start|>", "<|im_end|>"});
  const std::string sharegpt = R"({"conversations": [{"role": "human", "content": "Hi"}, {"role": "gpt", "content": "Yo"}]})";
  const std::string answered =
      R"({"conversations": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Yo"}]})";
  testing::write_text(dir / "sharegpt.jsonl", sharegpt + "\n" + sharegpt + "\n");
  testing::write_text(dir / "mixed.jsonl", sharegpt + "\n" + answered + "\n");
  const std::string tokenize = "tokenize --quiet --tokenizer " + path("tok.json") +
                               " --jsonl-key conversations --chat-template chatml --in ";
  testing::expect_one_line_error(tessera(tokenize + path("sharegpt.jsonl") + " --out " + path("s")),
                                 "(roles seen: 'gpt' 2, 'human' 2); name the roles user and assistant");
  const testing::CommandResult r = tessera(tokenize + path("mixed.jsonl") + " --out " + path("m"));
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "note: 1 of the 2 conversations left out: no turn whose role is 'assistant'"))
      << r.output;
  EXPECT_TRUE(testing::contains(r.output, "note: roles the chatml template does not know, rendered as given (messages: "
                                          "'gpt' 1, 'human' 1)")) << r.output;
}

}  // namespace
}  // namespace tessera
