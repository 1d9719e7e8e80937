// libFuzzer: a --config file's text through the bounds check and, when it passes, toml++ (the
// order tessera train reads it in); every top-level value is then turned into text.
#include <toml++/toml.h>

#include "apps/tessera/toml_bounds.h"
#include "core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  try {
    tessera::cli::check_toml_bounds(text, "fuzz.toml");
    toml::table table = toml::parse(text, std::string_view("fuzz.toml"));
    for (auto&& [key, node] : table) (void)node.type();
  } catch (const tessera::Error&) {
  } catch (const toml::parse_error&) {
  }
  return 0;
}
