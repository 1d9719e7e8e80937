// Corpus files into token shards: JSON lines (plain and gzip-compressed) give the same shards as the
// same documents in text files with a delimiter; the thread count changes nothing; the progress
// sees every byte; bad JSON lines and a wrong key name the file, the line and the fix.
#include <gtest/gtest.h>
#include <zlib.h>

#include <nlohmann/json.hpp>

#include "data/bpe_trainer.h"
#include "data/corpus.h"
#include "data/document_reader.h"
#include "data/token_shard.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;
using testing::contains;
using testing::error_of;

const std::vector<std::string> kDocuments = {
    "The quick brown fox jumps over the lazy dog.\n", "Second document, with \"quotes\" and a\ttab.\n",
    "Unicode: héllo wörld — ünïcödé ✓\n", "Last one\nhas two lines.\n"};

// A byte-level tokenizer trained on the documents themselves: small and always at hand.
Tokenizer tokenizer_for(const fs::path& dir) {
  std::string text;
  for (int i = 0; i < 20; ++i)
    for (const std::string& d : kDocuments) text += d;
  testing::write_text(dir / "train.txt", text);
  return train_bpe({dir / "train.txt"}, 300);
}

std::string jsonl_of(const std::vector<std::string>& documents) {
  std::string text;
  for (const std::string& d : documents) text += nlohmann::json{{"id", 7}, {"text", d}}.dump() + "\n";
  return text;
}

void write_gzip(const fs::path& path, const std::string& text) {
  gzFile f = gzopen(path.c_str(), "wb");
  ASSERT_NE(f, nullptr);
  ASSERT_EQ(gzwrite(f, text.data(), unsigned(text.size())), int(text.size()));
  gzclose(f);
}

// Every token of the run's shards, in the order it wrote them.
std::vector<uint32_t> shard_tokens(const CorpusStats& stats) {
  std::vector<uint32_t> tokens;
  for (const fs::path& shard : stats.shards) {
    const TokenShard s(shard);
    for (int64_t i = 0; i < s.num_tokens(); ++i) tokens.push_back(s.token(i));
  }
  return tokens;
}

TEST(Corpus, JsonLinesPlainOrGzipGiveTheTextFilesShards) {
  const fs::path dir = testing::scratch_dir();
  const Tokenizer tokenizer = tokenizer_for(dir);
  std::string delimited;
  for (const std::string& d : kDocuments) delimited += d + "%\n";
  testing::write_text(dir / "docs.txt", delimited);
  testing::write_text(dir / "docs.jsonl", jsonl_of(kDocuments));
  write_gzip(dir / "docs.jsonl.gz", jsonl_of(kDocuments));

  ShardOptions text;
  text.documents.delimiter = "%";
  text.val_every = 3;
  const CorpusStats reference = tokenize_to_shards(tokenizer, {dir / "docs.txt"}, dir / "text", text);
  EXPECT_EQ(reference.documents, 4);
  for (const char* name : {"docs.jsonl", "docs.jsonl.gz"})
    for (int threads : {1, 3}) {
      ShardOptions jsonl;
      jsonl.val_every = 3;
      jsonl.threads = threads;
      std::vector<uint64_t> seen;
      const CorpusStats stats = tokenize_to_shards(tokenizer, {dir / name}, dir / (std::string(name) + std::to_string(threads)),
                                                   jsonl, [&](const CorpusStats& s) { seen.push_back(s.bytes_read); });
      SCOPED_TRACE(std::string(name) + " threads " + std::to_string(threads));
      EXPECT_EQ(stats.documents, 4);
      EXPECT_EQ(stats.train_tokens, reference.train_tokens);
      EXPECT_EQ(stats.val_tokens, reference.val_tokens);
      EXPECT_EQ(shard_tokens(stats), shard_tokens(reference));
      ASSERT_FALSE(seen.empty());
      EXPECT_EQ(seen.back(), fs::file_size(dir / name));
      EXPECT_EQ(stats.bytes_total, fs::file_size(dir / name));
    }
}

TEST(Corpus, ManyDocumentsOnManyThreadsKeepTheirOrder) {
  const fs::path dir = testing::scratch_dir();
  const Tokenizer tokenizer = tokenizer_for(dir);
  std::vector<std::string> documents;
  for (int i = 0; i < 1000; ++i) documents.push_back(kDocuments[size_t(i) % kDocuments.size()] + std::to_string(i));
  write_gzip(dir / "many.jsonl.gz", jsonl_of(documents));
  ShardOptions one, many;
  many.threads = 4;
  one.shard_tokens = many.shard_tokens = 5000;  // several shards
  const CorpusStats a = tokenize_to_shards(tokenizer, {dir / "many.jsonl.gz"}, dir / "one", one);
  const CorpusStats b = tokenize_to_shards(tokenizer, {dir / "many.jsonl.gz"}, dir / "many", many);
  EXPECT_GT(a.shards.size(), 2u);
  EXPECT_EQ(shard_tokens(a), shard_tokens(b));
  // Document 999 is the last: its digits end the stream.
  const std::vector<int32_t> last = tokenizer.encode(documents.back());
  const std::vector<uint32_t> tokens = shard_tokens(b);
  ASSERT_GE(tokens.size(), last.size());
  EXPECT_TRUE(std::equal(last.begin(), last.end(), tokens.end() - long(last.size())));
}

