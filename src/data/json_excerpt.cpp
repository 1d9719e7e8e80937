// Error-message excerpts of JSON values.
#include "data/json_excerpt.h"

#include "core/user_text.h"

namespace tessera {

std::string json_excerpt(const nlohmann::json& value) {
  if (value.is_array()) return "an array of " + std::to_string(value.size()) + " elements";
  if (value.is_object()) return "an object of " + std::to_string(value.size()) + " keys";
  return quoted_text(value.dump(), 60);
}

std::string json_error_text(const nlohmann::json::exception& error) {
  if (const auto* syntax = dynamic_cast<const nlohmann::json::parse_error*>(&error))
    return "error at byte " + std::to_string(syntax->byte);
  if (error.id == 406) return "a number out of range";
  return one_line(error.what(), 120);
}

}  // namespace tessera
