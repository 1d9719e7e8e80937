// tessera launch: run a training job and restart it after failures (train/restart_supervisor.h).
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <sstream>

#include <toml++/toml.h>

#include "commands.h"
#include "core/error.h"
#include "core/user_text.h"
#include "train/restart_supervisor.h"

namespace tessera::cli {
namespace {

// The words of the job's command: its arguments split at spaces, so that the flags inside a
// wrapper's `bash -c "..."` string count too.
std::vector<std::string> command_words(const std::vector<std::string>& command) {
  std::vector<std::string> words;
  for (const std::string& arg : command) {
    std::istringstream split(arg);
    for (std::string word; split >> word;) words.push_back(word);
  }
  return words;
}

// What the job's command sets `flag` to (`--flag V`, `--flag=V`, or "" for a bare `--flag`), else
// what the --config file it names sets `key` to (a boolean, whole number or string, as text); nothing when neither sets it.
std::optional<std::string> job_setting(const std::vector<std::string>& words, const std::string& flag,
                                       const std::string& key) {
  std::string config;
  for (size_t i = 0; i < words.size(); ++i) {
    const bool next = i + 1 < words.size() && !words[i + 1].starts_with("--");
    if (words[i] == flag) return next ? words[i + 1] : "";
    if (words[i].starts_with(flag + "=")) return words[i].substr(flag.size() + 1);
    if (words[i] == "--config" && next) config = words[i + 1];
    if (words[i].starts_with("--config=")) config = words[i].substr(9);
  }
  if (config.empty()) return std::nullopt;
  try {
    const toml::table table = toml::parse_file(config);
    const toml::node* value = table.get(key);
    if (!value) return std::nullopt;
    if (const auto b = value->value<bool>(); b && value->is_boolean()) return *b ? "true" : "false";
    if (const auto n = value->value<int64_t>()) return std::to_string(*n);
    return value->value<std::string>();
  } catch (const toml::parse_error&) {
    // The job itself reports a config it cannot read.
  }
  return std::nullopt;
}

// Lines for a job that a restart would take back further than its last failure: one that does not
// resume, or one that saves only at its end.
void warn_about_restarts(const std::vector<std::string>& command) {
  const std::vector<std::string> words = command_words(command);
  const bool flag = std::any_of(words.begin(), words.end(), [](const std::string& w) { return w.starts_with("--resume"); });
  if (!flag && job_setting(words, "--resume", "resume").value_or("false") != "true")
    std::fprintf(stderr, "tessera launch: the command has no --resume (nor resume = true in its --config), so a "
                         "restart begins again at step 0\n");
  const std::optional<std::string> every = job_setting(words, "--checkpoint-every", "checkpoint-every");
  if (!every || *every == "0")
    std::fprintf(stderr, "tessera launch: the command saves a checkpoint only at its end (no --checkpoint-every N), "
                         "so a restart after a failure begins again at its first step\n");
}

}  // namespace

void add_launch_command(CLI::App& app) {
  struct Options {
    RestartPolicy policy;
    std::vector<std::string> command;
  };
  auto o = std::make_shared<Options>();
  CLI::App* cmd = add_command(app, "launch",
                              "Run a training job and restart it from its latest checkpoint when it fails: "
                              "tessera launch --max-restarts 3 -- mpirun -np 8 tessera train ... --resume. A "
                              "refused command line or configuration (exit 2) is not restarted; what a failed job "
                              "left running is ended before the restart. SIGTERM, SIGINT or SIGUSR1 to launch ends "
                              "the supervision: the job gets SIGUSR1 (save a checkpoint and stop; mpirun and srun "
                              "pass it to every rank), again while it runs, and a second signal SIGTERM");
  cmd->add_option("--max-restarts", o->policy.max_restarts, "Restarts after failures before giving up")
      ->capture_default_str();
  cmd->add_option("--restart-delay", o->policy.delay_s, "Seconds between a failure and the restart")
      ->capture_default_str();
  cmd->add_option("--restart-window", o->policy.window_s,
                  "Only failures of the last this many seconds count against --max-restarts (0: every failure)")
      ->capture_default_str();
  cmd->add_option("command", o->command, "The job's command line, after --")->required();
  cmd->callback([o] {
    // Refused as a bad flag is (exit 2).
    if (!(o->policy.delay_s >= 0 && o->policy.delay_s <= 86400))
      throw ConfigError("--restart-delay must be between 0 and 86400 s, got " + number_text(o->policy.delay_s), "");
    if (!(o->policy.window_s >= 0 && o->policy.window_s <= 365 * 86400.0))
      throw ConfigError("--restart-window must be between 0 and 31536000 s (a year), got " +
                            number_text(o->policy.window_s),
                        "");
    if (o->policy.max_restarts < 0)
      throw ConfigError("--max-restarts must not be negative, got " + std::to_string(o->policy.max_restarts), "");
    warn_about_restarts(o->command);
    const int code = run_with_restarts(o->command, o->policy, [](const std::string& line) {
      std::fprintf(stderr, "tessera launch: %s\n", line.c_str());
    });
    if (code != 0) std::exit(code);
  });
}

}  // namespace tessera::cli
