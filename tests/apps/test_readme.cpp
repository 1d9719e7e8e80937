// The documentation against the binary: every flag a command's --help lists is named in README.md or
// docs/*.md, every flag they name exists (or is another tool's, listed here), every repository path
// they name exists, and nothing points outside the repository. A flag added without a word in the
// docs, or a doc naming a renamed flag or a moved file, fails here.
#include <gtest/gtest.h>

#include <cctype>
#include <filesystem>
#include <map>
#include <regex>
#include <set>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// README.md and every docs/*.md, one text.
std::string documentation() {
  const fs::path root = TESSERA_SOURCE_DIR;
  std::string text = testing::read_text(root / "README.md");
  for (const fs::directory_entry& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") {
      text += '\n';
      text.append(testing::read_text(e.path()));
    }
  return text;
}

std::string help_of(const std::string& command) {
  const testing::CommandResult r = testing::run_command(std::string(TESSERA_EXE) + " " + command + " --help 2>&1");
  EXPECT_EQ(r.exit_code, 0) << command << "\n" << r.output;
  return r.output;
}

// The subcommands a --help lists under "Subcommands:" (their names, first word of each line).
std::vector<std::string> subcommands_in(const std::string& help) {
  std::vector<std::string> names;
  const size_t at = help.find("Subcommands:");
  if (at == std::string::npos) return names;
  const std::regex line("\n  ([a-z][a-z0-9-]*) ");
  const std::string rest = help.substr(at);
  for (std::sregex_iterator m(rest.begin(), rest.end(), line), end; m != end; ++m) names.push_back((*m)[1]);
  return names;
}

// Every command path of the binary ("train", "bench train", ...) that takes flags, with its --help.
std::vector<std::pair<std::string, std::string>> every_command() {
  std::vector<std::pair<std::string, std::string>> commands;
  std::vector<std::string> queue = {""};
  while (!queue.empty()) {
    const std::string command = queue.back();
    queue.pop_back();
    const std::string help = help_of(command);
    const std::vector<std::string> subs = subcommands_in(help);
    for (const std::string& sub : subs) queue.push_back(command.empty() ? sub : command + " " + sub);
    if (subs.empty() && !command.empty()) commands.emplace_back(command, help);
  }
  return commands;
}

// The long flags an option line of a --help names ("  --batches,--eval-batches INT=0  ...": both).
std::set<std::string> flags_in_help(const std::string& help) {
  std::set<std::string> flags;
  const std::regex option_line("\n  (-[^ \n]*)");
  const std::regex flag("--[a-z0-9][a-z0-9-]*");
  for (std::sregex_iterator m(help.begin(), help.end(), option_line), end; m != end; ++m) {
    const std::string names = (*m)[1];
    for (std::sregex_iterator f(names.begin(), names.end(), flag); f != end; ++f) flags.insert(f->str());
  }
  flags.erase("--help");
  return flags;
}

TEST(Readme, NamesEveryFlagOfEveryCommand) {
  const std::string docs = documentation();
  const auto commands = every_command();
  ASSERT_GE(commands.size(), 12u);  // train, eval, generate, tokenize, ..., plan layout
  std::map<std::string, std::string> missing;  // flag -> the commands that take it
  for (const auto& [command, help] : commands) {
    const std::set<std::string> flags = flags_in_help(help);
    EXPECT_FALSE(flags.empty()) << command;
    for (const std::string& flag : flags) {
      // A whole word: "--seed" must not be found as the start of "--seed-foo".
      if (!std::regex_search(docs, std::regex(flag + "(?![a-z0-9-])")))
        missing[flag] += (missing[flag].empty() ? "" : ", ") + command;
    }
  }
  for (const auto& [flag, commands_taking_it] : missing)
    ADD_FAILURE() << flag << " (tessera " << commands_taking_it << ") is not named in README.md or docs/*.md";
}

