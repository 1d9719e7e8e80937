// The tessera subcommands. Each add_*_command registers its flags on the app and a callback
// that calls into the library; errors surface as tessera::Error and main turns them into one line.
#pragma once

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>

#include "core/error.h"

namespace tessera {
class Tokenizer;
struct TrainConfig;
}

namespace tessera::cli {

// --attention-kernel's help, the same for train (and plan memory) and bench train.
inline constexpr const char* kAttentionKernelHelp =
    "GPU attention in bf16/fp16: auto (cuDNN's fused attention where the build has it, it covers the call and its "
    "backward's workspace stays within 2 GiB, else ours), tessera (our tensor-core kernels) or cudnn";

void add_train_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_generate_command(CLI::App& app);
void add_tokenize_command(CLI::App& app);
void add_tokenizer_train_command(CLI::App& app);
void add_convert_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_launch_command(CLI::App& app);
void add_plan_command(CLI::App& app);
// `bench train`, registered under the bench command.
void add_bench_train_command(CLI::App& bench);

// The flags that shape a run's model, batch, precision and parallel layout (`tessera train`'s, which
// `tessera plan memory` shares): --model and its overrides, --init-from, --batch-size,
// --micro-batch-size, --seq-len, --dtype, --recompute(-layers), --dp/--tp/--pp/--cp/--ep, --zero, ...,
// and the attention choices that set cuDNN's workspace (--attention-kernel, --nondeterministic,
// --attention-mask).
void bind_layout_flags(CLI::App& command, TrainConfig& config);
// Every flag of `tessera train` (the layout's among them) bound to `config`.
void bind_train_flags(CLI::App& command, TrainConfig& config);
// A resumed or imported run takes its checkpoint's (or config.json's) shape: without --model (on the
// command line or in --config), `config.model` is cleared so that only the flags given are checked
// against the stored model; with it, the preset must describe that model.
void keep_stored_shape_unless_named(TrainConfig& config, const CLI::App& command);

// --config FILE on a subcommand: TOML whose keys are the subcommand's long flag names.
// enable_toml_config, after the subcommand's other flags, adds the flag; apply_toml_config, first
// thing in the subcommand's callback, fills the flags not given on the command line from the file,
// then checks the subcommand's required flags (which the file may give).
// apply_toml_config's errors are ConfigError, which the CLI exits with 2 as it does a bad flag, so
// that `tessera launch` does not restart a job whose config it would refuse again.
void enable_toml_config(CLI::App& command);
void apply_toml_config(CLI::App& command);
class ConfigError : public Error {
 public:
  using Error::Error;
};
// For an error raised after the file was applied: " (from --config: steps on line 3 of 'run.toml')"
// naming the keys that set the flags `message` names, or "" when it names none of them.
std::string config_origin_note(const std::string& message);

// The long flag of `command` ("--steps") nearest to `name` (with or without dashes) by edit
// distance, or "" when none is close enough to be a typo of it. --help and --config are left out.
std::string nearest_flag(const CLI::App& command, const std::string& name);

// A generate() callback that prints each token's text to stdout as it comes; end-of-text prints
// nothing. `tokenizer` must outlive the callback.
std::function<void(int32_t)> print_token_text(const Tokenizer& tokenizer);

// Adds range checks to every integer and floating-point flag of `app` and its subcommands (64-bit
// overflow, a negative unsigned value, NaN, infinity): call once, after every command is added.
void check_number_flags(CLI::App& app);

// A subcommand whose repeated flags take the last value, as in most command-line tools.
CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description);

}  // namespace tessera::cli
