// tessera: the command-line entry point. Parses the subcommand and turns every error into one
// line on stderr and a non-zero exit; errors are worded where they arise, this is the last net.
#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <new>
#include <thread>
#include <utility>
#include <vector>

#include "commands.h"
#include "core/error.h"
#include "core/user_text.h"

namespace tessera::cli {

namespace {

// CLI11's help, without the values its negated switches set ("--no-overlap{false}" reads "--no-overlap").
class HelpFormatter : public CLI::Formatter {
 public:
  std::string make_option_name(const CLI::Option* opt, bool is_positional) const override {
    std::string name = CLI::Formatter::make_option_name(opt, is_positional);
    for (size_t open = name.find('{'); open != std::string::npos; open = name.find('{', open)) {
      const size_t close = name.find('}', open);
      if (close == std::string::npos) break;
      name.erase(open, close - open + 1);
    }
    return name;
  }
};

}  // namespace

CLI::App* add_command(CLI::App& app, const std::string& name, const std::string& description) {
  CLI::App* command = app.add_subcommand(name, description);
  command->option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  return command;
}

std::string nearest_flag(const CLI::App& command, const std::string& name) {
  std::string typed = name.substr(std::min(name.find_first_not_of('-'), name.size()));
  typed = typed.substr(0, typed.find('='));
  for (char& c : typed) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (typed.empty()) return "";
  // Levenshtein distance between `typed` and `flag`.
  const auto distance = [&](const std::string& flag) {
    std::vector<size_t> row(flag.size() + 1);
    for (size_t j = 0; j <= flag.size(); ++j) row[j] = j;
    for (size_t i = 1; i <= typed.size(); ++i) {
      size_t diagonal = row[0];
      row[0] = i;
      for (size_t j = 1; j <= flag.size(); ++j)
        diagonal = std::exchange(row[j], std::min({row[j] + 1, row[j - 1] + 1, diagonal + (typed[i - 1] != flag[j - 1])}));
    }
    return row[flag.size()];
  };
  // A typo is a distance of 1 in a short name, 2 in a longer one; a cut-off name is the shortest flag it begins.
  std::string best;
  size_t best_distance = typed.size() <= 4 ? 2 : 3;
  for (const CLI::Option* option : command.get_options())
    for (const std::string& flag : option->get_lnames()) {
      if (flag == "help" || flag == "config") continue;
      const size_t d = flag.starts_with(typed) && typed.size() >= 3 ? 0 : distance(flag);
      if (d < best_distance || (d == 0 && best_distance == 0 && flag.size() + 2 < best.size()))
        best = "--" + flag, best_distance = d;
    }
  return best;
}

namespace {

// CLI11's "The following arguments were not expected: 3 --step" made actionable: the first stray
// argument of the subcommand that was parsed, with the flag it most likely meant, or the switch before
// it that takes no value.
std::string stray_argument_message(CLI::App& app, int argc, char** argv) {
  CLI::App* command = &app;
  while (!command->get_subcommands().empty()) command = command->get_subcommands().front();
  const std::vector<std::string> extras = app.remaining(true);
  if (extras.empty() || command == &app) return "";
  const std::string& stray = extras.front();
  const std::string words =
      "tessera " + (command->get_parent() != &app ? command->get_parent()->get_name() + " " : "") + command->get_name();
  const std::string name = "'" + words + "'", see_help = "; see '" + words + " --help'";
  if (stray.starts_with("-")) {
    const std::string nearest = nearest_flag(*command, stray);
    return "unknown flag " + quoted_text(stray, 80) + " of " + name +
           (nearest.empty() ? see_help : "; did you mean " + nearest + "?");
  }
  for (int i = 2; i < argc; ++i) {
    if (argv[i] != stray) continue;
    const std::string before = argv[i - 1];
    const CLI::Option* option = nullptr;
    try {
      option = before.starts_with("--") ? command->get_option(before) : nullptr;
    } catch (const CLI::OptionNotFound&) {
    }
    if (option && option->get_expected_min() == 0)
      return "unexpected argument " + quoted_text(stray, 80) + ": " + before + " is a switch that takes no value; write " +
             before + " alone to turn it on (or " + before + "=false to turn it off)";
    break;
  }
  const bool positionals = !command->get_options([](const CLI::Option* o) { return !o->nonpositional(); }).empty();
  if (positionals)
    return "unexpected argument " + quoted_text(stray, 80) + " to " + name + see_help;
  return "unexpected argument " + quoted_text(stray, 80) + " to " + name +
         ", which takes no positional arguments: a flag's value follows its flag (--steps 100 or --steps=100)";
}

// "A subcommand is required", CLI11's word for both `tessera` alone and `tessera trian`, made
// actionable: the commands there are, and the one a mistyped name most likely meant. Empty when the
// command line names its commands rightly (the error was another).
std::string command_message(CLI::App& app, int argc, char** argv) {
  CLI::App* parent = &app;
  std::string words = "tessera";
  for (int i = 1;; ++i) {
    std::vector<std::string> names;
    for (const CLI::App* sub : parent->get_subcommands([](const CLI::App*) { return true; }))
      names.push_back(sub->get_name());
    if (names.empty()) return "";
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    if (i >= argc || argv[i][0] == '-') {
      if (i < argc && (std::string(argv[i]) == "-h" || std::string(argv[i]) == "--help")) return "";
      return "give a command after '" + words + "': " + list + (parent == &app ? " ('tessera train' alone trains the "
                                                                                 "fortunes demo)" : "") +
             "; '" + words + " --help' says what each does";
    }
    const std::string typed = argv[i];
    CLI::App* next = nullptr;
    for (CLI::App* sub : parent->get_subcommands([](CLI::App*) { return true; }))
      if (sub->get_name() == typed) next = sub;
    if (!next) {
      // The nearest name: a typo (distance 2 at most) or a cut-off name.
      std::string best;
      size_t best_distance = 3;
      for (const std::string& name : names) {
        std::vector<size_t> row(name.size() + 1);
        for (size_t j = 0; j <= name.size(); ++j) row[j] = j;
        for (size_t a = 1; a <= typed.size(); ++a) {
          size_t diagonal = row[0];
          row[0] = a;
          for (size_t j = 1; j <= name.size(); ++j)
            diagonal = std::exchange(row[j], std::min({row[j] + 1, row[j - 1] + 1, diagonal + (typed[a - 1] != name[j - 1])}));
        }
        const size_t d = name.starts_with(typed) && typed.size() >= 2 ? 0 : row[name.size()];
        if (d < best_distance) best = name, best_distance = d;
      }
      return "unknown command " + quoted_text(typed, 80) + " of '" + words + "'" +
             (best.empty() ? "" : "; did you mean '" + words + " " + best + "'?") + " (commands: " + list + ")";
    }
    parent = next;
    words += " " + typed;
  }
}

}  // namespace

}  // namespace tessera::cli

int main(int argc, char** argv) {
  CLI::App app{"Tessera: train transformer language models (GPT-2, Llama, MoE) on CPU and GPU", "tessera"};
  app.require_subcommand(1, 1);
  app.formatter(std::make_shared<tessera::cli::HelpFormatter>());  // before the commands: they copy it
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
  } catch (const CLI::ExtrasError& e) {
    const std::string message = tessera::cli::stray_argument_message(app, argc, argv);
    fail(message.empty() ? std::string(e.what()) : message);
    return e.get_exit_code();
  } catch (const CLI::RequiredError& e) {
    const std::string message = tessera::cli::command_message(app, argc, argv);
    fail(message.empty() ? std::string(e.what()) : message);
    return e.get_exit_code();
  } catch (const CLI::ParseError& e) {
    fail(e.what());
    return e.get_exit_code() != 0 ? e.get_exit_code() : 2;
  } catch (const tessera::cli::ConfigError& e) {
    fail(e.what());
    return 2;
  } catch (const tessera::Error& e) {
    std::fprintf(stdout, "\n");
    return fail(e.what() + tessera::cli::config_origin_note(e.what()));
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
