// tessera tokenize / tokenizer-train: corpus files (text or JSON lines, plain or .gz) -> llm.c token
// shards, and training a BPE.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>
#include <unistd.h>

#include "commands.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/bpe_trainer.h"
#include "data/corpus.h"
#include "data/document_reader.h"
#include "data/tokenizer.h"

namespace tessera::cli {

namespace {

// How the corpus files hold their documents (data/document_reader.h); with `fine_tuning`, also
// prompts and conversations, which make loss masks (tokenize alone).
void add_document_flags(CLI::App& cmd, DocumentOptions& documents, bool fine_tuning) {
  cmd.add_option("--format", documents.format,
                 "auto (JSON lines for *.jsonl, *.ndjson and their .gz, else text), text or jsonl")
      ->capture_default_str();
  cmd.add_option("--jsonl-key", documents.jsonl_key, "JSON lines: the key whose string is each document")
      ->capture_default_str();
  cmd.add_option("--delimiter", documents.delimiter,
                 "Text: a line that separates documents (e.g. %); default: one document per file");
  if (!fine_tuning) return;
  cmd.add_option("--jsonl-prompt-key", documents.jsonl_prompt_key,
                 "JSON lines: the key of each document's prompt (supervised fine-tuning: the shards get loss "
                 "masks that train on the completions under --jsonl-key alone)");
  cmd.add_option("--chat-template", documents.chat_template,
                 "JSON lines: --jsonl-key holds a list of messages ({\"role\", \"content\"}), rendered with "
                 "this template (llama3, chatml, qwen2.5, qwen3, phi3, phi4 or olmo2); the shards get loss masks that train on the assistant's turns");
}

// A tokenizer without a merge (the 256 bytes and <|endoftext|>) is what an empty corpus gives: refused
// rather than written.
void require_merges(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files) {
  if (!tokenizer.merges().empty()) return;
  TS_FAIL("tokenizer-train: no text to learn from in ", files_text(files), " (no pair of bytes to merge: the documents are empty ",
          "or one byte long); give the corpus files, and check --format, --jsonl-key and --delimiter");
}

// tokenizer-train's --out, settled before the corpus is read so that a path it cannot write fails at
// once rather than after the merges: a folder (one that exists, or a path ending in '/') gets its
// tokenizer.json; the file's folder is created when missing and must take a new file.
std::filesystem::path tokenizer_out_file(const std::string& out) {
  namespace fs = std::filesystem;
  TS_CHECK(!out.empty(), "--out must name the tokenizer.json to write");
  std::error_code ec;
  fs::path file = out;
  if (out.back() == '/' || fs::is_directory(file, ec)) file /= "tokenizer.json";
  TS_CHECK(!fs::is_directory(file, ec), "--out ", quoted_text(file.string()), " is a folder; name the file to write");
  const fs::path folder = file.has_parent_path() ? file.parent_path() : fs::path(".");
  create_folder(folder, "--out's folder");
  const fs::path probe = folder / (".tessera-write-test." + std::to_string(::getpid()));
  const bool writable = std::ofstream(probe).good();
  fs::remove(probe, ec);
  TS_CHECK(writable, "--out ", quoted_text(file.string()), ": cannot create a file in ", quoted_text(folder.string()),
           "; check the folder is writable");
  return file;
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  struct Options {
    std::string tokenizer, out;
    std::vector<std::string> inputs;
    ShardOptions shards;
    bool quiet = false;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "tokenize", "Encode corpus files (text or JSON lines, plain or gzip) into llm.c token shards");
  cmd->add_option("--tokenizer", o->tokenizer,
                  "tokenizer.json, a *.tiktoken rank file, or a folder holding tokenizer.json (a Hugging Face "
                  "model's) or encoder.json + vocab.bpe")
      ->required();
  cmd->add_option("--in", o->inputs, "Corpus files: text, or JSON lines (*.jsonl), either plain or gzip (*.gz)")
      ->required();
  cmd->add_option("--out", o->out, "Output folder for train_*.bin / val_*.bin")->required();
  add_document_flags(*cmd, o->shards.documents, true);
  cmd->add_option("--val-every", o->shards.val_every, "Every n-th document goes to validation (0 = none)")
      ->capture_default_str();
  cmd->add_option("--shard-tokens", o->shards.shard_tokens, "Tokens per shard file")->capture_default_str();
  cmd->add_option("--pack-seq-len", o->shards.pack_seq_len,
                  "Fine-tuning data: keep every document inside one training window of this --seq-len (padding "
                  "left out of the loss; longer documents cut); 0 = documents run on across windows")
      ->capture_default_str();
  o->shards.threads = int(std::max(1u, std::thread::hardware_concurrency()));
  cmd->add_option("--threads", o->shards.threads, "Documents encoded at once (default: every core; the shards do not depend on it)")
      ->capture_default_str();
  cmd->add_flag("--overwrite", o->shards.overwrite,
                "Delete the shard files an earlier run left in --out (train_*.bin, val_*.bin and their .mask "
                "files, nothing else) instead of refusing the folder");
  cmd->add_flag("--quiet", o->quiet, "No progress line");
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    Tokenizer tokenizer = Tokenizer::load(o->tokenizer);
    std::vector<std::filesystem::path> files(o->inputs.begin(), o->inputs.end());
    const auto start = std::chrono::steady_clock::now();
    auto progress = [&](const CorpusStats& s) {
      if (o->quiet) return;
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("\r%5.1f%% of %.1f MB read, %lld documents, %lld tokens, %.2f MB/s", 100.0 * double(s.bytes_read) /
                  double(std::max<uint64_t>(s.bytes_total, 1)), double(s.bytes_total) / 1e6, (long long)s.documents,
                  (long long)(s.train_tokens + s.val_tokens), double(s.bytes_read) / 1e6 / std::max(seconds, 1e-9));
      std::fflush(stdout);
    };
    CorpusStats stats = tokenize_to_shards(tokenizer, files, o->out, o->shards, progress);
    std::printf("%s%lld documents -> %lld train + %lld val tokens in %zu shards under %s\n", o->quiet ? "" : "\n",
                (long long)stats.documents, (long long)stats.train_tokens, (long long)stats.val_tokens,
                stats.shards.size(), o->out.c_str());
    if (!o->shards.documents.jsonl_prompt_key.empty() || !o->shards.documents.chat_template.empty())
      std::printf("loss masks beside the shards: %lld of the tokens (%.1f%%) are targets\n",
                  (long long)stats.trained_tokens,
                  100.0 * double(stats.trained_tokens) / double(std::max<int64_t>(stats.train_tokens + stats.val_tokens, 1)));
    if (o->shards.pack_seq_len > 0)
      std::printf("packed for --seq-len %lld: %lld padding tokens, %lld documents longer than a window cut\n",
                  (long long)o->shards.pack_seq_len, (long long)stats.padding_tokens,
                  (long long)stats.truncated_documents);
    if (stats.earlier_shards_removed > 0)
      std::printf("--overwrite: deleted %lld shard file%s of an earlier run first\n",
                  (long long)stats.earlier_shards_removed, stats.earlier_shards_removed == 1 ? "" : "s");
    for (const std::string& note : corpus_notes(stats, o->shards.documents)) std::printf("note: %s\n", note.c_str());
    // Document n goes to validation when n is a multiple of --val-every: a corpus of fewer documents
    // gives none, and a later --val-data 'out/val_*.bin' would match nothing.
    if (o->shards.val_every > 0 && stats.val_tokens == 0) {
      const bool whole_text_files =
          o->shards.documents.delimiter.empty() && std::any_of(files.begin(), files.end(), [&](const auto& f) {
            return document_format(o->shards.documents, f) == DocumentFormat::text;
          });
      std::printf("note: --val-every %lld sent no document to validation (the corpus gave %lld documents; document %lld "
                  "would be the first), so no val_*.bin was written: give a smaller --val-every%s\n",
                  (long long)o->shards.val_every, (long long)stats.documents, (long long)o->shards.val_every,
                  whole_text_files
                      ? ", or --delimiter if each text file holds many documents (a text file is one document without it)"
                      : "");
    }
  });
}

