// Test helpers: scratch directories under the build tree, deterministic random data, subprocesses.
#include "support/test_support.h"

#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <cstdlib>
#include <mutex>
#include <sys/wait.h>

#include <nlohmann/json.hpp>

#include "core/rng.h"

namespace tessera::testing {

std::filesystem::path scratch_dir() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "scratch";
  for (char& c : name)
    if (c == '/') c = '_';
  std::filesystem::path dir = std::filesystem::path(TESSERA_BINARY_DIR) / "test-scratch" / name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

std::vector<float> random_floats(int64_t n, uint64_t seed, float lo, float hi) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = lo + (hi - lo) * uniform_at(seed, 7, uint64_t(i));
  return v;
}

namespace {

// Open MPI's mpirun keeps its session directory under one shared /tmp/ompi.<host>.<uid>, which
// concurrent jobs create and remove; under `ctest -j2` one job can remove it while another is
// creating its own, and that job fails to start ("orte_session_dir failed", open-mpi/ompi#8510).
// Every mpirun a test process launches therefore gets a base directory of this process's own.
class MpiSessionBase {
 public:
  MpiSessionBase() {
    if (std::getenv("OMPI_MCA_orte_tmpdir_base")) return;  // already isolated by the launcher
    std::string pattern = "/tmp/tessera-mpi-XXXXXX";  // short: the session's sockets live under it
    if (!mkdtemp(pattern.data())) return;
    dir_ = pattern;
    setenv("OMPI_MCA_orte_tmpdir_base", dir_.c_str(), 1);
  }
  ~MpiSessionBase() {
    std::error_code ignored;
    if (!dir_.empty()) std::filesystem::remove_all(dir_, ignored);
  }
  MpiSessionBase(const MpiSessionBase&) = delete;
  MpiSessionBase& operator=(const MpiSessionBase&) = delete;

 private:
  std::string dir_;
};

}  // namespace

CommandResult run_command(const std::string& command_line) {
  static MpiSessionBase mpi_session_base;
  CommandResult result;
  FILE* pipe = popen((command_line + " 2>&1").c_str(), "r");
  if (!pipe) {
    result.exit_code = -1;
    return result;
  }
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0) result.output.append(buffer.data(), n);
  int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return result;
}

void write_text(const std::filesystem::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

void write_raw(const std::filesystem::path& path, const std::string& header, const std::string& data) {
  const uint64_t n = header.size();
  write_text(path, std::string(reinterpret_cast<const char*>(&n), 8) + header + data);
}

void add_special_tokens(const std::filesystem::path& path, const std::vector<std::string>& specials) {
  nlohmann::json tokenizer = nlohmann::json::parse(read_text(path));
  for (const std::string& special : specials) {
    const int id = int(tokenizer["model"]["vocab"].size());
    tokenizer["model"]["vocab"][special] = id;
    tokenizer["added_tokens"].push_back({{"id", id}, {"content", special}, {"special", true}, {"lstrip", false},
                                         {"rstrip", false}, {"normalized", false}, {"single_word", false}});
  }
  write_text(path, tokenizer.dump());
}

std::string read_text(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<std::string, std::string> folder_snapshot(const std::filesystem::path& root) {
  namespace fs = std::filesystem;
  std::map<std::string, std::string> files;
  if (!fs::exists(root)) return files;
  for (const fs::directory_entry& e : fs::recursive_directory_iterator(root)) {
    const std::string name = fs::relative(e.path(), root).string();
    if (e.is_symlink())
      files[name] = "-> " + fs::read_symlink(e.path()).string();
    else if (e.is_regular_file())
      files[name] = read_text(e.path());
    else
      files[name] = "(folder or special file)";
  }
  return files;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

void expect_one_line_error(const CommandResult& result, const std::string& fix) {
  EXPECT_NE(result.exit_code, 0);
  EXPECT_TRUE(contains(result.output, "tessera: error:")) << result.output;
  EXPECT_TRUE(contains(result.output, fix)) << result.output;
  const std::string line = result.output.substr(0, result.output.find_last_not_of('\n') + 1);
  EXPECT_EQ(line.find('\n'), std::string::npos) << "more than one line: " << result.output;
}

void expect_one_line_errors(const std::string& command, const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [args, fix] : cases) {
    SCOPED_TRACE(args);
    expect_one_line_error(run_command(command + args), fix);
  }
}

}  // namespace tessera::testing
