// Helpers shared by the tests: scratch directories, random tensors, running the tessera binary.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace tessera::testing {

// A fresh empty directory under the build tree, named after the running test.
std::filesystem::path scratch_dir();

// n values uniform in [lo, hi), deterministic in seed.
std::vector<float> random_floats(int64_t n, uint64_t seed, float lo = -1.0f, float hi = 1.0f);

struct CommandResult {
  int exit_code = 0;
  std::string output;  // stdout and stderr together
};

// Runs a shell command line and captures its output.
CommandResult run_command(const std::string& command_line);

void write_text(const std::filesystem::path& path, const std::string& text);
std::string read_text(const std::filesystem::path& path);

}  // namespace tessera::testing
