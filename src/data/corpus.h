// Turning corpus files (text or JSON lines, plain or gzip-compressed: data/document_reader.h) into
// llm.c token shards: each document is preceded by the tokenizer's BOS when its post-processor adds
// one (Llama 3: <|begin_of_text|>), else by <|endoftext|> (the GPT-2 / llm.c convention); every
// val_every-th document goes to the validation split. Documents are encoded on several threads in
// batches and written in their order, so the shards do not depend on the thread count. A corpus
// with prompts (DocumentOptions::jsonl_prompt_key) or conversations (chat_template) gets a loss
// mask beside every shard (data/loss_mask.h): its completions or assistant turns, and the
// <|endoftext|> ending each document, are the targets. A run never mixes with another: it refuses an
// output folder holding shards (or deletes exactly those, with `overwrite`), removes the shards it
// wrote when it fails, and fails when the corpus gives no document.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "data/document_reader.h"
#include "data/tokenizer.h"

namespace tessera {

struct ShardOptions {
  DocumentOptions documents;         // how the files hold documents
  int64_t val_every = 0;             // every n-th document to the validation split; 0 = none
  int64_t shard_tokens = 100000000;  // tokens per shard file
  int threads = 1;                   // documents encoded at once
  // With loss masks: lay documents out so that none crosses a training window of this many tokens
  // (the --seq-len to train with), padding the rest of a window with untrained start tokens and
  // cutting a longer document to its first tokens; 0: documents run on across windows.
  int64_t pack_seq_len = 0;
  // Delete the shard files (shard_files_in) an earlier run left in the output folder; without, a
  // folder holding any is refused.
  bool overwrite = false;
};

// A document's tokens as the shards hold them: the tokenizer's document start token, then each
// piece encoded alone; trained[i] says whether tokens[i] is a target by its piece (the start
// token's bit is 0: whether it trains depends on what comes before it).
struct EncodedDocument {
  std::vector<int32_t> tokens;
  std::vector<uint8_t> trained;
};
// The document start token, then the pieces encoded as one text (each continuing the one before it
// unless that one ended with a special token); `first` says where the first piece starts (a chat
// template's rendering follows its start token's text, as Hugging Face's templates write it).
EncodedDocument encode_document(const Tokenizer& tokenizer, const std::vector<DocumentPiece>& pieces,
                                TextStart first = TextStart::input);

struct CorpusStats {
  int64_t documents = 0;
  uint64_t bytes_read = 0, bytes_total = 0;  // of the files as stored
  int64_t train_tokens = 0;
  int64_t val_tokens = 0;
  int64_t trained_tokens = 0;  // of the tokens written, those the loss masks make targets (0 without masks)
  int64_t padding_tokens = 0;       // packed: the filler written to keep documents inside windows
  int64_t truncated_documents = 0;  // packed: documents longer than a window, cut
  // Records with nothing to train on, left out: empty documents or completions, or conversations
  // without an assistant turn.
  int64_t skipped_documents = 0;
  std::map<std::string, int64_t> roles;          // conversations: their messages by role
  std::map<std::string, int64_t> unknown_roles;  // of those, the roles the chat template does not know
  int64_t earlier_shards_removed = 0;            // files of an earlier run `overwrite` deleted
  std::vector<std::filesystem::path> shards;
};

// Input files for a message: the first three quoted, then how many more.
std::string files_text(const std::vector<std::filesystem::path>& files);

// The files a tokenize run writes, or an earlier one left, directly under `dir`: train_*.bin,
// val_*.bin and their .mask files, sorted; none when `dir` does not exist.
std::vector<std::filesystem::path> shard_files_in(const std::filesystem::path& dir);

// Lines for the user about what a finished run left out or could not render as the model's template
// would (skipped records, unknown chat roles); empty when there is nothing to say.
std::vector<std::string> corpus_notes(const CorpusStats& stats, const DocumentOptions& documents);

// Writes <out_dir>/train_NNNNNN.bin (and val_NNNNNN.bin) shards, uint16 tokens when the
// vocabulary fits, uint32 otherwise, and their .mask files when the documents have prompts or are
// conversations (whose template's special tokens the tokenizer must hold).
// `progress`, when given, sees the counts after each batch of documents. Throws, having removed the
// shards it wrote, on any error, and when the files give no document to write.
CorpusStats tokenize_to_shards(const Tokenizer& tokenizer, const std::vector<std::filesystem::path>& files,
                               const std::filesystem::path& out_dir, const ShardOptions& options,
                               const std::function<void(const CorpusStats&)>& progress = {});

}  // namespace tessera
