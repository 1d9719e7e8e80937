// --config support: a CLI11 config reader backed by toml++, so a TOML file's keys become the
// flags of the same name (flags given on the command line win) and a syntax error names the file,
// line and column.
#include <charconv>
#include <sstream>
#include <toml++/toml.h>

#include "commands.h"
#include "core/error.h"

namespace tessera::cli {
namespace {

std::string scalar_text(const toml::node& node, const std::string& key) {
  if (auto s = node.value<std::string>()) return *s;
  if (auto b = node.value<bool>()) return *b ? "true" : "false";
  if (node.is_integer()) return std::to_string(*node.value<int64_t>());
  if (node.is_floating_point()) {
    char buffer[64];
    auto [end, ec] = std::to_chars(buffer, buffer + sizeof buffer, *node.value<double>());
    return std::string(buffer, end);
  }
  TS_FAIL("--config: key '", key, "' must be a string, number or boolean");
}

class TomlConfig : public CLI::Config {
 public:
  explicit TomlConfig(const CLI::Option* option) : option_(option) {}

  std::string to_config(const CLI::App*, bool, bool, std::string) const override { return {}; }

  std::vector<CLI::ConfigItem> from_config(std::istream& input) const override {
    std::string path = option_ && !option_->results().empty() ? option_->results().front() : "config";
    toml::table table;
    try {
      table = toml::parse(input, path);
    } catch (const toml::parse_error& e) {
      TS_FAIL("--config ", path, ": line ", e.source().begin.line, ", column ", e.source().begin.column, ": ",
              e.description());
    }
    std::vector<CLI::ConfigItem> items;
    for (auto&& [key, node] : table) {
      CLI::ConfigItem item;
      item.name = std::string(key.str());
      if (const toml::array* array = node.as_array()) {
        for (const toml::node& element : *array) item.inputs.push_back(scalar_text(element, item.name));
      } else {
        TS_CHECK(!node.is_table(), "--config ", path, ": sections are not used; write '", item.name,
                 ".x = ...' keys as plain flag names");
        item.inputs.push_back(scalar_text(node, item.name));
      }
      items.push_back(std::move(item));
    }
    return items;
  }

 private:
  const CLI::Option* option_;
};

}  // namespace

void enable_toml_config(CLI::App& command) {
  CLI::Option* option = command.set_config("--config", "", "TOML file whose keys are flag names (flags override it)");
  command.config_formatter(std::make_shared<TomlConfig>(option));
  command.allow_config_extras(CLI::config_extras_mode::error);
}

}  // namespace tessera::cli