TEST(Readme, EveryFlagItNamesExists) {
  std::set<std::string> known;
  for (const auto& [command, help] : every_command())
    for (const std::string& flag : flags_in_help(help)) known.insert(flag);
  // Other tools' flags the docs name beside ours (Megatron, Slurm, mpirun), never tessera's.
  const std::set<std::string> others = {"--deterministic-mode", "--finetune", "--grad-reduce-in-bf16", "--cp-comm-type",
                                        "--reset-attention-mask", "--reset-position-ids", "--skip-train",
                                        "--nodes", "--ntasks-per-node", "--gpus-per-node", "--requeue", "--signal",
                                        "--mpi", "--kill-on-bad-exit", "--mca", "--allow-run-as-root", "--oversubscribe",
                                        "--logdir", "--help"};
  const std::string docs = documentation();
  const std::regex flag("--[a-z0-9][a-z0-9-]*");
  for (std::sregex_iterator m(docs.begin(), docs.end(), flag), end; m != end; ++m) {
    const std::string name = m->str();
    // "--to-hf/--from-hf", "--dp/--tp": each part is matched on its own.
    EXPECT_TRUE(known.count(name) || others.count(name)) << name << " (named in the docs) is no flag of tessera";
  }
}

TEST(Readme, PathsItNamesAreInTheRepository) {
  const fs::path root = TESSERA_SOURCE_DIR;
  const std::string docs = documentation();
  EXPECT_EQ(docs.find("../shared"), std::string::npos);
  EXPECT_EQ(docs.find("shared/"), std::string::npos);
  // `src/...`, `tests/...`, ... in backquotes; a glob or a <placeholder> is checked up to its folder.
  const std::regex quoted("`((?:src|tests|bench|tools|scripts|configs|docs|cmake|apps)/[^`\\s]*)`");
  int checked = 0;
  for (std::sregex_iterator m(docs.begin(), docs.end(), quoted), end; m != end; ++m) {
    std::string path = (*m)[1];
    if (const size_t wild = path.find_first_of("*<{"); wild != std::string::npos)
      path = path.substr(0, path.rfind('/', wild) + 1);
    EXPECT_TRUE(fs::exists(root / path)) << path << " (named in the docs) is not in the repository";
    checked++;
  }
  EXPECT_GT(checked, 20);
  // Links between the pages ([text](docs/X.md#anchor), [text](X.md), [text](../README.md#anchor)): the
  // file exists and the anchor is one of its headings (GitHub's: lower case, punctuation dropped,
  // spaces as hyphens).
  const std::regex link("\\]\\(((?:\\.\\./|docs/)?[A-Za-z_]+\\.md)(?:#([a-z0-9-]*))?\\)");
  int links = 0;
  std::vector<fs::path> pages = {root / "README.md"};
  for (const fs::directory_entry& e : fs::directory_iterator(root / "docs"))
    if (e.path().extension() == ".md") pages.push_back(e.path());
  for (const fs::path& page : pages) {
    ASSERT_TRUE(fs::exists(page)) << page;
    const std::string text = testing::read_text(page);
    for (std::sregex_iterator m(text.begin(), text.end(), link), end; m != end; ++m) {
      const fs::path target = page.parent_path() / std::string((*m)[1]);
      links++;
      ASSERT_TRUE(fs::exists(target)) << page << " links to " << target;
      if (!(*m)[2].matched) continue;
      std::set<std::string> anchors;
      const std::string target_text = testing::read_text(target);
      const std::regex heading("(^|\\n)#+ ([^\\n]*)");
      for (std::sregex_iterator h(target_text.begin(), target_text.end(), heading); h != end; ++h) {
        std::string slug;
        for (char c : std::string((*h)[2]))
          if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_')
            slug += char(std::tolower(static_cast<unsigned char>(c)));
          else if (c == ' ')
            slug += '-';
        anchors.insert(slug);
      }
      EXPECT_TRUE(anchors.count((*m)[2])) << page << " links to " << target << "#" << (*m)[2] << ", no such heading";
    }
  }
  EXPECT_GT(links, 10);
}

}  // namespace
}  // namespace tessera
