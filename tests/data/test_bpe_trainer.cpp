// BPE training: exact vocabulary size, round trips, determinism and tie rule, agreement with a
// plain recount-every-step trainer (also on one long word and on runs of one letter), save_json ->
// load, and the fortunes corpus when installed.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>

#include "data/bpe_trainer.h"
#include "data/pretokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// Deterministic text of made-up words (1-3 syllables) with punctuation, digits, newlines and
// non-ASCII letters: rich enough for several hundred merges.
std::string sample_text(int words, uint32_t seed) {
  const std::vector<std::string> syllables = {"the", "qu",  "ick", "br", "own", "fo",   "x",   "ju", "mps", "ov",
                                              "er",  "la",  "zy",  "do", "g",   "an",   "d",   "'s", "'ll", "to",
                                              "ken", "mer", "ge",  "ca", "fé",  "na",   "ïve", "中", "文",  "19",
                                              "84",  "4",   "2",   "—",  "ing", "tion", "al",  "re", "un",  "st"};
  std::mt19937 rng(seed);
  std::string text;
  for (int i = 0; i < words; ++i) {
    for (int n = 1 + int(rng() % 3); n > 0; --n) text += syllables[rng() % syllables.size()];
    uint32_t r = rng() % 20;
    text += r == 0 ? ".\n" : r == 1 ? ", " : r == 2 ? "\n\n" : r == 3 ? "  " : " ";
  }
  return text;
}

fs::path write_sample(const fs::path& dir, int words, uint32_t seed) {
  fs::path file = dir / ("sample" + std::to_string(seed) + ".txt");
  testing::write_text(file, sample_text(words, seed));
  return file;
}

// The plain algorithm: recount every pair of every word at each step, take the most frequent
// pair (smallest (left, right) among equals), merge it everywhere.
std::vector<BpeMerge> train_by_recounting(const std::string& text, int merges_wanted) {
  std::vector<std::string_view> pieces;
  Pretokenizer().split(text, pieces);
  std::map<std::string_view, int64_t> counts;
  for (std::string_view p : pieces) ++counts[p];
  std::vector<std::pair<std::vector<int32_t>, int64_t>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<int32_t> symbols;
    for (unsigned char c : piece) symbols.push_back(c);
    words.push_back({symbols, count});
  }
  std::vector<BpeMerge> merges;
  for (int32_t next = 256; int(merges.size()) < merges_wanted; ++next) {
    std::map<std::pair<int32_t, int32_t>, int64_t> pairs;
    for (const auto& [s, count] : words)
      for (size_t i = 0; i + 1 < s.size(); ++i) pairs[{s[i], s[i + 1]}] += count;
    if (pairs.empty()) break;
    auto best = std::max_element(pairs.begin(), pairs.end(), [](const auto& a, const auto& b) {
      return a.second != b.second ? a.second < b.second : a.first > b.first;
    });
    auto [left, right] = best->first;
    merges.push_back({left, right, next});
    for (auto& [s, count] : words) {
      std::vector<int32_t> merged;
      for (size_t i = 0; i < s.size(); ++i) {
        bool hit = i + 1 < s.size() && s[i] == left && s[i + 1] == right;
        merged.push_back(hit ? next : s[i]);
        i += hit;
      }
      s = merged;
    }
  }
  return merges;
}

TEST(BpeTrainer, LearnsExactVocabularyThatRoundTrips) {
  fs::path dir = testing::scratch_dir();
  fs::path file = write_sample(dir, 5000, 1);
  Tokenizer tok = train_bpe({file}, 400);
  EXPECT_EQ(tok.vocab_size(), 400);
  EXPECT_EQ(tok.merges().size(), 143u);
  EXPECT_EQ(tok.eot_token(), 399);
  EXPECT_EQ(tok.token_text(399), "<|endoftext|>");
  EXPECT_EQ(tok.token_text('a'), "a");
  std::string text = testing::read_text(file);
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_LT(ids.size() * 2, text.size());  // the merges compress the text they were learned on
  std::string unseen = sample_text(300, 99) + "<|endoftext|>ünseen \xFF\xFE bytes";
  EXPECT_EQ(tok.decode(tok.encode(unseen)), unseen);
}

TEST(BpeTrainer, AgreesWithRecountingEveryStep) {
  fs::path dir = testing::scratch_dir();
  fs::path file = write_sample(dir, 3000, 2);
  Tokenizer tok = train_bpe({file}, 257 + 300);
  EXPECT_EQ(tok.merges(), train_by_recounting(testing::read_text(file), 300));
}

