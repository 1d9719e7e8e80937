// Shared by the libFuzzer targets: the parsers under test read files, so each input is written to a
// file of this process's own (under $TMPDIR) and the parser is pointed at it. A tessera::Error is the
// expected outcome of most inputs; anything else (a crash, an ASan report, a foreign exception) is a
// finding.
#pragma once

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>

namespace tessera::fuzz {

// A folder for this process's inputs, created once.
inline const std::filesystem::path& work_dir() {
  static const std::filesystem::path dir = [] {
    std::filesystem::path d = std::filesystem::temp_directory_path() / ("tessera-fuzz-" + std::to_string(::getpid()));
    std::filesystem::create_directories(d);
    return d;
  }();
  return dir;
}

// Writes bytes to work_dir()/name and returns the path.
inline std::filesystem::path write_input(const std::string& name, const uint8_t* data, size_t size) {
  const std::filesystem::path path = work_dir() / name;
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(reinterpret_cast<const char*>(data), std::streamsize(size));
  return path;
}

}  // namespace tessera::fuzz
