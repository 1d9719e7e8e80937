// Tokenizer building blocks on hand-made vocabularies (no downloads): the byte-level alphabet,
// GPT-2 pre-tokenisation, BPE merge order, special-token matching, decode and id checks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/bpe_merger.h"
#include "data/byte_level.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"

namespace tessera {
namespace {

std::vector<std::string> split(std::string_view text) {
  std::vector<std::string_view> pieces;
  Pretokenizer().split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

// The 256 byte tokens (id = byte value) followed by `extra`, with merges given as token texts.
Tokenizer tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merge_texts,
                         std::vector<std::string> specials) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  auto id_of = [&](const std::string& text) {
    for (size_t id = 0; id < tokens.size(); ++id)
      if (tokens[id] == text) return int32_t(id);
    ADD_FAILURE() << "no token " << text;
    return int32_t(-1);
  };
  std::vector<BpeMerge> merges;
  for (const auto& [left, right] : merge_texts) {
    tokens.push_back(left + right);
    merges.push_back({id_of(left), id_of(right), int32_t(tokens.size() - 1)});
  }
  std::vector<SpecialToken> special_tokens;
  for (const std::string& s : specials) {
    tokens.push_back(s);
    special_tokens.push_back({s, int32_t(tokens.size() - 1)});
  }
  return Tokenizer(tokens, merges, special_tokens, "tiny vocabulary");
}

TEST(TokenizerByteLevel, MapsBytesLikeGpt2) {
  EXPECT_EQ(byte_level_encode(" "), "\u0120");   // Ġ
  EXPECT_EQ(byte_level_encode("\n"), "\u010A");  // Ċ
  EXPECT_EQ(byte_level_encode("hello!"), "hello!");
  EXPECT_EQ(byte_level_encode(std::string(1, '\0')), "\u0100");
  EXPECT_EQ(byte_level_encode("\xAD"), "\u0143");  // the last shifted byte
  EXPECT_EQ(byte_level_encode("\xFF"), "\u00FF");
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(char(b));
  EXPECT_EQ(byte_level_decode(byte_level_encode(all)), all);
  EXPECT_FALSE(byte_level_decode("a b").has_value());       // a real space is outside the alphabet
  EXPECT_FALSE(byte_level_decode("\u4E2D").has_value());    // so is CJK
  EXPECT_FALSE(byte_level_decode("\xC1\xA1").has_value());  // overlong 'a'
}

TEST(TokenizerPretokenizer, SplitsLikeGpt2) {
  EXPECT_EQ(split("Hello world's  42!!\n\n"),
            (std::vector<std::string>{"Hello", " world", "'s", " ", " 42", "!!", "\n\n"}));
  // The last whitespace character before a word is left to the word's piece, or stands alone.
  EXPECT_EQ(split("I'll don't  x\t\ty"),
            (std::vector<std::string>{"I", "'ll", " don", "'t", " ", " x", "\t", "\t", "y"}));
  EXPECT_EQ(split("caf\u00e9 \u4e2d\u6587 \U0001F600!"),
            (std::vector<std::string>{"caf\u00e9", " \u4e2d\u6587", " \U0001F600!"}));
  EXPECT_EQ(split("abc123 \u0663\u0664"), (std::vector<std::string>{"abc", "123", " \u0663\u0664"}));
  EXPECT_TRUE(split("").empty());
}

TEST(TokenizerPretokenizer, KeepsInvalidUtf8AsItsOwnPieces) {
  EXPECT_EQ(split("ab\xFF\xFE"
                  "cd \x80"),
            (std::vector<std::string>{"ab", "\xFF\xFE", "cd", " ", "\x80"}));
  EXPECT_EQ(split("\xC3"), (std::vector<std::string>{"\xC3"}));  // truncated sequence
}

TEST(TokenizerMerger, MergesLowestRankFirstAndLeftmostAmongEquals) {
  // ids: 'a' = 97, 'b' = 98, 'c' = 99; merged ids from 300 on.
  BpeMerger merger(std::vector<BpeMerge>{{98, 99, 300}, {97, 98, 301}, {97, 97, 302}, {302, 302, 303}});
  std::vector<int32_t> abc{97, 98, 99};
  merger.merge(abc);
  EXPECT_EQ(abc, (std::vector<int32_t>{97, 300}));  // (b, c) outranks (a, b)
  std::vector<int32_t> aaa{97, 97, 97};
  merger.merge(aaa);
  EXPECT_EQ(aaa, (std::vector<int32_t>{302, 97}));
  std::vector<int32_t> aaaaa{97, 97, 97, 97, 97};
  merger.merge(aaaaa);
  EXPECT_EQ(aaaaa, (std::vector<int32_t>{303, 97}));
  std::vector<int32_t> none{99, 98};
  merger.merge(none);
  EXPECT_EQ(none, (std::vector<int32_t>{99, 98}));
}

TEST(TokenizerEncode, MatchesSpecialTokensWholeAndPrefersTheLongest) {
  Tokenizer tok = tiny_tokenizer({{"h", "e"}, {"l", "l"}, {"he", "ll"}}, {"<|endoftext|>", "<|end"});
  const int32_t hell = 258, eot = 259, end = 260;
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.eot_token(), eot);
  EXPECT_EQ(tok.encode("hello"), (std::vector<int32_t>{hell, 'o'}));
  EXPECT_EQ(tok.encode("x<|endoftext|>hell<|end|>"), (std::vector<int32_t>{'x', eot, hell, end, '|', '>'}));
  EXPECT_EQ(tok.encode("<|endoftext|><|endoftext|>"), (std::vector<int32_t>{eot, eot}));
  EXPECT_EQ(tok.encode("<|endoftext"), (std::vector<int32_t>{end, 'o', 'f', 't', 'e', 'x', 't'}));
  EXPECT_TRUE(tok.encode("").empty());
  std::vector<int32_t> ids = tok.encode("a<|end|>he");
  EXPECT_EQ(tok.decode(ids), "a<|end|>he");
  EXPECT_EQ(tok.token_text(hell), "hell");
}

