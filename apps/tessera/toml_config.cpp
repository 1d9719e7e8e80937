// --config support: a TOML file whose keys are the subcommand's long flag names. Values from the
// file fill every flag that was not given on the command line (flags win, and a note says which);
// each value must have the flag's TOML type (a switch a boolean, a count an integer, a rate a number,
// a path or name a string; an array only for a flag that takes several values); a key naming a negated
// flag (no-overlap = true) means what the flag means. Every error names the file, the line and the key.
#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <map>
#include <set>
#include <vector>
#include <toml++/toml.h>

#include "commands.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/whole_file.h"
#include "parallel/runtime.h"
#include "toml_bounds.h"

namespace tessera::cli {
namespace {

// Where a flag's value came from in the --config file, for errors raised once the run has started.
struct Origin {
  std::string path, key;
  size_t line = 0;
};

// Flag name ("--steps") -> the file's key that set it.
std::map<std::string, Origin>& origins() {
  static std::map<std::string, Origin> flags;
  return flags;
}

// The subcommands' required flags, which the config file may give: CLI11 checks `required` while
// it parses, before the callback reads the file, so enable_toml_config takes them over and
// apply_toml_config checks them once the file's keys are in.
std::map<const CLI::App*, std::vector<CLI::Option*>>& required_flags() {
  static std::map<const CLI::App*, std::vector<CLI::Option*>> flags;
  return flags;
}

// "--config 'run.toml', line 3: " — the prefix of every error about one key.
std::string where(const std::string& path, size_t line) {
  return "--config " + quoted_text(path) + ", line " + std::to_string(line) + ": ";
}

// A TOML value as an error shows it: its type and its text ("the string \"3\"", "the float 3.5").
std::string describe(const toml::node& node) {
  if (auto s = node.value_exact<std::string>()) return "the string " + quoted_text(*s, 60);
  if (auto b = node.value_exact<bool>()) return std::string("the boolean ") + (*b ? "true" : "false");
  if (auto i = node.value_exact<int64_t>()) return "the integer " + std::to_string(*i);
  if (auto d = node.value_exact<double>())
    return "the float " + number_text(*d) + (std::isfinite(*d) && *d == std::trunc(*d) && std::fabs(*d) < 1e6 ? ".0" : "");
  if (node.is_table()) return "a table";
  if (node.is_array()) return "an array";
  return "a date or time";
}

enum class Kind { flag, integer, number, text };

Kind kind_of(const CLI::Option& option) {
  if (option.get_expected_min() == 0) return Kind::flag;
  const std::string type = option.get_type_name();
  if (type == "INT" || type == "UINT") return Kind::integer;
  if (type == "FLOAT") return Kind::number;
  return Kind::text;
}

// One TOML value of `key` as the text the flag would have been given on the command line, or an
// error that says which type the flag takes and how to write it.
std::string value_text(const toml::node& node, const CLI::Option& option, const std::string& key,
                       const std::string& at) {
  switch (kind_of(option)) {
    case Kind::flag:
      if (auto b = node.value_exact<bool>()) return option.get_flag_value(key, *b ? "true" : "false");
      TS_FAIL(at, "key ", quoted_text(key), " is a switch: write ", key, " = true or ", key, " = false (no quotes), not ",
              describe(node));
    case Kind::integer:
      if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
      if (auto d = node.value_exact<double>(); d && std::isfinite(*d) && *d == std::trunc(*d) && std::fabs(*d) < 1e18)
        TS_FAIL(at, "key ", quoted_text(key), " takes a whole number: write ", key, " = ", int64_t(*d), ", not ",
                describe(node));
      if (auto s = node.value_exact<std::string>())
        TS_FAIL(at, "key ", quoted_text(key), " takes a whole number, not ", describe(node), ": write it without quotes");
      TS_FAIL(at, "key ", quoted_text(key), " takes a whole number, not ", describe(node));
    case Kind::number:
      if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
      if (auto d = node.value_exact<double>()) {
        char buffer[64];
        auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, *d);
        return std::string(buffer, end);
      }
      if (auto s = node.value_exact<std::string>())
        TS_FAIL(at, "key ", quoted_text(key), " takes a number, not ", describe(node), ": write it without quotes");
      TS_FAIL(at, "key ", quoted_text(key), " takes a number, not ", describe(node));
    case Kind::text:
      if (auto s = node.value_exact<std::string>()) return *s;
      TS_FAIL(at, "key ", quoted_text(key), " takes a string, not ", describe(node), ": write it in quotes");
  }
  return "";
}

// The values of `key`: one, or an array's for a flag that takes several (--in, --pipeline-boundaries).
std::vector<std::string> values_of(const toml::node& node, const CLI::Option& option, const std::string& key,
                                   const std::string& at) {
  std::vector<std::string> values;
  if (const toml::array* array = node.as_array()) {
    TS_CHECK(option.get_items_expected_max() > 1, at, "key ", quoted_text(key), " takes one value, not an array of ",
             array->size(), "; write ", key, " = <value>");
    for (const toml::node& element : *array) values.push_back(value_text(element, option, key, at));
    TS_CHECK(!values.empty(), at, "key ", quoted_text(key), " is an empty array; give at least one value or leave the key out");
  } else {
    values.push_back(value_text(node, option, key, at));
  }
  return values;
}

// The flag named by a key, or nullptr. help and config are flags but no keys.
CLI::Option* option_of(CLI::App& command, const std::string& key) {
  if (key == "help" || key == "config" || key.empty() || key.starts_with("-")) return nullptr;
  try {
    return command.get_option("--" + key);
  } catch (const CLI::OptionNotFound&) {
    return nullptr;
  }
}

[[noreturn]] void fail_unknown_key(CLI::App& command, const std::string& key, const toml::node& node,
                                   const std::string& at) {
  if (node.is_table())
    TS_FAIL(at, "unknown key ", quoted_text(key, 80), " (a [table]: a config holds flat `flag = value` lines, with no "
            "sections); keys are the flag names of '", command.get_name(), "' without the leading dashes");
  const std::string nearest = nearest_flag(command, key);
  const std::string hint = nearest.empty() ? "" : " (did you mean " + quoted_text(nearest.substr(2)) + "?)";
  TS_FAIL(at, "unknown key ", quoted_text(key, 80), hint, "; keys are the flag names of '", command.get_name(),
          "' without the leading dashes");
}

void apply_file(CLI::App& command, const std::string& path) {
  // A directory, a device or a FIFO would read as an empty (or endless) config: only regular files,
  // of bounded size, nesting and key length (toml_bounds.h).
  const std::string text = read_whole_file(path, "--config", kMaxConfigFileBytes);
  check_toml_bounds(text, path);
  toml::table table;
  try {
    table = toml::parse(text, path);
  } catch (const toml::parse_error& e) {
    TS_FAIL("--config ", quoted_text(path), ": line ", e.source().begin.line, ", column ", e.source().begin.column,
            ": ", one_line(e.description(), 300));
  }
  std::set<const CLI::Option*> from_command_line;
  for (const CLI::Option* option : command.get_options())
    if (option->count() > 0) from_command_line.insert(option);
  std::map<const CLI::Option*, std::pair<std::string, size_t>> set_by;  // option -> (key, line) of the file
  // In the file's order (toml::table iterates by name), so that errors name the first offending line.
  std::vector<std::pair<const toml::key*, const toml::node*>> entries;
  for (auto&& [toml_key, node] : table) entries.emplace_back(&toml_key, &node);
  std::sort(entries.begin(), entries.end(),
            [](const auto& a, const auto& b) { return a.first->source().begin.line < b.first->source().begin.line; });
  std::string overridden;
  for (const auto& [toml_key, node_pointer] : entries) {
    const toml::node& node = *node_pointer;
    const std::string key(toml_key->str());
    const size_t line = toml_key->source().begin.line;
    const std::string at = where(path, line);
    CLI::Option* option = option_of(command, key);
    if (!option) fail_unknown_key(command, key, node, at);
    // Two keys for one flag: a name and its alias, or a switch and its negation (overlap, no-overlap).
    if (auto [it, fresh] = set_by.try_emplace(option, key, line); !fresh)
      TS_FAIL(at, "key ", quoted_text(key), " sets the same flag as ", quoted_text(it->second.first), " on line ",
              it->second.second, "; keep one of them");
    const std::vector<std::string> values = values_of(node, *option, key, at);  // checked even when overridden
    if (from_command_line.count(option)) {
      overridden += (overridden.empty() ? "" : ", ") + option->get_name() + " (line " + std::to_string(line) + ")";
      continue;
    }
    try {
      for (const std::string& v : values) option->add_result(v);
      option->run_callback();
    } catch (const CLI::ConversionError&) {
      TS_FAIL(at, "key ", quoted_text(key), ": ", quoted_text(values.back(), 40), " is outside ", option->get_name(),
              "'s range");
    } catch (const CLI::Error& e) {
      TS_FAIL(at, "key ", quoted_text(key), ": ", e.what());
    }
    for (const std::string& name : option->get_lnames()) origins()["--" + name] = {path, key, line};
  }
  if (!overridden.empty() && launcher_place().rank == 0)
    std::fprintf(stderr, "tessera: note: flags on the command line override keys of %s: %s\n",
                 quoted_text(path).c_str(), overridden.c_str());
}

void apply_config_and_check_required(CLI::App& command) {
  CLI::Option* config = command.get_option("--config");
  if (config->count() > 1) {
    std::string files;
    for (const std::string& file : config->results()) files += (files.empty() ? "" : ", ") + quoted_text(file);
    TS_FAIL("--config given ", config->count(), " times (", files,
            "); give one file: merge them, or override single keys with flags");
  }
  if (config->count() > 0) apply_file(command, config->as<std::string>());
  for (const CLI::Option* option : required_flags()[&command])
    TS_CHECK(option->count() > 0, option->get_name(), " is required (on the command line, or as the key ",
             quoted_text(option->get_name().substr(2)), " of a --config file)");
}

}  // namespace

