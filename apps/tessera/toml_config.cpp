// --config support: a TOML file whose keys are the subcommand's long flag names. Values from the
// file fill every flag that was not given on the command line (flags win); a key naming a negated flag
// (no-overlap = true) means what the flag means; a syntax error names the file, line and column, an
// unknown key names the key.
#include <charconv>
#include <map>
#include <vector>
#include <toml++/toml.h>

#include "commands.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/whole_file.h"
#include "toml_bounds.h"

namespace tessera::cli {
namespace {

std::string scalar_text(const toml::node& node, const std::string& path, const std::string& key) {
  if (auto s = node.value_exact<std::string>()) return *s;
  if (auto b = node.value_exact<bool>()) return *b ? "true" : "false";
  if (auto i = node.value_exact<int64_t>()) return std::to_string(*i);
  if (auto d = node.value_exact<double>()) {
    char buffer[64];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, *d);
    return std::string(buffer, end);
  }
  TS_FAIL("--config ", quoted_text(path), ": key ", quoted_text(key, 80), " must be a string, number or boolean");
}

// The subcommands' required flags, which the config file may give: CLI11 checks `required` while
// it parses, before the callback reads the file, so enable_toml_config takes them over and
// apply_toml_config checks them once the file's keys are in.
std::map<const CLI::App*, std::vector<CLI::Option*>>& required_flags() {
  static std::map<const CLI::App*, std::vector<CLI::Option*>> flags;
  return flags;
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
  for (auto&& [key, node] : table) {
    const std::string name(key.str());
    CLI::Option* option = nullptr;
    try {
      option = command.get_option("--" + name);
    } catch (const CLI::OptionNotFound&) {
    }
    TS_CHECK(option && name != "config", "--config ", quoted_text(path), ": unknown key ", quoted_text(name, 80), "; keys are the flag names of '",
             command.get_name(), "' without the leading dashes");
    if (option->count() > 0) continue;  // given on the command line
    std::vector<std::string> values;
    if (const toml::array* array = node.as_array())
      for (const toml::node& element : *array) values.push_back(scalar_text(element, path, name));
    else
      values.push_back(scalar_text(node, path, name));
    try {
      // A flag's value goes through the flag's own reading, as CLI11's config files do: a key naming a
      // negated flag ("no-overlap = true") then means what the flag means.
      const bool flag = option->get_expected_min() == 0;
      for (const std::string& v : values) option->add_result(flag ? option->get_flag_value(name, v) : v);
      option->run_callback();
    } catch (const CLI::Error& e) {
      TS_FAIL("--config ", quoted_text(path), ": key ", quoted_text(name, 80), ": ", e.what());
    }
  }
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
  CLI::Option* config = command.get_option("--config");
  if (config->count() > 0) apply_file(command, config->as<std::string>());
  for (const CLI::Option* option : required_flags()[&command])
    TS_CHECK(option->count() > 0, option->get_name(), " is required (on the command line, or as the key ",
             quoted_text(option->get_name().substr(2)), " of a --config file)");
}

}  // namespace tessera::cli