TEST(TokenizerEncode, SpecialsAreCutBeforePretokenisation) {
  Tokenizer tok = tiny_tokenizer({}, {"<|endoftext|>"});
  // " <|endoftext|>": the space before the special stays a piece of its own.
  EXPECT_EQ(tok.encode("a <|endoftext|> b"), (std::vector<int32_t>{'a', ' ', 256, ' ', 'b'}));
}

TEST(TokenizerEncode, CheckIdsAndEndOfText) {
  Tokenizer tok = tiny_tokenizer({}, {});
  EXPECT_THROW(tok.eot_token(), Error);
  EXPECT_THROW(tok.token_text(256), Error);
  EXPECT_THROW(tok.token_text(-1), Error);
  std::vector<int32_t> bad{1, 999};
  try {
    tok.decode(bad);
    FAIL() << "decode accepted id 999";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("999"), std::string::npos) << e.what();
  }
}

TEST(TokenizerEncode, RejectsInconsistentVocabularies) {
  std::vector<std::string> tokens;
  for (int b = 0; b < 255; ++b) tokens.emplace_back(1, char(b));
  EXPECT_THROW(Tokenizer(tokens, {}, {}, "no byte 0xff"), Error);
  tokens.emplace_back(1, char(255));
  tokens.push_back("xy");
  EXPECT_THROW(Tokenizer(tokens, {{'x', 'z', 256}}, {}, "bad merge"), Error);
  EXPECT_THROW(Tokenizer(tokens, {}, {{"<|endoftext|>", 256}}, "bad special"), Error);
  EXPECT_NO_THROW(Tokenizer(tokens, {{'x', 'y', 256}}, {}, "good"));
}

}  // namespace
}  // namespace tessera
