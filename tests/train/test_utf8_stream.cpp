// Streamed token text becomes valid UTF-8: a character split across tokens comes out whole once its
// last byte arrives, and invalid bytes become U+FFFD one per maximal invalid subpart, as Python's
// bytes.decode("utf-8", "replace") (the expected strings below are its output).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "train/utf8_stream.h"

namespace tessera {
namespace {

const std::string kFffd = "\xEF\xBF\xBD";

// What the stream prints for `pieces` fed one by one, then finished.
std::string streamed(const std::vector<std::string>& pieces) {
  Utf8Stream utf8;
  std::string out;
  for (const std::string& piece : pieces) out += utf8.add(piece);
  return out + utf8.finish();
}

TEST(Utf8Stream, HoldsACharacterSplitAcrossTokens) {
  Utf8Stream utf8;
  EXPECT_EQ(utf8.add("caf\xC3"), "caf");  // é's first byte waits
  EXPECT_EQ(utf8.add("\xA9 \xF0\x9F"), "\xC3\xA9 ");
  EXPECT_EQ(utf8.add("\x99"), "");
  EXPECT_EQ(utf8.add("\x82!"), "\xF0\x9F\x99\x82!");  // U+1F642 in three tokens
  EXPECT_EQ(utf8.finish(), "");
  EXPECT_EQ(streamed({"\xE6", "\x97", "\xA5", "\xE6\x9C", "\xAC"}), "\xE6\x97\xA5\xE6\x9C\xAC");  // 日本 byte by byte
}

TEST(Utf8Stream, ReplacesInvalidBytesAsPythonDoes) {
  // b'a\xfa\xa5b'.decode('utf-8', 'replace') == 'a\ufffd\ufffdb'
  EXPECT_EQ(streamed({"a\xFA\xA5", "b"}), "a" + kFffd + kFffd + "b");
  // b'\xe6\x97x' -> '\ufffdx': one replacement for a valid start cut short
  EXPECT_EQ(streamed({"\xE6\x97", "x"}), kFffd + "x");
  // overlong b'\xc0\xaf', surrogate b'\xed\xa0\x80', past U+10FFFF b'\xf4\x90\x80\x80'
  EXPECT_EQ(streamed({"\xC0\xAF"}), kFffd + kFffd);
  EXPECT_EQ(streamed({"\xED\xA0\x80"}), kFffd + kFffd + kFffd);
  EXPECT_EQ(streamed({"\xF4\x90\x80\x80"}), kFffd + kFffd + kFffd + kFffd);
  // a stray continuation byte, and a character unfinished at the end
  EXPECT_EQ(streamed({"\x8F", "ok\xF0\x9F\x99"}), kFffd + "ok" + kFffd);
}

// Whole text at once: the sample the trainer prints, a token's cut character at its end included.
TEST(Utf8Stream, ValidUtf8OfAWholeText) {
  EXPECT_EQ(valid_utf8("\xE6\x97\xA5 ok"), "\xE6\x97\xA5 ok");
  EXPECT_EQ(valid_utf8("a\xFA b\xF0\x9F\x99"), "a" + kFffd + " b" + kFffd);
  EXPECT_EQ(valid_utf8(""), "");
}

}  // namespace
}  // namespace tessera