// One pre-tokenised word of 20,000 random letters (junk lines, DNA, base64 look like this): each
// merge must cost what it changes, not the length of the word; the merges stay those of a recount.
TEST(BpeTrainer, LongWordAgreesWithRecountingEveryStep) {
  fs::path dir = testing::scratch_dir();
  std::mt19937 rng(7);
  std::string text;
  for (int i = 0; i < 20000; ++i) text += char('a' + rng() % 4);
  testing::write_text(dir / "long.txt", text);
  Tokenizer tok = train_bpe({dir / "long.txt"}, 257 + 200);
  EXPECT_EQ(tok.merges(), train_by_recounting(text, 200));
  EXPECT_EQ(tok.decode(tok.encode(text)), text);
}

// Runs of one letter overlap their own pair: "aaaaa" merges left to right into "aa aa a", and
// the counts of (a, a) and its successors must follow, in words of every length and count.
TEST(BpeTrainer, RunsOfOneLetterAgreeWithRecountingEveryStep) {
  fs::path dir = testing::scratch_dir();
  std::string text;
  for (int n = 1; n <= 40; ++n)
    for (int copies = 1 + n % 3; copies > 0; --copies) text.append(1, ' ').append(size_t(n), "xyz"[n % 3]);
  text.append(1, ' ').append(3001, 'q');
  testing::write_text(dir / "runs.txt", text);
  Tokenizer tok = train_bpe({dir / "runs.txt"}, 257 + 60);
  EXPECT_EQ(tok.merges(), train_by_recounting(text, 60));
}

TEST(BpeTrainer, IsDeterministicAndBreaksTiesBySmallerIds) {
  fs::path dir = testing::scratch_dir();
  fs::path file = write_sample(dir, 2000, 3);
  EXPECT_EQ(train_bpe({file}, 500).merges(), train_bpe({file}, 500).merges());
  // Pieces "ab" and " cd": all three pairs occur once; (' ', 'c') has the smallest ids.
  testing::write_text(dir / "tie.txt", "ab cd");
  Tokenizer tie = train_bpe({dir / "tie.txt"}, 259);
  ASSERT_EQ(tie.merges().size(), 2u);
  EXPECT_EQ(tie.merges()[0], (BpeMerge{' ', 'c', 256}));
  EXPECT_EQ(tie.merges()[1], (BpeMerge{'a', 'b', 257}));
}

TEST(BpeTrainer, NeverMergesAcrossEndOfText) {
  fs::path dir = testing::scratch_dir();
  std::string text;
  for (int i = 0; i < 200; ++i) text += "doc<|endoftext|>";
  testing::write_text(dir / "docs.txt", text);
  Tokenizer tok = train_bpe({dir / "docs.txt"}, 270);
  for (int32_t id = 0; id < tok.eot_token(); ++id)
    EXPECT_EQ(tok.token_text(id).find("endoftext"), std::string::npos) << tok.token_text(id);
  EXPECT_EQ(tok.encode("doc<|endoftext|>"), (std::vector<int32_t>{257, tok.eot_token()}));
}

TEST(BpeTrainer, StopsEarlyWhenNoPairIsLeftAndReportsProgress) {
  fs::path dir = testing::scratch_dir();
  testing::write_text(dir / "tiny.txt", "abab");
  std::vector<std::pair<int64_t, int64_t>> calls;
  Tokenizer tok = train_bpe({dir / "tiny.txt"}, 300, [&](int64_t done, int64_t total) {
    calls.push_back({done, total});
  });
  EXPECT_EQ(tok.vocab_size(), 256 + 2 + 1);  // "ab", then "abab"
  EXPECT_EQ(calls, (std::vector<std::pair<int64_t, int64_t>>{{1, 43}, {2, 43}}));
}

TEST(BpeTrainer, SavedJsonLoadsIdentically) {
  fs::path dir = testing::scratch_dir();
  Tokenizer tok = train_bpe({write_sample(dir, 4000, 4), write_sample(dir, 1000, 5)}, 600);
  tok.save_json(dir / "tokenizer.json");
  Tokenizer reloaded = Tokenizer::load(dir);
  EXPECT_EQ(reloaded.vocab_size(), 600);
  EXPECT_EQ(reloaded.merges(), tok.merges());
  EXPECT_EQ(reloaded.eot_token(), tok.eot_token());
  std::string text = sample_text(2000, 6) + "<|endoftext|>" + sample_text(100, 7);
  EXPECT_EQ(reloaded.encode(text), tok.encode(text));
}

TEST(BpeTrainer, TrainsOnTheFortunesCorpus) {
  std::vector<fs::path> files;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator("/usr/share/games/fortunes", ec))
    if (e.is_regular_file() && !e.is_symlink() && e.path().extension() != ".dat") files.push_back(e.path());
  if (files.size() < 10) GTEST_SKIP() << "the fortunes and fortunes-min packages are not installed";
  std::sort(files.begin(), files.end());
  Tokenizer tok = train_bpe(files, 2048);
  EXPECT_EQ(tok.vocab_size(), 2048);
  std::string text = testing::read_text(files[0]);
  std::vector<int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  EXPECT_GT(double(text.size()) / double(ids.size()), 2.5);  // bytes per token
}

}  // namespace
}  // namespace tessera
