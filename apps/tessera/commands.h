// The tessera subcommands. Each add_*_command registers its flags on the app and a callback
// that calls into the library; errors surface as tessera::Error and main turns them into one line.
#pragma once

#include <CLI/CLI.hpp>

namespace tessera::cli {

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_tokenizer_train_command(CLI::App& app);
void add_convert_command(CLI::App& app);

// --config FILE on a subcommand: TOML whose keys are the subcommand's long flag names.
void enable_toml_config(CLI::App& command);

}  // namespace tessera::cli
