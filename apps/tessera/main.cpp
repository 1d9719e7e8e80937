// tessera: the command-line entry point. Parses the subcommand and turns every error into one
// line on stderr and a non-zero exit; errors are worded where they arise, this is the last net.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <new>
#include <thread>

#include "commands.h"
#include "core/error.h"
#include "core/user_text.h"

namespace tessera::cli {

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description) {
  CLI::App* command = app.add_subcommand(name, description);
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return command;
}

}  // namespace tessera::cli

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train transformer language models (GPT-2, Llama, MoE) on CPU and GPU", "tessera"};
  app.require_subcommand(1, 1);
  app.failure_message([](const CLI::App*, const CLI::Error& e) { return std::string(e.what()) + "\n"; });
  tessera::cli::add_train_command(app);
  tessera::cli::add_eval_command(app);
  tessera::cli::add_generate_command(app);
  tessera::cli::add_tokenize_command(app);
  tessera::cli::add_tokenizer_train_command(app);
  tessera::cli::add_convert_command(app);
  tessera::cli::add_bench_command(app);
  tessera::cli::add_launch_command(app);
  tessera::cli::add_plan_command(app);
  tessera::cli::check_number_flags(app);
  // Every message is printed through one_line: control characters escaped, length bounded.
  auto fail = [](const std::string& message) {
    std::fprintf(stderr, "tessera: error: %s\n", tessera::one_line(message).c_str());
    return 1;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const tessera::QuietError&) {
    // Rank 0 reports the error every rank hit alike. mpirun aborts the job at the first non-zero
    // exit, so a quiet rank that ended first could cut rank 0 off before its line is out: it leaves
    // rank 0 a moment (rank 0 exiting first ends this rank at once).
    std::this_thread::sleep_for(std::chrono::seconds(3));
    return 1;
  } catch (const CLI::ConversionError& e) {
    // CLI11 words it "Could not convert: --threads = 4294967297": a value past the flag's own
    // (32- or 64-bit) range, or not a number of its kind. A flag given twice is listed as
    // "16,0.5"; the last value is the one read (TakeLast), so it is the one named.
    std::string message = e.what();
    const std::string prefix = "Could not convert: ";
    if (message.starts_with(prefix)) message = message.substr(prefix.size());
    const size_t equals = message.find(" = ");
    if (equals != std::string::npos) {
      std::string value = message.substr(equals + 3);
      if (const size_t comma = value.rfind(','); comma != std::string::npos) value = value.substr(comma + 1);
      message = message.substr(0, equals) + ": " + tessera::quoted_text(value) +
                " is not a number this flag takes (a whole number within its range, or a number of its kind)";
    }
    fail(message);
    return 2;
  } catch (const CLI::ParseError& e) {
    fail(e.what());
    return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
  } catch (const tessera::Error& e) {
    std::fprintf(stdout, "\n");
    return fail(e.what());
  } catch (const std::bad_alloc&) {
    return fail("out of memory; lower the sizes asked for (--batch-size, --seq-len, the model's shape)");
  } catch (const std::filesystem::filesystem_error& e) {
    return fail(e.code().message() + ": " + tessera::quoted_text(e.path1().string()) +
                (e.path2().empty() ? "" : " -> " + tessera::quoted_text(e.path2().string())));
  } catch (const std::exception& e) {
    return fail(e.what());
  }
  return 0;
}
