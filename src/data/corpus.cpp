// Corpus files -> documents (a batch at a time) -> tokens, encoded in parallel -> shards, in order.
#include "data/corpus.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <optional>

#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"
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

EncodedDocument encode_document(const Tokenizer& tokenizer, const std::vector<DocumentPiece>& pieces,
                                TextStart first) {
  EncodedDocument encoded{{tokenizer.document_start_token()}, {0}};
  TextStart start = first;
  for (const DocumentPiece& piece : pieces) {
    const std::vector<int32_t> ids = tokenizer.encode(piece.text, start);
    if (!ids.empty()) start = tokenizer.is_special(ids.back()) ? TextStart::after_special : TextStart::continuing;
    encoded.tokens.insert(encoded.tokens.end(), ids.begin(), ids.end());
    encoded.trained.insert(encoded.trained.end(), ids.size(), piece.trained ? 1 : 0);
  }
  return encoded;
}

namespace {

void check_options(const std::vector<std::filesystem::path>& files, const ShardOptions& options) {
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
}

// "'gpt' 3, 'human' 3": the roles and how many messages had each, the ten most common first.
std::string roles_text(const std::map<std::string, int64_t>& roles) {
  std::vector<std::pair<std::string, int64_t>> sorted(roles.begin(), roles.end());
  std::stable_sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  std::string text;
  for (size_t i = 0; i < sorted.size() && i < 10; ++i)
    text += (i > 0 ? ", " : "") + quoted_text(sorted[i].first, 40) + " " + std::to_string(sorted[i].second);
  if (sorted.size() > 10) text += " and " + std::to_string(sorted.size() - 10) + " more";
  return text.empty() ? "none" : text;
}

// Refuses an output folder that holds shard files of an earlier run, whose shards a glob such as
// train_*.bin would mix with this run's, unless `overwrite`, which deletes exactly those files.
int64_t clear_earlier_shards(const std::filesystem::path& out_dir, bool overwrite) {
  const std::vector<std::filesystem::path> earlier = shard_files_in(out_dir);
  TS_CHECK(earlier.empty() || overwrite, "--out ", quoted_text(out_dir.string()), " already holds ", earlier.size(),
           earlier.size() == 1 ? " shard file" : " shard files", " of an earlier run (",
           quoted_text(earlier.front().string()), earlier.size() > 1 ? ", ..." : "",
           "), which training on its train_*.bin would mix with this run's; give --overwrite to delete them ",
           "(train_*.bin, val_*.bin and their .mask files, nothing else), or another --out");
  for (const std::filesystem::path& file : earlier) {
    std::error_code error;
    std::filesystem::remove(file, error);
    TS_CHECK(!error, "--overwrite: cannot delete ", quoted_text(file.string()), " (", error.message(),
             "); delete it yourself or give another --out");
  }
  return int64_t(earlier.size());
}

// Deletes the shards (and masks) a failed run wrote; what the error should add about them.
std::string remove_written(const CorpusStats& stats, const std::filesystem::path& out_dir) {
  std::string kept;
  int64_t removed = 0;
  for (const std::filesystem::path& shard : stats.shards)
    for (const std::filesystem::path& file : {shard, loss_mask_path(shard)}) {
      std::error_code error;
      if (std::filesystem::remove(file, error)) ++removed;
      if (error && kept.empty()) kept = quoted_text(file.string()) + " (" + error.message() + ")";
    }
  std::string note;
  if (removed > 0)
    note = "; removed the " + std::to_string(removed) + " shard files this run had written under " +
           quoted_text(out_dir.string());
  if (!kept.empty()) note += "; could not remove " + kept + ": delete this run's shards before training on the folder";
  if (stats.earlier_shards_removed > 0)
    note += " (--overwrite had deleted the " + std::to_string(stats.earlier_shards_removed) + " of an earlier run)";
  return note;
}

// Throws when the run wrote no document, saying why: no text, or records without a target.
void require_documents(const CorpusStats& stats, const std::vector<std::filesystem::path>& files,
                       const DocumentOptions& documents) {
  if (stats.documents > 0) return;
  const std::string in = files_text(files);
  const int64_t skipped = stats.skipped_documents;
  TS_CHECK(documents.chat_template.empty() || skipped == 0, "tokenize: none of the ", skipped, " conversations in ",
           in, " has a turn whose role is 'assistant', and a chat template trains on the assistant's turns alone ",
           "(roles seen: ", roles_text(stats.roles), "); name the roles user and assistant (ShareGPT's human and ",
           "gpt map to user and assistant)");
  TS_CHECK(documents.jsonl_prompt_key.empty() || skipped == 0, "tokenize: every one of the ", skipped,
           " records in ", in, " has an empty completion under ", quoted_text(documents.jsonl_key),
           ": nothing to train on; check --jsonl-key");
  TS_CHECK(skipped == 0, "tokenize: no text in ", in, ": all ", skipped, " documents are empty; check --jsonl-key ",
           "and --format");
  TS_FAIL("tokenize: no documents in ", in, " (empty files); give the corpus files");
}

// Reads the files' documents in batches, encodes each batch on the threads and appends it, in
// order, to the train and val shards.
void write_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
                  const std::filesystem::path& out_dir, const ShardOptions& options,
                  const std::function<void(const CorpusStats&)>& progress, CorpusStats& stats) {
  const DocumentOptions& documents = options.documents;
  const std::optional<ChatTemplate> chat =
      documents.chat_template.empty() ? std::nullopt : std::optional(ChatTemplate::named(documents.chat_template));
  const int version = tokenizer.vocab_size() <= 65536 ? 1 : 2;
  const MaskRule rule{!documents.jsonl_prompt_key.empty() || chat.has_value(), !tokenizer.bos_token().has_value(),
                      tokenizer.document_start_token(), options.pack_seq_len};
  ShardWriter train(out_dir, "train", options.shard_tokens, version, rule, stats);
  ShardWriter val(out_dir, "val", options.shard_tokens, version, rule, stats);
  // A batch: enough documents (or bytes) to keep every thread busy, few enough to bound memory.
  const size_t batch_documents = size_t(64 * options.threads);
  const size_t batch_bytes = size_t(options.threads) << 24;
  std::vector<DocumentRecord> batch;
  std::vector<EncodedDocument> encoded;
  std::vector<std::vector<std::string>> roles;  // each record's, when conversations
  uint64_t done_bytes = 0;  // of the files already read through
  // Parses (JSON lines) and encodes the batch on the threads, then appends it in order; a record's
  // error, the first in file order, is thrown here (not from inside the parallel region).
  auto encode_batch = [&](const DocumentReader& reader) {
    encoded.assign(batch.size(), {});
    roles.assign(batch.size(), {});
    std::vector<std::exception_ptr> errors(batch.size());
#pragma omp parallel for schedule(dynamic) num_threads(options.threads)
    for (size_t d = 0; d < batch.size(); ++d) {
      try {
        Document document;
        reader.document_of(batch[d], document);
        roles[d] = std::move(document.roles);
        if (!document.has_target()) continue;  // nothing to train on
        encoded[d] = encode_document(tokenizer, document.pieces,
                                     document.roles.empty() ? TextStart::input : TextStart::after_special);
      } catch (...) {
        errors[d] = std::current_exception();
      }
    }
    for (const std::exception_ptr& error : errors)
      if (error) std::rethrow_exception(error);
    for (size_t d = 0; d < batch.size(); ++d) {
      for (const std::string& role : roles[d]) {
        ++stats.roles[role];
        if (chat && !chat->knows_role(role)) ++stats.unknown_roles[role];
      }
      if (encoded[d].tokens.empty()) {  // skipped: no target
        ++stats.skipped_documents;
        continue;
      }
      ++stats.documents;
      const bool to_val = options.val_every > 0 && stats.documents % options.val_every == 0;
      (to_val ? val : train).add(encoded[d]);
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
}

}  // namespace

std::string files_text(const std::vector<std::filesystem::path>& files) {
  std::string text;
  for (size_t i = 0; i < files.size() && i < 3; ++i) text += (i > 0 ? ", " : "") + quoted_text(files[i].string());
  if (files.size() > 3) text += " and " + std::to_string(files.size() - 3) + " more files";
  return text;
}

std::vector<std::filesystem::path> shard_files_in(const std::filesystem::path& dir) {
  std::vector<std::filesystem::path> files;
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return files;
  for (const std::filesystem::directory_entry& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = entry.path().filename().string();
    const bool shard_name = (name.starts_with("train_") || name.starts_with("val_")) &&
                            (name.ends_with(".bin") || name.ends_with(".mask"));
    std::error_code kind_error;
    const bool file = entry.is_symlink(kind_error) || entry.is_regular_file(kind_error);
    if (shard_name && file) files.push_back(entry.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> corpus_notes(const CorpusStats& stats, const DocumentOptions& documents) {
  std::vector<std::string> notes;
  const int64_t skipped = stats.skipped_documents, records = stats.documents + stats.skipped_documents;
  if (skipped > 0 && !documents.chat_template.empty())
    notes.push_back(std::to_string(skipped) + " of the " + std::to_string(records) + " conversations left out: " +
                    "no turn whose role is 'assistant', which a chat template trains on (roles seen: " +
                    roles_text(stats.roles) + "; ShareGPT's human and gpt map to user and assistant)");
  else if (skipped > 0 && !documents.jsonl_prompt_key.empty())
    notes.push_back(std::to_string(skipped) + " of the " + std::to_string(records) + " records left out: an empty " +
                    "completion under " + quoted_text(documents.jsonl_key));
  else if (skipped > 0)
    notes.push_back(std::to_string(skipped) + " empty documents left out");
  if (!stats.unknown_roles.empty())
    notes.push_back("roles the " + documents.chat_template + " template does not know, rendered as given (messages: " +
                    roles_text(stats.unknown_roles) + "); it knows " +
                    ChatTemplate::named(documents.chat_template).known_roles());
  return notes;
}

CorpusStats tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
                               const std::filesystem::path& out_dir, const ShardOptions& options,
                               const std::function<void(const CorpusStats&)>& progress) {
  check_options(files, options);
  create_folder(out_dir, "--out");
  CorpusStats stats;
  for (const std::filesystem::path& file : files) {
    require_regular_file(file, "text file");
    stats.bytes_total += std::filesystem::file_size(file);
  }
  const DocumentOptions& documents = options.documents;
  if (!documents.chat_template.empty()) ChatTemplate::named(documents.chat_template).require_tokens_of(tokenizer);
  stats.earlier_shards_removed = clear_earlier_shards(out_dir, options.overwrite);
  try {
    write_shards(tokenizer, files, out_dir, options, progress, stats);
    require_documents(stats, files, documents);
  } catch (const Error& e) {
    throw Error(e.what() + remove_written(stats, out_dir), e.where());
  } catch (...) {
    remove_written(stats, out_dir);
    throw;
  }
  return stats;
}

}  // namespace tessera
