// Helpers shared by the tests: scratch directories, random tensors, running the tessera binary,
// and the message of an expected tessera::Error.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "core/error.h"

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
// Adds special tokens (e.g. ChatML's <|im_start|>, <|im_end|>) after the last id of the Hugging Face
// tokenizer.json at `path`, rewriting it.
void add_special_tokens(const std::filesystem::path& path, const std::vector<std::string>& specials);
std::string read_text(const std::filesystem::path& path);
// A safetensors file from a raw header string and a data section, bypassing our writer.
void write_raw(const std::filesystem::path& path, const std::string& header, const std::string& data);
// Every path under `root` with its bytes (a link: its target), to compare a folder before and after.
std::map<std::string, std::string> folder_snapshot(const std::filesystem::path& root);

// The message of the tessera::Error that `f` throws ("" and a test failure when it throws none).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected a tessera::Error";
  return "";
}

bool contains(const std::string& text, const std::string& part);

// `f` throws a tessera::Error whose message contains every one of `parts`.
template <typename F>
void expect_error_with(F&& f, const std::vector<std::string>& parts) {
  const std::string message = error_of(f);
  for (const std::string& part : parts) EXPECT_TRUE(contains(message, part)) << message;
}

// Bad input to the tessera binary: a non-zero exit and one "tessera: error:" line that holds `fix`.
void expect_one_line_error(const CommandResult& result, const std::string& fix);
// The same for each (arguments, fix) of `cases`, run as `command` + arguments.
void expect_one_line_errors(const std::string& command, const std::vector<std::pair<std::string, std::string>>& cases);

}  // namespace tessera::testing
