// Tokenizer building blocks on hand-made vocabularies (no downloads): the byte-level alphabet,
// GPT-2's and cl100k's (Llama 3's) pre-tokenisation, BPE merge order (by position or shared ranks),
// ignore_merges, special-token matching, the post-processor's BOS, decode and id checks.
#include <gtest/gtest.h>

#include "core/error.h"
#include "data/bpe_merger.h"
#include "data/byte_level.h"
#include "data/pretokenizer.h"
#include "data/tokenizer.h"
#include "support/test_support.h"

namespace tessera {
namespace {

std::vector<std::string> split(std::string_view text, const Pretokenizer& pretokenizer = Pretokenizer()) {
  std::vector<std::string_view> pieces;
  pretokenizer.split(text, pieces);
  return {pieces.begin(), pieces.end()};
}

std::vector<std::string> split_cl100k(std::string_view text) {
  return split(text, Pretokenizer(kCl100kPattern, "cl100k"));
}

// The 256 byte tokens (id = byte value) followed by `extra`, with merges given as token texts.
Tokenizer tiny_tokenizer(const std::vector<std::pair<std::string, std::string>>& merge_texts,
                         std::vector<std::string> specials, EncodingRules rules = {}) {
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
  return Tokenizer(tokens, merges, special_tokens, "tiny vocabulary", std::move(rules));
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

TEST(TokenizerPretokenizer, SplitsLikeCl100kAndLlama3) {
  // Contractions in any case; at most three digits a piece; a letter run takes one non-letter before it.
  EXPECT_EQ(split_cl100k("DON'T you'RE 1234567 x(word"),
            (std::vector<std::string>{"DON", "'T", " you", "'RE", " ", "123", "456", "7", " x", "(word"}));
  // Punctuation keeps the line ends after it; line ends gather the spaces before them.
  EXPECT_EQ(split_cl100k("end.\r\n  \n\tnext"), (std::vector<std::string>{"end", ".\r\n", "  \n", "\tnext"}));
  EXPECT_EQ(split_cl100k("a  b\u00a0\u00a0\u4e2d\u6587"),
            (std::vector<std::string>{"a", " ", " b", "\u00a0", "\u00a0\u4e2d\u6587"}));
  EXPECT_EQ(split_cl100k("x\xff\xfey"), (std::vector<std::string>{"x", "\xff\xfe", "y"}));
}

TEST(TokenizerPretokenizer, AnyPatternCoversTheText) {
  // Text the pattern does not match stays, as its own pieces; empty matches are skipped.
  Pretokenizer digits("[0-9]+|x*", "test pattern");
  EXPECT_EQ(digits.pattern(), "[0-9]+|x*");
  EXPECT_EQ(split("ab12cxx3", digits), (std::vector<std::string>{"ab", "12", "c", "xx", "3"}));
  EXPECT_EQ(split("abc", digits), (std::vector<std::string>{"abc"}));
  EXPECT_EQ(Pretokenizer().pattern(), kGpt2Pattern);
}

TEST(TokenizerPretokenizer, BadPatternNamesItsOrigin) {
  std::string message = testing::error_of([] { Pretokenizer("(?i:'s|[a-", "my.json pre_tokenizer.pattern.Regex"); });
  EXPECT_NE(message.find("my.json pre_tokenizer.pattern.Regex"), std::string::npos) << message;
  EXPECT_NE(message.find("offset"), std::string::npos) << message;
  EXPECT_EQ(message.find('\n'), std::string::npos) << message;
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

TEST(TokenizerMerger, SharedRanksMergeLeftmostFirst) {
  // tiktoken's ranking: both ways of making "aaa" (302) share its rank, so the leftmost pair goes
  // first; ranked by list position instead, (aa a) outranks (a aa) wherever it stands.
  std::vector<BpeMerge> merges{{97, 97, 301}, {301, 97, 302}, {97, 301, 302}};
  BpeMerger shared(merges, std::vector<int32_t>{301, 302, 302}), by_position(merges);
  std::vector<int32_t> a_aa_a{97, 301, 97}, again = a_aa_a;
  shared.merge(a_aa_a);
  EXPECT_EQ(a_aa_a, (std::vector<int32_t>{302, 97}));
  by_position.merge(again);
  EXPECT_EQ(again, (std::vector<int32_t>{97, 302}));
  std::vector<int32_t> aaaa{97, 97, 97, 97};  // (a a) outranks both: [aa][a][a], then [aa][aa]
  shared.merge(aaaa);
  EXPECT_EQ(aaaa, (std::vector<int32_t>{301, 301}));
}

TEST(TokenizerEncode, IgnoreMergesTakesWholeTokens) {
  // "abc" is a token, but no merge reaches it from "ab" + "c" (only "a" + "bc", which "ab" outranks).
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, char(b));
  tokens.insert(tokens.end(), {"ab", "bc", "abc", "<s>"});
  std::vector<BpeMerge> merges{{'a', 'b', 256}, {'b', 'c', 257}, {'a', 257, 258}};
  EncodingRules rules;
  rules.ignore_merges = true;
  Tokenizer whole(tokens, merges, {{"<s>", 259}}, "ignore_merges", rules);
  Tokenizer merging(tokens, merges, {{"<s>", 259}}, "merging");
  EXPECT_EQ(merging.encode("abc"), (std::vector<int32_t>{256, 'c'}));
  EXPECT_EQ(whole.encode("abc"), (std::vector<int32_t>{258}));
  EXPECT_EQ(whole.encode("abcabc"), (std::vector<int32_t>{256, 'c', 256, 'c'}));   // one piece, no token: merges
  EXPECT_EQ(whole.encode("abc abc"), (std::vector<int32_t>{258, ' ', 256, 'c'}));  // " abc" is no token
  EXPECT_EQ(whole.encode("<s>"), (std::vector<int32_t>{259}));
}

TEST(TokenizerEncode, PostProcessorAddsBosOnlyWhenAsked) {
  EncodingRules rules;
  rules.prefix = {256};
  rules.suffix = {257};
  Tokenizer tok = tiny_tokenizer({}, {"<|begin_of_text|>", "<|end_of_text|>"}, rules);
  EXPECT_EQ(tok.bos_token(), std::optional<int32_t>(256));
  EXPECT_EQ(tok.eot_token(), 257);  // Llama 3's end of text stands in for <|endoftext|>
  EXPECT_EQ(tok.encode("hi"), (std::vector<int32_t>{'h', 'i'}));
  EXPECT_EQ(tok.encode_with_special_tokens("hi"), (std::vector<int32_t>{256, 'h', 'i', 257}));
  EXPECT_EQ(tok.encode_with_special_tokens(""), (std::vector<int32_t>{256, 257}));
  EXPECT_EQ(tiny_tokenizer({}, {}).bos_token(), std::nullopt);
  rules.prefix = {999};
  EXPECT_THROW(tiny_tokenizer({}, {}, rules), Error);
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
