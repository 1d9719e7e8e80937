// A JSON value from a user's file, shown in an error message: a scalar as written (escaped, cut to
// a few dozen characters), an array or object only by kind and size. Never recurses, so a value
// nested 100,000 deep cannot overflow the stack the way json::dump() does.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

std::string json_excerpt(const nlohmann::json& value);

}  // namespace tessera
