// tessera launch: run a training job and restart it after failures (train/restart_supervisor.h).
#include <cstdio>
#include <cstdlib>

#include <toml++/toml.h>

#include "commands.h"
#include "core/error.h"
#include "train/restart_supervisor.h"

namespace tessera::cli {
namespace {

// Whether the job resumes its run: --resume in an argument (also inside a wrapper's `bash -c "..."`
// string) or `resume = true` in a --config file the command names.
bool command_resumes(const std::vector<std::string>& command) {
  for (size_t i = 0; i < command.size(); ++i) {
    if (command[i].find("--resume") != std::string::npos) return true;
    std::string config;
    if (command[i] == "--config" && i + 1 < command.size()) config = command[i + 1];
    if (command[i].starts_with("--config=")) config = command[i].substr(9);
    if (config.empty()) continue;
    try {
      if (toml::parse_file(config)["resume"].value_or(false)) return true;
    } catch (const toml::parse_error&) {
      // The job itself reports a config it cannot read.
    }
  }
  return false;
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
                              "refused command line is not restarted. SIGTERM, SIGINT or SIGUSR1 to launch ends "
                              "the supervision: the job gets SIGUSR1 (save a checkpoint and stop; mpirun and srun "
                              "pass it to every rank), a second signal SIGTERM");
  cmd->add_option("--max-restarts", o->policy.max_restarts, "Restarts after failures before giving up")
      ->capture_default_str();
  cmd->add_option("--restart-delay", o->policy.delay_s, "Seconds between a failure and the restart")
      ->capture_default_str();
  cmd->add_option("command", o->command, "The job's command line, after --")->required();
  cmd->callback([o] {
    TS_CHECK(o->policy.delay_s >= 0 && o->policy.delay_s <= 86400, "--restart-delay must be between 0 and 86400 s, got ",
             o->policy.delay_s);
    if (!command_resumes(o->command))
      std::fprintf(stderr, "tessera launch: the command has no --resume (nor resume = true in its --config), so a "
                           "restart begins again at step 0\n");
    const int code = run_with_restarts(o->command, o->policy, [](const std::string& line) {
      std::fprintf(stderr, "tessera launch: %s\n", line.c_str());
    });
    if (code != 0) std::exit(code);
  });
}

}  // namespace tessera::cli
