// Whole-file reads and atomic whole-file writes for the tokenizer's vocabulary and text files.
#pragma once

#include <filesystem>
#include <string>
#include <string_view>

namespace tessera {

// The bytes of `file`; `what` names the file's role in the error ("tokenizer file", "training text").
std::string read_whole_file(const std::filesystem::path& file, std::string_view what);

// Writes `bytes` to a temporary name beside `file`, fsyncs, then renames it over `file`: readers
// see the old file or the complete new one, never a partial one.
void write_whole_file_atomically(const std::filesystem::path& file, std::string_view bytes);

}  // namespace tessera
