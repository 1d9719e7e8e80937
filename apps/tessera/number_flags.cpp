// Range checks for every numeric flag (and --config key, which goes through the same options):
// CLI11 saturates an integer that overflows 64 bits (--steps 9223372036854775808 would train
// forever), wraps a negative unsigned one and reads a leading zero as octal; here such values, text that
// is no number, and non-finite or overflowing floating-point ones, are refused before conversion.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <limits>

#include "commands.h"

namespace tessera::cli {
namespace {

enum class NumberKind { signed_integer, unsigned_integer, floating };

bool is_digits(std::string_view text, int base) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [base](char c) {
    return base == 16 ? std::isxdigit(static_cast<unsigned char>(c)) : std::isdigit(static_cast<unsigned char>(c));
  });
}

// An empty string when `text` is a number of `kind` within 64 bits (and finite), else why not, with the
// way to write it. Surrounding spaces are dropped. Integers are decimal or 0x hex: CLI11 would read a
// leading zero as octal (--steps 010 ran 8 steps).
std::string number_problem(std::string& text, NumberKind kind) {
  const size_t first = text.find_first_not_of(" \t"), last = text.find_last_not_of(" \t");
  text = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  const std::string shown = "'" + text.substr(0, 40) + "'";
  if (text.empty()) return "the value is empty; give a number";
  if (kind == NumberKind::floating) {
    char* end = nullptr;
    errno = 0;
    const double value = std::strtod(text.c_str(), &end);
    if (end != text.c_str() + text.size())
      return shown + " is not a number" +
             (text.find(',') != std::string::npos ? " (write a decimal point, as in 1.5)" : " (such as 0.001 or 1e-3)");
    if (!std::isfinite(value) || errno == ERANGE) return "must be a finite number, got " + shown;
    return "";
  }
  std::string_view digits = text;
  const bool negative = digits.starts_with('-');
  if (negative || digits.starts_with('+')) digits.remove_prefix(1);
  if (negative && kind == NumberKind::unsigned_integer) return "must not be negative, got " + shown;
  int base = 10;
  if (digits.size() > 2 && digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X')) base = 16, digits.remove_prefix(2);
  if (!is_digits(digits, base)) return shown + " is not a whole number (digits only, as in 1000, or hex as in 0x3e8)";
  if (base == 10 && digits.size() > 1 && digits[0] == '0') {
    const size_t nonzero = std::min(digits.find_first_not_of('0'), digits.size() - 1);
    return shown + " starts with a zero, which would read as octal; write " + (negative ? "-" : "") +
           std::string(digits.substr(nonzero));
  }
  uint64_t magnitude = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
  const uint64_t limit = kind == NumberKind::unsigned_integer ? std::numeric_limits<uint64_t>::max()
                                                              : uint64_t(std::numeric_limits<int64_t>::max()) + negative;
  if (ec == std::errc::result_out_of_range || (ec == std::errc() && magnitude > limit))
    return shown + " does not fit a 64-bit integer (at most " + std::to_string(limit) + " in magnitude)";
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
    // A transform, not a check: the trimmed text is the one converted.
    option->transform(CLI::Validator([kind](std::string& text) { return number_problem(text, kind); }, ""));
  }
  for (CLI::App* sub : command.get_subcommands({})) check_numbers_of(*sub);
}

}  // namespace

void check_number_flags(CLI::App& app) { check_numbers_of(app); }

}  // namespace tessera::cli
