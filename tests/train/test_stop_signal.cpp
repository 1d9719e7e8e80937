// Stop signals: SIGTERM, SIGINT and SIGUSR1 each ask for a save and a stop; a repeat within the
// window (one request delivered by two paths) or a SIGUSR1 is an echo, and only a later second
// SIGTERM/SIGINT ends the process at once, with exit 128 + signal.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <initializer_list>
#include <thread>

#include "train/stop_signal.h"

namespace tessera {
namespace {

// Runs `body` in a child process; returns its wait status.
template <typename F>
int in_child(F body) {
  const pid_t pid = fork();
  if (pid == 0) {
    body();
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return status;
}

TEST(StopSignals, EachStopSignalIsRecordedAndNamed) {
  for (int signal : kStopSignals) {
    const StopSignals stop;
    EXPECT_EQ(stop.received(), 0);
    raise(signal);
    EXPECT_EQ(stop.received(), signal);
  }
  EXPECT_STREQ(StopSignals::name(SIGUSR1), "SIGUSR1");
  EXPECT_STREQ(StopSignals::name(SIGTERM), "SIGTERM");
  EXPECT_STREQ(StopSignals::name(0), "a stop signal");
}

// Summed over the ranks, the votes name the signal most of them received, also on a rank that
// received none yet (a job's request reaches its ranks at slightly different moments).
TEST(StopSignals, SummedVotesNameTheSignalMostRanksReceived) {
  const auto summed = [](std::initializer_list<int> received) {
    std::array<double, kStopSignals.size()> sum{};
    for (const int signal : received) {
      const auto votes = stop_votes(signal);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += votes[i];
    }
    return stop_vote_result(sum.data());
  };
  EXPECT_EQ(summed({0, 0, 0, 0}), 0);
  EXPECT_EQ(summed({0, SIGUSR1}), SIGUSR1);
  EXPECT_EQ(summed({SIGINT, 0, 0}), SIGINT);
  EXPECT_EQ(summed({SIGUSR1, SIGTERM, SIGUSR1, 0}), SIGUSR1);
  EXPECT_EQ(summed({SIGUSR1, SIGTERM}), SIGTERM);  // a tie: the earlier in kStopSignals
}

TEST(StopSignals, EchoesOfTheFirstRequestDoNotEndTheProcess) {
  const int status = in_child([] {
    const StopSignals stop;
    raise(SIGTERM);
    raise(SIGUSR1);  // srun or mpirun passing on launch's request
    raise(SIGTERM);  // Slurm signalling the task itself, at the same moment
    _exit(stop.received() == SIGTERM ? 0 : 1);
  });
  ASSERT_TRUE(WIFEXITED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST(StopSignals, ALaterSecondSignalEndsTheProcessAtOnce) {
  const int status = in_child([] {
    const StopSignals stop;
    raise(SIGINT);
    std::this_thread::sleep_for(std::chrono::duration<double>(kRepeatWindowS + 0.1));
    raise(SIGUSR1);  // never forces an exit
    raise(SIGTERM);
    _exit(0);  // not reached
  });
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGTERM);
}

}  // namespace
}  // namespace tessera
