// Range checks for every numeric flag (and --config key, which goes through the same options):
// CLI11 saturates an integer that overflows 64 bits (--steps 9223372036854775808 would train
// forever) and wraps a negative unsigned one; here such values, and non-finite or overflowing
// floating-point ones, are refused before conversion.
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "commands.h"

namespace tessera::cli {
namespace {

enum class NumberKind { signed_integer, unsigned_integer, floating };

// An empty string when `text` is fine for `kind` (or is not a number at all: CLI11's own
// conversion reports that), else why not.
std::string number_problem(const std::string& text, NumberKind kind) {
  std::string_view digits = text;
  while (!digits.empty() && digits.front() == ' ') digits.remove_prefix(1);
  if (kind == NumberKind::floating) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (end == text.c_str()) return "";
    if (!std::isfinite(value) || errno == ERANGE) return "must be a finite number, got '" + text.substr(0, 40) + "'";
    return "";
  }
  const bool negative = digits.starts_with('-');
  if (negative || digits.starts_with('+')) digits.remove_prefix(1);
  if (negative && kind == NumberKind::unsigned_integer)
    return "must not be negative, got '" + text.substr(0, 40) + "'";
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) base = 16, digits.remove_prefix(2);
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  const uint64_t limit = kind == NumberKind::unsigned_integer ? std::numeric_limits<uint64_t>::max()
                                                              : uint64_t(std::numeric_limits<int64_t>::max()) + negative;
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && magnitude > limit))
    return "'" + text.substr(0, 40) + "' does not fit a 64-bit integer (at most " + std::to_string(limit) +
           " in magnitude)";
  return "";
}

void check_numbers_of(CLI::App& command) {
  for (CLI::Option* option : command.get_options()) {
    const std::string type = option->get_type_name();
    NumberKind kind;
    if (type == "INT")
      kind = NumberKind::signed_integer;
    else if (type == "UINT")
      kind = NumberKind::unsigned_integer;
    else if (type == "FLOAT")
      kind = NumberKind::floating;
    else
      continue;
    option->check(CLI::Validator([kind](std::string& text) { return number_problem(text, kind); }, ""));
  }
  for (CLI::App* sub : command.get_subcommands({})) check_numbers_of(*sub);
}

}  // namespace

void check_number_flags(CLI::App& app) { check_numbers_of(app); }

}  // namespace tessera::cli
