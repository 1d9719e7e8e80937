// The Unicode tables NFC needs (generated into unicode_nfc_data.cpp by tools/gen_unicode_nfc.py).
#pragma once

#include <cstddef>
#include <cstdint>

namespace tessera::unicode {

struct CombiningClassRange {
  uint32_t first, last;  // code points [first, last] have canonical combining class ccc
  uint8_t ccc;
};
struct Decomposition {
  uint32_t code_point;
  uint32_t first, second;  // second 0: a singleton
};
struct Composition {
  uint32_t first, second, composite;
};

extern const CombiningClassRange kCombiningClasses[];  // sorted, non-zero classes only
extern const size_t kCombiningClassCount;
extern const Decomposition kDecompositions[];  // sorted by code point; Hangul syllables excluded
extern const size_t kDecompositionCount;
extern const Composition kCompositions[];  // sorted by (first, second); Hangul excluded
extern const size_t kCompositionCount;

}  // namespace tessera::unicode
