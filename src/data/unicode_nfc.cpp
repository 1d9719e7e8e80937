// NFC by the Unicode algorithm (UAX #15): decode, decompose every code point fully (tables, Hangul
// syllables arithmetically), put each run of combining marks in canonical order (a stable sort by
// combining class), then compose each mark with the last starter unless a mark between them blocks
// it. Text whose bytes are all below 0xCC (code points below U+0300: no combining marks, nothing
// decomposable that does not compose back) is returned as it is.
#include "data/unicode_nfc.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

#include "data/unicode_nfc_data.h"
#include "data/utf8_char.h"

namespace tessera {
namespace {

using unicode::kCombiningClassCount;
using unicode::kCombiningClasses;
using unicode::kCompositionCount;
using unicode::kCompositions;
using unicode::kDecompositionCount;
using unicode::kDecompositions;

// Hangul syllables: S = SBase + (L·VCount + V)·TCount + T.
constexpr uint32_t kSBase = 0xAC00, kLBase = 0x1100, kVBase = 0x1161, kTBase = 0x11A7;
constexpr uint32_t kLCount = 19, kVCount = 21, kTCount = 28, kNCount = kVCount * kTCount, kSCount = kLCount * kNCount;

// A byte that is not part of valid UTF-8, kept as itself: above every code point.
constexpr uint32_t kRawByte = 0x80000000u;

uint8_t combining_class(uint32_t cp) {
  const auto* end = kCombiningClasses + kCombiningClassCount;
  const auto* it = std::upper_bound(kCombiningClasses, end, cp,
                                    [](uint32_t c, const unicode::CombiningClassRange& r) { return c < r.first; });
  if (it == kCombiningClasses) return 0;
  --it;
  return cp <= it->last ? it->ccc : 0;
}

void decompose(uint32_t cp, std::vector<uint32_t>& out) {
  if (cp >= kSBase && cp < kSBase + kSCount) {
    const uint32_t s = cp - kSBase;
    out.push_back(kLBase + s / kNCount);
    out.push_back(kVBase + (s % kNCount) / kTCount);
    if (s % kTCount != 0) out.push_back(kTBase + s % kTCount);
    return;
  }
  const auto* end = kDecompositions + kDecompositionCount;
  const auto* it = std::lower_bound(kDecompositions, end, cp,
                                    [](const unicode::Decomposition& d, uint32_t c) { return d.code_point < c; });
  if (it == end || it->code_point != cp) {
    out.push_back(cp);
    return;
  }
  decompose(it->first, out);
  if (it->second != 0) decompose(it->second, out);
}

// The primary composite of (first, second), or 0.
uint32_t compose(uint32_t first, uint32_t second) {
  if (first >= kLBase && first < kLBase + kLCount && second >= kVBase && second < kVBase + kVCount)
    return kSBase + ((first - kLBase) * kVCount + (second - kVBase)) * kTCount;
  if (first >= kSBase && first < kSBase + kSCount && (first - kSBase) % kTCount == 0 && second > kTBase &&
      second < kTBase + kTCount)
    return first + (second - kTBase);
  const auto* end = kCompositions + kCompositionCount;
  const auto* it = std::lower_bound(kCompositions, end, std::pair{first, second}, [](const unicode::Composition& c,
                                                                                      std::pair<uint32_t, uint32_t> k) {
    return c.first < k.first || (c.first == k.first && c.second < k.second);
  });
  return it != end && it->first == first && it->second == second ? it->composite : 0;
}

// The code points of `text`; a byte outside valid UTF-8 (overlong, surrogate, truncated) is kRawByte | byte.
std::vector<uint32_t> decode_utf8(std::string_view text) {
  std::vector<uint32_t> out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size();) {
    const Utf8Char c = utf8_char_at(text, i);
    out.push_back(c.length > 0 ? c.code_point : kRawByte | static_cast<unsigned char>(text[i]));
    i += size_t(c.length > 0 ? c.length : 1);
  }
  return out;
}

void encode_utf8(uint32_t cp, std::string& out) {
  if (cp & kRawByte) {
    out += char(cp & 0xFF);
  } else if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xC0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += char(0xE0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  } else {
    out += char(0xF0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3F));
    out += char(0x80 | ((cp >> 6) & 0x3F));
    out += char(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string nfc(std::string_view utf8) {
  if (std::all_of(utf8.begin(), utf8.end(), [](char c) { return static_cast<unsigned char>(c) < 0xCC; }))
    return std::string(utf8);
  std::vector<uint32_t> cps;
  for (uint32_t cp : decode_utf8(utf8)) {
    if (cp & kRawByte)
      cps.push_back(cp);
    else
      decompose(cp, cps);
  }
  std::vector<uint8_t> classes(cps.size());
  for (size_t i = 0; i < cps.size(); ++i) classes[i] = cps[i] & kRawByte ? 0 : combining_class(cps[i]);
  // Canonical order: each run of non-starters sorted stably by class.
  for (size_t i = 0; i < cps.size();) {
    if (classes[i] == 0) {
      ++i;
      continue;
    }
    size_t end = i;
    while (end < cps.size() && classes[end] != 0) ++end;
    std::vector<std::pair<uint8_t, uint32_t>> run;
    for (size_t k = i; k < end; ++k) run.emplace_back(classes[k], cps[k]);
    std::stable_sort(run.begin(), run.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    for (size_t k = i; k < end; ++k) std::tie(classes[k], cps[k]) = run[k - i];
    i = end;
  }
  // Composition: a character joins the last starter unless one between them has a class of 0 or at
  // least its own.
  std::vector<uint32_t> out;
  std::vector<uint8_t> out_classes;
  size_t starter = SIZE_MAX;
  for (size_t i = 0; i < cps.size(); ++i) {
    const uint32_t cp = cps[i];
    const uint8_t ccc = classes[i];
    if (starter != SIZE_MAX && !(cp & kRawByte)) {
      const uint8_t last = out.size() - 1 == starter ? 0 : out_classes.back();
      const bool blocked = out.size() - 1 != starter && (last == 0 || last >= ccc);
      if (!blocked) {
        if (const uint32_t composite = compose(out[starter], cp)) {
          out[starter] = composite;
          continue;
        }
      }
    }
    if (ccc == 0) starter = cp & kRawByte ? SIZE_MAX : out.size();
    out.push_back(cp);
    out_classes.push_back(ccc);
  }
  std::string text;
  text.reserve(utf8.size());
  for (uint32_t cp : out) encode_utf8(cp, text);
  return text;
}

}  // namespace tessera
