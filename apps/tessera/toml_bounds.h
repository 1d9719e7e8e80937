// Bounds a --config file must meet before toml++ parses it: toml++ recurses once per nesting level
// (a table or array nested 100,000 deep overflows the stack) and echoes keys whole in its errors.
// Tessera's configs are flat `flag = value` lines, so the bounds are far above any real one.
#pragma once

#include <string>
#include <string_view>

namespace tessera::cli {

// Throws one line naming `path`, the line number and the bound exceeded.
void check_toml_bounds(std::string_view text, const std::string& path);

}  // namespace tessera::cli
