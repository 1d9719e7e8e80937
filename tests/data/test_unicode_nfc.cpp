// NFC: the cases UAX #15 is about (composition, canonical order, singletons, exclusions, Hangul),
// bytes that are not UTF-8 passing through, and 3,000 random strings of marks, jamo and precomposed
// letters against Python's unicodedata.normalize('NFC') (the Unicode version the tables came from).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <sstream>

#include "core/rng.h"
#include "data/unicode_nfc.h"
#include "support/test_support.h"

namespace tessera {
namespace {

std::string utf8(std::initializer_list<uint32_t> code_points) {
  std::string out;
  for (uint32_t cp : code_points) {
    if (cp < 0x80) {
      out += char(cp);
    } else if (cp < 0x800) {
      out += char(0xC0 | (cp >> 6)), out += char(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += char(0xE0 | (cp >> 12)), out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    } else {
      out += char(0xF0 | (cp >> 18)), out += char(0x80 | ((cp >> 12) & 0x3F));
      out += char(0x80 | ((cp >> 6) & 0x3F)), out += char(0x80 | (cp & 0x3F));
    }
  }
  return out;
}

TEST(Nfc, ComposesReordersAndKeepsWhatIsNormal) {
  EXPECT_EQ(nfc("plain ASCII, untouched"), "plain ASCII, untouched");
  EXPECT_EQ(nfc(utf8({'e', 0x301})), utf8({0xE9}));                         // e + acute -> é
  EXPECT_EQ(nfc(utf8({0xE9})), utf8({0xE9}));                               // already composed
  EXPECT_EQ(nfc(utf8({0x212B})), utf8({0xC5}));                             // Angstrom sign: a singleton
  EXPECT_EQ(nfc(utf8({'a', 0x302, 0x323})), utf8({0x1EAD}));                // marks reordered, then composed
  EXPECT_EQ(nfc(utf8({0x958})), utf8({0x915, 0x93C}));                      // excluded from composition
  EXPECT_EQ(nfc(utf8({0x1100, 0x1161, 0x11A8})), utf8({0xAC01}));           // Hangul L V T
  EXPECT_EQ(nfc(utf8({0x301, 'e'})), utf8({0x301, 'e'}));                   // a mark with no starter before it
  EXPECT_EQ(nfc(utf8({'e', 0x31B, 0x301})), utf8({0xE9, 0x31B}));           // 0x31B (216) does not block 0x301 (230)
  const std::string composed = std::string("\xFF").append(utf8({0xE9})).append("\xC3");
  EXPECT_EQ(nfc(std::string("\xFF").append(utf8({'e', 0x301})).append("\xC3")), composed);  // not UTF-8: kept
  const std::string blocked = std::string("e\xFF").append(utf8({0x301}));
  EXPECT_EQ(nfc(blocked), blocked);  // ... and blocks composition
}

TEST(Nfc, RandomStringsMatchPython) {
  // Code points NFC has something to do with, and ordinary ones.
  const std::vector<std::pair<uint32_t, uint32_t>> pools = {
      {'a', 'z'},       {0xC0, 0x24F},    {0x300, 0x36F},   {0x370, 0x3FF},  {0x591, 0x5C7}, {0x900, 0x97F},
      {0x1100, 0x1112}, {0x1161, 0x1175}, {0x11A8, 0x11C2}, {0xAC00, 0xAC40}, {0x1E00, 0x1EFF}, {0x1F00, 0x1FFF},
      {0x2126, 0x212B}, {0xF900, 0xFA2D}, {0x0E30, 0x0E4E}, {0x1D15E, 0x1D164}};
  Rng rng(2024);
  std::vector<std::string> inputs;
  for (int i = 0; i < 3000; ++i) {
    std::string s;
    const int length = 1 + int(rng.below(8));
    for (int k = 0; k < length; ++k) {
      const auto [first, last] = pools[rng.below(pools.size())];
      s += utf8({first + uint32_t(rng.below(last - first + 1))});
    }
    inputs.push_back(s);
  }
  const auto dir = testing::scratch_dir();
  std::string lines;
  for (const std::string& s : inputs) lines += nlohmann::json(s).dump() + "\n";
  testing::write_text(dir / "in.jsonl", lines);
  const testing::CommandResult python = testing::run_command(
      "/usr/bin/python3 -c 'import json, sys, unicodedata\n"
      "for line in open(sys.argv[1]): print(json.dumps(unicodedata.normalize(\"NFC\", json.loads(line))))' " +
      (dir / "in.jsonl").string());
  ASSERT_EQ(python.exit_code, 0) << python.output;
  std::istringstream expected(python.output);
  std::string line;
  size_t differing = 0;
  for (const std::string& s : inputs) {
    ASSERT_TRUE(std::getline(expected, line));
    const std::string want = nlohmann::json::parse(line).get<std::string>();
    if (nfc(s) != want && ++differing <= 5) ADD_FAILURE() << nlohmann::json(s).dump() << " -> " << nlohmann::json(nfc(s)).dump() << ", Python " << line;
  }
  EXPECT_EQ(differing, 0u);
}

}  // namespace
}  // namespace tessera
