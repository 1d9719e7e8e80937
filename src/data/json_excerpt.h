// A JSON value from a user's file, shown in an error message: a scalar as written (escaped, cut to
// a few dozen characters), an array or object only by kind and size. Never recurses, so a value
// nested 100,000 deep cannot overflow the stack the way json::dump() does.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

std::string json_excerpt(const nlohmann::json& value);

// Why parsing a user's file failed, for "not valid JSON (...)": "error at byte N" for a syntax error,
// "a number out of range at byte N" for one past a double's (1e999: nlohmann throws out_of_range then,
// not parse_error), else the parser's own words.
std::string json_error_text(const nlohmann::json::exception& error);

}  // namespace tessera
