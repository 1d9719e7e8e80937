// tessera: the command-line entry point. Parses the subcommand and turns every error into one
// line on stderr and a non-zero exit.
#include <cstdio>

#include "commands.h"
#include "core/error.h"

namespace tessera::cli {

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description) {
  CLI::App* command = app.add_subcommand(name, description);
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return command;
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train transformer language models (GPT-2) on CPU and GPU", "tessera"};
  app.require_subcommand(1, 1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()) + "\n"; });
  tessera::cli::add_train_command(app);
  tessera::cli::add_eval_command(app);
  tessera::cli::add_generate_command(app);
  tessera::cli::add_tokenize_command(app);
  tessera::cli::add_tokenizer_train_command(app);
  tessera::cli::add_convert_command(app);
  tessera::cli::add_bench_command(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const tessera::QuietError&) {
    return 1;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
  } catch (const tessera::Error& e) {
    std::fprintf(stdout, "\n");
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