TEST(Corpus, WholeTextFilesKeepEveryByte) {
  const fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "a.txt", std::string("no final newline\r\n\nwith a NUL \0 byte", 35));
  DocumentReader reader(dir / "a.txt", DocumentOptions{});
  std::string document;
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, std::string("no final newline\r\n\nwith a NUL \0 byte", 35));
  EXPECT_FALSE(reader.next(document));
}

TEST(Corpus, BadJsonLinesNameTheFileTheLineAndTheFix) {
  const fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "bad.jsonl", "{\"text\": \"fine\"}\n\n[1, 2]\n");
  auto read_all = [](const fs::path& file, DocumentOptions options = {}) {
    DocumentReader reader(file, options);
    for (std::string d; reader.next(d);) {
    }
  };
  std::string message = error_of([&] { read_all(dir / "bad.jsonl"); });
  EXPECT_TRUE(contains(message, "bad.jsonl' line 3: not a JSON object")) << message;
  testing::write_text(dir / "key.jsonl", "{\"content\": \"x\"}\n");
  message = error_of([&] { read_all(dir / "key.jsonl"); });
  EXPECT_TRUE(contains(message, "key.jsonl' line 1: no string under 'text'; name the documents' key with --jsonl-key"))
      << message;
  DocumentOptions content;
  content.jsonl_key = "content";
  read_all(dir / "key.jsonl", content);
  content.format = "parquet";
  message = error_of([&] { read_all(dir / "key.jsonl", content); });
  EXPECT_TRUE(contains(message, "--format: unknown value 'parquet'")) << message;
  // A truncated gzip file is refused, not read short.
  std::string compressed_source;
  for (int i = 0; i < 2000; ++i) compressed_source += "{\"text\": \"document " + std::to_string(i) + "\"}\n";
  write_gzip(dir / "whole.jsonl.gz", compressed_source);
  const std::string bytes = testing::read_text(dir / "whole.jsonl.gz");
  testing::write_text(dir / "cut.jsonl.gz", bytes.substr(0, bytes.size() / 2));
  message = error_of([&] { read_all(dir / "cut.jsonl.gz"); });
  EXPECT_TRUE(contains(message, "cut.jsonl.gz")) << message;
  EXPECT_TRUE(contains(message, "truncated")) << message;
}

// A lone UTF-16 surrogate escape, which Python's json.loads accepts, reads as U+FFFD (a pair, or an
// escaped backslash before "u", is left alone); raw bytes that are not UTF-8 are named by their
// offset, and a syntax error by where the parser stopped.
TEST(Corpus, JsonLinesWithBadUnicodeSayWhatIsWrong) {
  const fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "u.jsonl", "{\"text\": \"lone \\ud83d here\"}\n"
                                       "{\"text\": \"pair \\ud83d\\ude00 low \\udc00 end \\ud83d\"}\n"
                                       "{\"note\": \"\\\\ud83d\", \"text\": \"\\\\ud83d \\udbff\"}\n");
  DocumentReader reader(dir / "u.jsonl", DocumentOptions{});
  std::string document;
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, "lone \xEF\xBF\xBD here");
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, "pair \xF0\x9F\x98\x80 low \xEF\xBF\xBD end \xEF\xBF\xBD");
  ASSERT_TRUE(reader.next(document));
  EXPECT_EQ(document, "\\ud83d \xEF\xBF\xBD");
  EXPECT_FALSE(reader.next(document));

  auto error_for = [&](const std::string& line) {
    testing::write_text(dir / "bad.jsonl", "{\"text\": \"fine\"}\n" + line + "\n");
    return error_of([&] {
      DocumentReader bad(dir / "bad.jsonl", DocumentOptions{});
      for (std::string d; bad.next(d);) {
      }
    });
  };
  std::string message = error_for("{\"text\": \"caf\xE9 au lait\"}");
  EXPECT_TRUE(contains(message, "bad.jsonl' line 2: byte 14 (0xE9) is not UTF-8; JSON lines are UTF-8 text")) << message;
  message = error_for("{\"text\": \"overlong \xC0\xAF\"}");
  EXPECT_TRUE(contains(message, "line 2: byte 20 (0xC0) is not UTF-8")) << message;
  message = error_for("{\"text\": oops}");
  EXPECT_TRUE(contains(message, "line 2: not a JSON object (invalid JSON: error at byte 10); JSON lines hold one object per "
                                "line")) << message;
  message = error_for("{\"text\": \"a\", \"n\": 1e999}");  // the parser throws out_of_range, not parse_error
  EXPECT_TRUE(contains(message, "line 2: not a JSON object (invalid JSON: a number out of range)")) << message;
}

