// One line of a JSON lines file (tokenize's and tokenizer-train's *.jsonl input) as a JSON object.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera {

// "JSON lines file '<file>' line N": where a message about a line's content points.
std::string json_line_place(const std::filesystem::path& file, int64_t line_number);

// The object on `line`. Throws naming the place and the fix for bytes that are not UTF-8, invalid
// JSON and a value that is no object; a lone UTF-16 surrogate escape reads as U+FFFD.
nlohmann::json parse_json_line(const std::string& line, const std::filesystem::path& file, int64_t line_number);

}  // namespace tessera
