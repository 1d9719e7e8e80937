// Corpus files -> documents (a batch at a time) -> tokens, encoded in parallel -> shards, in order.
#include "data/corpus.h"

#include <algorithm>
#include <cstdio>
#include <exception>

#include "core/error.h"
#include "core/file_checks.h"
#include "data/loss_mask.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"

namespace tessera {
namespace {

// How a split's loss masks treat a document's start token (its other tokens train as their pieces
// say): a target when it is <|endoftext|> ending the document just before, and never when it is a
// BOS (nothing predicts a BOS). Packed, documents keep inside windows of T + 1 tokens starting every
// T: a document fits a window when it ends before the window's last position (which is the next
// window's first), else the window is filled with start tokens (the first a target as the end of
// the document before, when the start token is <|endoftext|>) and the document begins the next.
struct MaskRule {
  bool masks = false;                // write loss masks (the corpus has prompts or conversations)
  bool start_ends_previous = false;  // the start token is <|endoftext|>
  int32_t start_token = 0;           // the filler, when packed
  int64_t pack_seq_len = 0;          // T; 0: not packed
};

// Accumulates tokens of one split (and their loss-mask bits) and flushes them into numbered shard
// files (and their masks).
class ShardWriter {
 public:
  // Packed, shards hold whole windows (a multiple of T tokens), so any run of them stays aligned.
  ShardWriter(std::filesystem::path dir, std::string split, int64_t shard_tokens, int version, MaskRule rule,
              CorpusStats& stats)
      : dir_(std::move(dir)), split_(std::move(split)),
        shard_tokens_(rule.pack_seq_len > 0 ? std::max(rule.pack_seq_len, shard_tokens / rule.pack_seq_len * rule.pack_seq_len)
                                            : shard_tokens),
        version_(version), rule_(rule), stats_(stats) {}

  void add(const EncodedDocument& document) {
    size_t length = document.tokens.size();
    bool cut = false;  // a cut document has no end to train
    if (const int64_t T = rule_.pack_seq_len; T > 0) {
      if (int64_t(length) > T) {
        length = size_t(T);
        cut = true;
        ++stats_.truncated_documents;
      }
      const int64_t at = total_ + pending(), window_last = at / T * T + T;
      if (at + int64_t(length) > window_last) pad(window_last - at);
    }
    for (size_t i = 0; i < length; ++i) push(document.tokens[i], i == 0 ? start_trains() : document.trained[i] != 0);
    follows_document_ = !cut;
  }

  int64_t total() const { return total_; }  // written to shard files
  int64_t pending() const { return int64_t(buffer_.size()); }

  void flush() {
    if (buffer_.empty()) return;
    char name[64];
    std::snprintf(name, sizeof name, "%s_%06d.bin", split_.c_str(), index_++);
    const std::filesystem::path path = dir_ / name;
    write_token_shard(path, buffer_, version_);
    if (rule_.masks) write_loss_mask(loss_mask_path(path), trained_, rule_.pack_seq_len);
    stats_.shards.push_back(path);
    total_ += int64_t(buffer_.size());
    for (uint8_t bit : trained_) stats_.trained_tokens += bit;
    buffer_.clear();
    trained_.clear();
  }

 private:
  // Whether a start token written now is a target: <|endoftext|> right after a whole document.
  bool start_trains() const { return rule_.start_ends_previous && follows_document_; }
  void push(int32_t token, bool trained) {
    buffer_.push_back(uint32_t(token));
    if (rule_.masks) trained_.push_back(trained ? 1 : 0);
    if (int64_t(buffer_.size()) == shard_tokens_) flush();
  }
  // `count` start tokens up to the window's end.
  void pad(int64_t count) {
    for (int64_t k = 0; k < count; ++k) push(rule_.start_token, k == 0 && start_trains());
    stats_.padding_tokens += count;
    follows_document_ = false;
  }

