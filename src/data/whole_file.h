// Whole-file reads: tokenizer vocabularies, training text, JSON configs and checkpoint state.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

// The bytes of `file`; `what` names the file's role in the error ("tokenizer file", "training text").
std::string read_whole_file(const std::filesystem::path& file, std::string_view what);

}  // namespace tessera
