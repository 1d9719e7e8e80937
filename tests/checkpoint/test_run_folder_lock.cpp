// RunFolderLock: one process at a time (its second lock shares the first), the holder named in the
// refusal; the folder is created; the lock goes with its holder, even one killed by SIGKILL.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "checkpoint/run_folder.h"
#include "core/error.h"
#include "support/test_support.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

// What a lock attempt in a child process says: "" when it got the lock.
std::string child_attempt(const fs::path& run) {
  int out[2];
  if (pipe(out) != 0) return "no pipe";
  const pid_t child = fork();
  if (child == 0) {
    std::string said;
    try {
      RunFolderLock attempt(run);
    } catch (const Error& e) {
      said = e.what();
    }
    if (write(out[1], said.data(), said.size()) < 0) _exit(1);
    _exit(0);
  }
  close(out[1]);
  std::string said;
  char buffer[512];
  for (ssize_t n; (n = read(out[0], buffer, sizeof buffer)) > 0;) said.append(buffer, size_t(n));
  close(out[0]);
  waitpid(child, nullptr, 0);
  return said;
}

// Whether another process (flock(1), which knows nothing of this process's locks) finds it locked.
bool locked_for_others(const fs::path& run) {
  return std::system(("flock -n " + (run / kRunFolderLock).string() + " true").c_str()) != 0;
}

TEST(RunFolderLock, SharedWithinTheProcessHeldAgainstOthersUntilTheLastGoes) {
  const fs::path run = testing::scratch_dir() / "new" / "run";
  {
    const RunFolderLock lock(run);  // creates the folder
    EXPECT_TRUE(fs::is_directory(run));
    {
      const RunFolderLock second(run);  // a second Trainer of this process
      EXPECT_TRUE(locked_for_others(run));
    }
    EXPECT_TRUE(locked_for_others(run));
  }
  // The lock made the folder and nothing was written into it: the last holder removes it.
  EXPECT_FALSE(fs::exists(run));
  EXPECT_EQ(child_attempt(run), "");
  // A folder the lock made that holds anything stays, unlocked.
  {
    const RunFolderLock lock(run);
    testing::write_text(run / "metrics.jsonl", "{}\n");
  }
  EXPECT_TRUE(fs::exists(run / "metrics.jsonl"));
  EXPECT_FALSE(locked_for_others(run));
}

TEST(RunFolderLock, AKilledHolderLeavesTheFolderFree) {
  const fs::path run = testing::scratch_dir() / "run";
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t holder = fork();
  if (holder == 0) {
    const RunFolderLock lock(run);
    const char byte = 1;
    if (write(ready[1], &byte, 1) != 1) _exit(1);
    pause();
  }
  char byte = 0;
  ASSERT_EQ(read(ready[0], &byte, 1), 1);
  char host[256] = "";
  gethostname(host, sizeof host - 1);
  const std::string refused = testing::error_of([&] { RunFolderLock taken(run); });
  EXPECT_TRUE(testing::contains(refused, "is in use by another run (pid " + std::to_string(holder) + " on " + host +
                                             "); wait for it to end, or choose another --out-dir"))
      << refused;
  kill(holder, SIGKILL);
  waitpid(holder, nullptr, 0);
  EXPECT_NO_THROW(RunFolderLock free(run));
  close(ready[0]);
  close(ready[1]);
}

}  // namespace
}  // namespace tessera