// Shards of an earlier run in --out would be read with this run's: refused, or with `overwrite`
// deleted (those files and nothing else) first.
TEST(Corpus, EarlierShardsInTheFolderAreRefusedOrOverwritten) {
  const fs::path dir = testing::scratch_dir();
  const Tokenizer tokenizer = tokenizer_for(dir);
  testing::write_text(dir / "docs.jsonl", jsonl_of(kDocuments));
  ShardOptions options;
  ASSERT_EQ(tokenize_to_shards(tokenizer, {dir / "docs.jsonl"}, dir / "out", options).shards.size(), 1u);
  for (const char* stray : {"train_000009.bin", "val_000000.bin", "val_000000.mask", "notes.txt", "train_notes.txt"})
    testing::write_text(dir / "out" / stray, "x");
  fs::create_directories(dir / "out" / "train_dir.bin");
  EXPECT_EQ(shard_files_in(dir / "out").size(), 4u);
  const std::string message = error_of([&] { tokenize_to_shards(tokenizer, {dir / "docs.jsonl"}, dir / "out", options); });
  EXPECT_TRUE(contains(message, "--out '" + (dir / "out").string() + "' already holds 4 shard files of an earlier run ('" +
                                (dir / "out" / "train_000000.bin").string() + "', ...)")) << message;
  EXPECT_TRUE(contains(message, "give --overwrite to delete them")) << message;
  EXPECT_TRUE(fs::exists(dir / "out" / "train_000009.bin"));
  options.overwrite = true;
  const CorpusStats stats = tokenize_to_shards(tokenizer, {dir / "docs.jsonl"}, dir / "out", options);
  EXPECT_EQ(stats.earlier_shards_removed, 4);
  EXPECT_EQ(shard_files_in(dir / "out"), std::vector<fs::path>{dir / "out" / "train_000000.bin"});
  for (const char* kept : {"notes.txt", "train_notes.txt", "train_dir.bin"}) EXPECT_TRUE(fs::exists(dir / "out" / kept)) << kept;
  EXPECT_TRUE(shard_files_in(dir / "absent").empty());
}

// A run that fails part way (a bad line after several shards) leaves none of its shards behind.
TEST(Corpus, AFailedRunRemovesTheShardsItWrote) {
  const fs::path dir = testing::scratch_dir();
  const Tokenizer tokenizer = tokenizer_for(dir);
  std::vector<std::string> documents;
  for (int i = 0; i < 250; ++i) documents.push_back(kDocuments[size_t(i) % kDocuments.size()]);
  testing::write_text(dir / "late.jsonl", jsonl_of(documents) + "oops\n" + jsonl_of(kDocuments));
  ShardOptions options;
  options.shard_tokens = 200;
  options.val_every = 10;
  const std::string message = error_of([&] { tokenize_to_shards(tokenizer, {dir / "late.jsonl"}, dir / "out", options); });
  EXPECT_TRUE(contains(message, "late.jsonl' line 251: not a JSON object")) << message;
  EXPECT_TRUE(contains(message, " shard files this run had written under '" + (dir / "out").string() + "'")) << message;
  EXPECT_TRUE(shard_files_in(dir / "out").empty());
}

// A corpus that gives no document is an error naming the files, not "0 documents" and success.
TEST(Corpus, NoDocumentsIsAnError) {
  const fs::path dir = testing::scratch_dir();
  const Tokenizer tokenizer = tokenizer_for(dir);
  testing::write_text(dir / "empty.txt", "");
  std::string message = error_of([&] { tokenize_to_shards(tokenizer, {dir / "empty.txt"}, dir / "a", ShardOptions{}); });
  EXPECT_TRUE(contains(message, "tokenize: no documents in '" + (dir / "empty.txt").string() + "' (empty files)"))
      << message;
  testing::write_text(dir / "blank.jsonl", jsonl_of({"", "", ""}));
  message = error_of([&] { tokenize_to_shards(tokenizer, {dir / "blank.jsonl"}, dir / "b", ShardOptions{}); });
  EXPECT_TRUE(contains(message, "tokenize: no text in '" + (dir / "blank.jsonl").string() + "': all 3 documents are "
                                "empty")) << message;
  testing::write_text(dir / "some.jsonl", jsonl_of({"", "text", ""}));
  const CorpusStats stats = tokenize_to_shards(tokenizer, {dir / "some.jsonl"}, dir / "c", ShardOptions{});
  EXPECT_EQ(stats.skipped_documents, 2);
  EXPECT_EQ(corpus_notes(stats, DocumentOptions{}), std::vector<std::string>{"2 empty documents left out"});
}

}  // namespace
}  // namespace tessera
