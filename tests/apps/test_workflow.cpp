// Every subcommand end to end on a small corpus: tokenizer-train -> tokenize -> train -> eval ->
// generate -> convert --to-hf -> train --init-from the export, whose loss must equal the checkpoint's.
#include <gtest/gtest.h>

#include <cmath>
#include <nlohmann/json.hpp>
#include <regex>

#include "support/test_support.h"

namespace tessera {
namespace {

testing::CommandResult tessera_ok(const std::string& args) {
  testing::CommandResult r = testing::run_command("OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " " + args);
  EXPECT_EQ(r.exit_code, 0) << args << "\n" << r.output;
  return r;
}

double val_loss_of(const std::string& output) {
  std::smatch m;
  EXPECT_TRUE(std::regex_search(output, m, std::regex("val_loss ([0-9.]+)"))) << output;
  return m.empty() ? -1 : std::stod(m[1]);
}

}  // namespace

TEST(Workflow, EverySubcommandOnASmallCorpus) {
  auto dir = testing::scratch_dir();
  std::string text;
  for (int i = 0; i < 300; ++i)
    text += "The quick brown fox " + std::to_string(i % 17) + " jumps over the lazy dog.\n%\nA stitch in time saves " +
            std::to_string(i % 9) + ".\n%\n";
  testing::write_text(dir / "corpus.txt", text);
  const std::string d = dir.string();

  tessera_ok("tokenizer-train --in " + d + "/corpus.txt --vocab-size 300 --out " + d + "/tokenizer.json");
  testing::CommandResult tok = tessera_ok("tokenize --tokenizer " + d + "/tokenizer.json --in " + d +
                                          "/corpus.txt --out " + d + "/data --delimiter % --val-every 10");
  EXPECT_NE(tok.output.find("600 documents"), std::string::npos) << tok.output;

  tessera_ok("train --model gpt2-tiny --tokenizer " + d + "/tokenizer.json --train-data '" + d +
             "/data/train_*.bin' --val-data '" + d + "/data/val_*.bin' --batch-size 4 --seq-len 32 --steps 20 "
             "--lr 3e-3 --out-dir " + d + "/run --quiet");
  double checkpoint_loss = val_loss_of(
      tessera_ok("eval --checkpoint " + d + "/run --val-data '" + d + "/data/val_*.bin' --batch-size 4 --seq-len 32").output);
  EXPECT_LT(checkpoint_loss, std::log(300.0));  // it learned something

  testing::CommandResult sample = tessera_ok("generate --checkpoint " + d + "/run --prompt 'The quick' --max-new-tokens 8");
  EXPECT_NE(sample.output.find("The quick"), std::string::npos);

  tessera_ok("convert --checkpoint " + d + "/run --to-hf " + d + "/hf");
  EXPECT_TRUE(std::filesystem::exists(dir / "hf" / "model.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(dir / "hf" / "tokenizer.json"));
  const nlohmann::json tokenizer_config =
      nlohmann::json::parse(testing::read_text(dir / "hf" / "tokenizer_config.json"));
  EXPECT_EQ(tokenizer_config["tokenizer_class"], "PreTrainedTokenizerFast");  // not the model type's class
  EXPECT_EQ(tokenizer_config["eos_token"], "<|endoftext|>");
  const nlohmann::json model_config = nlohmann::json::parse(testing::read_text(dir / "hf" / "config.json"));
  EXPECT_EQ(tokenizer_config["model_max_length"], model_config["n_positions"]);
  EXPECT_FALSE(tokenizer_config.contains("chat_template"));
  // With --chat-template the template goes in as Jinja, after the run's start token; one whose special
  // tokens the vocabulary lacks is refused and leaves no folder.
  tessera_ok("convert --checkpoint " + d + "/run --to-hf " + d + "/hf-chat --chat-template olmo2");
  const std::string chat = nlohmann::json::parse(testing::read_text(dir / "hf-chat" / "tokenizer_config.json"))
                               .at("chat_template")
                               .get<std::string>();
  EXPECT_TRUE(chat.starts_with("{{- '<|endoftext|>' -}}")) << chat;
  const testing::CommandResult refused = testing::run_command(std::string(TESSERA_EXE) + " convert --checkpoint " + d +
                                                              "/run --to-hf " + d + "/hf-chatml --chat-template chatml");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_NE(refused.output.find("has no special token <|im_start|>"), std::string::npos) << refused.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "hf-chatml"));
  double exported_loss = val_loss_of(
      tessera_ok("eval --init-from " + d + "/hf --val-data '" + d + "/data/val_*.bin' --batch-size 4 --seq-len 32").output);
  EXPECT_EQ(exported_loss, checkpoint_loss);

  tessera_ok("convert --from-hf " + d + "/hf --out " + d + "/imported");
  double imported_loss = val_loss_of(
      tessera_ok("eval --checkpoint " + d + "/imported --val-data '" + d + "/data/val_*.bin' --batch-size 4 --seq-len 32")
          .output);
  EXPECT_EQ(imported_loss, checkpoint_loss);
}

}  // namespace tessera

namespace tessera {

// The README's first commands of a real run, as written, in a fresh folder: tokenizer-train creates
// the folder of its --out (it used to fail after all its merges: "cannot create data/.tokenizer.json.tmp"),
// a folder as --out gets its tokenizer.json, and tokenize says when --val-every sent no document to
// validation (a text file is one document: a few files give none, and --val-data 'data/val_*.bin'
// would then match nothing).
TEST(Workflow, TheReadmesFirstCommandsInAFreshFolder) {
  const std::filesystem::path dir = testing::scratch_dir();
  std::string fortunes;
  for (int i = 0; i < 120; ++i)
    fortunes += "A stitch in time saves " + std::to_string(i % 9) + ".\n%\nThe early bird " + std::to_string(i % 7) + ".\n%\n";
  std::filesystem::create_directories(dir / "corpus");
  testing::write_text(dir / "corpus" / "a.txt", fortunes);
  testing::write_text(dir / "corpus" / "b.txt", fortunes);
  const std::string in = "cd " + dir.string() + " && OMP_NUM_THREADS=1 " + std::string(TESSERA_EXE) + " ";

  testing::CommandResult r =
      testing::run_command(in + "tokenizer-train --in corpus/*.txt --vocab-size 300 --out data/tokenizer.json 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "data" / "tokenizer.json")) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "wrote data/tokenizer.json (")) << r.output;

  r = testing::run_command(in + "tokenizer-train --in corpus/a.txt --vocab-size 280 --out other/ 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "other" / "tokenizer.json")) << r.output;
  r = testing::run_command(in + "tokenizer-train --in corpus/a.txt --vocab-size 280 --out other 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;  // an existing folder too
  EXPECT_TRUE(testing::contains(r.output, "wrote other/tokenizer.json")) << r.output;

  // A file standing where the folder should be is refused before any merge is made.
  testing::write_text(dir / "blocked", "x");
  r = testing::run_command(in + "tokenizer-train --in corpus/a.txt --out blocked/tokenizer.json 2>&1");
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "blocked")) << r.output;
  EXPECT_FALSE(testing::contains(r.output, "merges")) << r.output;

  r = testing::run_command(in + "tokenize --tokenizer data/tokenizer.json --in corpus/*.txt --out data/ --val-every 100 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--val-every 100 sent no document to validation (the corpus gave 2 documents"))
      << r.output;
  EXPECT_TRUE(testing::contains(r.output, "--delimiter")) << r.output;
  EXPECT_FALSE(std::filesystem::exists(dir / "data" / "val_000000.bin"));

  r = testing::run_command(in + "tokenize --tokenizer data/tokenizer.json --in corpus/*.txt --out data/ --val-every 100 "
                                "--delimiter % --overwrite 2>&1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "480 documents")) << r.output;
  EXPECT_FALSE(testing::contains(r.output, "sent no document")) << r.output;
  EXPECT_TRUE(std::filesystem::exists(dir / "data" / "val_000000.bin"));
}

}  // namespace tessera
