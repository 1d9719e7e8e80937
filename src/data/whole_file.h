// Whole-file reads: tokenizer vocabularies, training text, JSON configs and checkpoint state.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>

namespace tessera {

// Size bounds of the files read whole: far above any real one, far below what would exhaust memory.
inline constexpr uint64_t kMaxConfigFileBytes = uint64_t(16) << 20;     // TOML, config.json, state.json
inline constexpr uint64_t kMaxTokenizerFileBytes = uint64_t(256) << 20;  // tokenizer.json, encoder.json, vocab.bpe
inline constexpr uint64_t kMaxTextFileBytes = uint64_t(4) << 30;         // one training-text file

// The bytes of `file`, which must be a regular file of at most max_bytes (a FIFO, device or
// directory is refused by kind, see core/file_checks.h); `what` names the file's role in the error
// ("tokenizer file", "training text").
std::string read_whole_file(const std::filesystem::path& file, std::string_view what, uint64_t max_bytes);

// Calls visit(line, number) for each line of `text` (number from 1), without its '\n' or a
// trailing '\r'; empty lines included.
void for_each_line(std::string_view text, const std::function<void(std::string_view line, size_t number)>& visit);

}  // namespace tessera