void add_tokenizer_train_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> inputs;
    std::string out = "tokenizer.json";
    int64_t vocab_size = 4096;
    DocumentOptions documents;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "tokenizer-train", "Train a byte-level BPE tokenizer on corpus files (text or JSON lines, plain or gzip)");
  cmd->add_option("--in", o->inputs, "Corpus files: text, or JSON lines (*.jsonl), either plain or gzip (*.gz)")
      ->required();
  add_document_flags(*cmd, o->documents, false);
  cmd->add_option("--vocab-size", o->vocab_size, "Tokens in the vocabulary, <|endoftext|> included")
      ->capture_default_str();
  cmd->add_option("--out", o->out, "Where to write tokenizer.json (a folder: its tokenizer.json; created if missing)")
      ->capture_default_str();
  enable_toml_config(*cmd);
  cmd->callback([o, cmd] {
    apply_toml_config(*cmd);
    const std::filesystem::path out = tokenizer_out_file(o->out);
    std::vector<std::filesystem::path> files(o->inputs.begin(), o->inputs.end());
    Tokenizer tokenizer = train_bpe(files, o->vocab_size, [](int64_t done, int64_t total) {
      if (done == total || done % 256 == 0) std::printf("\rmerges %lld/%lld", (long long)done, (long long)total);
      std::fflush(stdout);
    }, o->documents);
    require_merges(tokenizer, files);
    tokenizer.save_json(out);
    std::printf("\nwrote %s (%lld tokens)\n", out.string().c_str(), (long long)tokenizer.vocab_size());
    if (tokenizer.vocab_size() < o->vocab_size)
      std::printf("note: the corpus ran out of pairs to merge: the tokenizer has %lld tokens, not the --vocab-size "
                  "%lld asked for; a larger corpus gives more\n",
                  (long long)tokenizer.vocab_size(), (long long)o->vocab_size);
  });
}

}  // namespace tessera::cli
