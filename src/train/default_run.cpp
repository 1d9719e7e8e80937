// Default run: training defaults (checked) -> fortunes corpus -> BPE tokenizer -> token shards.
#include "train/default_run.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "core/error.h"
#include "data/bpe_trainer.h"
#include "data/corpus.h"
#include "data/tokenizer.h"
#include "train/run_refused.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

constexpr int64_t kDemoVocab = 4096;

std::vector<fs::path> fortune_files() {
  std::vector<fs::path> files;
  if (fs::is_directory(kFortunesDir))
    for (const fs::directory_entry& e : fs::directory_iterator(kFortunesDir)) {
      std::string ext = e.path().extension().string();
      if (e.is_regular_file() && !e.is_symlink() && ext != ".dat" && ext != ".u8") files.push_back(e.path());
    }
  TS_CHECK(!files.empty(), "the default run trains on Debian's fortunes corpus, but ", kFortunesDir,
           " holds none; run scripts/setup.sh (or apt-get install fortunes), or pass --train-data");
  std::sort(files.begin(), files.end());
  return files;
}

void prepare_corpus(const fs::path& data_dir) {
  const fs::path tokenizer_path = data_dir / "tokenizer.json";
  const bool have_shards = fs::exists(data_dir / "train_000000.bin") && fs::exists(data_dir / "val_000000.bin");
  if (fs::exists(tokenizer_path) && have_shards) return;
  std::vector<fs::path> files = fortune_files();
  auto start = std::chrono::steady_clock::now();
  std::printf("default run: training a %lld-token BPE tokenizer on %zu fortune files...\n", (long long)kDemoVocab,
              files.size());
  std::fflush(stdout);
  Tokenizer tokenizer = train_bpe(files, kDemoVocab);
  fs::create_directories(data_dir);
  tokenizer.save_json(tokenizer_path);
  ShardOptions shards;
  shards.overwrite = true;  // a half-built demo folder is the demo's own to rebuild
  shards.documents.delimiter = "%";
  shards.val_every = 20;
  CorpusStats stats = tokenize_to_shards(tokenizer, files, data_dir, shards);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("default run: %lld fortunes -> %lld train + %lld val tokens in %s (%.1f s)\n",
              (long long)stats.documents, (long long)stats.train_tokens, (long long)stats.val_tokens,
              data_dir.string().c_str(), seconds);
}

}  // namespace

void apply_default_run(TrainConfig& c, const std::function<bool(const std::string&)>& given) {
  // The demo is `train` with no data flag at all: a data flag without shards to train on is a
  // mistake (an unset $DATA, a forgotten flag), not a request for the demo, which would then score
  // the user's validation shards with its own tokenizer's model.
  TS_REFUSE_UNLESS(!given("--train-data"), "--train-data is empty; give a glob of token shards (tessera tokenize ",
                   "writes them), or no data flag at all for the built-in demo");
  for (const char* flag : {"--val-data", "--tokenizer"})
    TS_REFUSE_UNLESS(!given(flag), flag, " was given without --train-data; add --train-data (a glob of token ",
                     "shards), or leave out every data flag for the built-in demo");
  auto set = [&](const std::string& flag, auto& field, auto value) {
    if (!given(flag)) field = value;
  };
  // Another model (--model llama-mini, mixtral-mini, ...) gets a run folder of its own.
  set("--out-dir", c.out_dir, given("--model") ? "runs/demo-" + c.model : std::string("runs/demo"));
  // Running the demo again continues its run folder (a finished one says so and samples again)
  // instead of refusing a folder that holds checkpoints.
  c.resume = true;
  const fs::path data_dir = fs::path(c.out_dir) / "data";
  c.train_data = (data_dir / "train_*.bin").string();
  set("--val-data", c.val_data, (data_dir / "val_*.bin").string());
  set("--tokenizer", c.tokenizer, (data_dir / "tokenizer.json").string());
  set("--model", c.model, std::string("gpt2-mini"));
  set("--batch-size", c.batch_size, int64_t(16));
  set("--seq-len", c.seq_len, int64_t(128));
  set("--steps", c.steps, int64_t(1000));
  set("--lr", c.lr, 2e-3f);
  set("--min-lr", c.min_lr, 2e-4f);
  set("--warmup", c.warmup, int64_t(30));
  set("--eval-every", c.eval_every, int64_t(100));
  set("--eval-batches", c.eval_batches, int64_t(16));
  refuse_on_error([&] { c.validate(); });  // a bad flag says so before a second of tokenizing and a data folder
  prepare_corpus(data_dir);
}

}  // namespace tessera