void enable_toml_config(CLI::App& command) {
  for (CLI::Option* option : command.get_options())
    if (option->get_required()) {
      option->required(false);
      required_flags()[&command].push_back(option);
    }
  command.add_option("--config", "TOML file whose keys are flag names (flags on the command line win)")
      ->type_name("FILE");
}

void apply_toml_config(CLI::App& command) {
  try {
    apply_config_and_check_required(command);
  } catch (const QuietError&) {
    throw;
  } catch (const Error& e) {
    throw ConfigError(e.what(), e.where());
  }
}

std::string config_origin_note(const std::string& message) {
  const auto name_char = [&](size_t i) {
    return std::isalnum(static_cast<unsigned char>(message[i])) || message[i] == '-';
  };
  std::set<std::string> keys;
  std::string note;
  for (const auto& [flag, origin] : origins())
    for (size_t at = message.find(flag); at != std::string::npos; at = message.find(flag, at + 1)) {
      const size_t after = at + flag.size();
      if ((at > 0 && name_char(at - 1)) || (after < message.size() && name_char(after))) continue;
      if (keys.insert(origin.key).second)
        note += (note.empty() ? "" : ", ") + origin.key + " on line " + std::to_string(origin.line) + " of " +
                quoted_text(origin.path);
      break;
    }
  return note.empty() ? "" : " (from --config: " + note + ")";
}

}  // namespace tessera::cli
