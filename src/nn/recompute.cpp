// Parsing of the --recompute flag.
#include "nn/recompute.h"

#include "core/error.h"
#include "core/user_text.h"

namespace tessera {

Recompute parse_recompute(const std::string& text) {
  if (text == "none") return Recompute::none;
  if (text == "selective") return Recompute::selective;
  if (text == "full") return Recompute::full;
  TS_FAIL("--recompute must be none, selective or full, got ", quoted_text(text, 40));
}

}  // namespace tessera