  std::filesystem::path dir_;
  std::string split_;
  int64_t shard_tokens_;
  int version_;
  MaskRule rule_;
  CorpusStats& stats_;
  std::vector<uint32_t> buffer_;
  std::vector<uint8_t> trained_;  // buffer_'s loss-mask bits, when the split has masks
  int index_ = 0;
  int64_t total_ = 0;
  bool follows_document_ = false;  // the last token written ends a (whole) document
};

}  // namespace

EncodedDocument encode_document(const Tokenizer& tokenizer, const std::vector<DocumentPiece>& pieces) {
  EncodedDocument encoded{{tokenizer.document_start_token()}, {0}};
  for (const DocumentPiece& piece : pieces) {
    const std::vector<int32_t> ids = tokenizer.encode(piece.text);
    encoded.tokens.insert(encoded.tokens.end(), ids.begin(), ids.end());
    encoded.trained.insert(encoded.trained.end(), ids.size(), piece.trained ? 1 : 0);
  }
  return encoded;
}

CorpusStats tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
                               const std::filesystem::path& out_dir, const ShardOptions& options,
                               const std::function<void(const CorpusStats&)>& progress) {
  TS_CHECK(!files.empty(), "tokenize: no input files");
  TS_CHECK(options.shard_tokens > 0, "--shard-tokens must be positive, got ", options.shard_tokens);
  TS_CHECK(options.val_every >= 0, "--val-every must not be negative, got ", options.val_every);
  TS_CHECK(options.threads >= 1 && options.threads <= 1024, "--threads must be in [1, 1024], got ", options.threads);
  TS_CHECK(options.pack_seq_len >= 0 && options.pack_seq_len <= (int64_t(1) << 24), "--pack-seq-len must be in [0, ",
           int64_t(1) << 24, "], got ", options.pack_seq_len);
  TS_CHECK(options.pack_seq_len == 0 || !options.documents.jsonl_prompt_key.empty() ||
               !options.documents.chat_template.empty(),
           "--pack-seq-len needs --jsonl-prompt-key or --chat-template: the padding it adds is kept out of the loss ",
           "by loss masks, which only fine-tuning data has");
  for (const std::filesystem::path& file : files) document_format(options.documents, file);  // --format, early
  create_folder(out_dir, "--out");
  const int version = tokenizer.vocab_size() <= 65536 ? 1 : 2;
  CorpusStats stats;
  for (const std::filesystem::path& file : files) {
    require_regular_file(file, "text file");
    stats.bytes_total += std::filesystem::file_size(file);
  }
  const DocumentOptions& documents = options.documents;
  if (!documents.chat_template.empty()) ChatTemplate::named(documents.chat_template).require_tokens_of(tokenizer);
  const MaskRule rule{!documents.jsonl_prompt_key.empty() || !documents.chat_template.empty(),
                      !tokenizer.bos_token().has_value(), tokenizer.document_start_token(), options.pack_seq_len};
  ShardWriter train(out_dir, "train", options.shard_tokens, version, rule, stats);
  ShardWriter val(out_dir, "val", options.shard_tokens, version, rule, stats);
  // A batch: enough documents (or bytes) to keep every thread busy, few enough to bound memory.
  const size_t batch_documents = size_t(64 * options.threads);
  const size_t batch_bytes = size_t(options.threads) << 24;
  std::vector<DocumentRecord> batch;
  std::vector<EncodedDocument> encoded;
  uint64_t done_bytes = 0;  // of the files already read through
  // Parses (JSON lines) and encodes the batch on the threads, then appends it in order; a record's
  // error, the first in file order, is thrown here (not from inside the parallel region).
  auto encode_batch = [&](const DocumentReader& reader) {
    encoded.assign(batch.size(), {});
    std::vector<std::exception_ptr> errors(batch.size());
#pragma omp parallel for schedule(dynamic) num_threads(options.threads)
    for (size_t d = 0; d < batch.size(); ++d) {
      try {
        Document document;
        reader.document_of(batch[d], document);
        if (!document.has_target()) continue;  // nothing to train on
        encoded[d] = encode_document(tokenizer, document.pieces);
      } catch (...) {
        errors[d] = std::current_exception();
      }
    }
    for (const std::exception_ptr& error : errors)
      if (error) std::rethrow_exception(error);
    for (const EncodedDocument& document : encoded) {
      if (document.tokens.empty()) continue;  // an empty document
      ++stats.documents;
      const bool to_val = options.val_every > 0 && stats.documents % options.val_every == 0;
      (to_val ? val : train).add(document);
    }
    stats.train_tokens = train.total() + train.pending();
    stats.val_tokens = val.total() + val.pending();
    batch.clear();
  };
  for (const std::filesystem::path& file : files) {
    DocumentReader reader(file, options.documents);
    size_t bytes = 0;
    for (DocumentRecord record; reader.next_record(record);) {
      bytes += record.bytes.size();
      batch.push_back(std::move(record));
      if (batch.size() < batch_documents && bytes < batch_bytes) continue;
      encode_batch(reader);
      bytes = 0;
      stats.bytes_read = done_bytes + reader.bytes_read();
      if (progress) progress(stats);
    }
    encode_batch(reader);  // a batch never spans two files: each record is parsed by its own reader
    done_bytes += reader.file_bytes();
  }
  train.flush();
  val.flush();
  stats.train_tokens = train.total();
  stats.val_tokens = val.total();
  stats.bytes_read = done_bytes;
  if (progress) progress(stats);
  return stats;
}

}  // namespace tessera
