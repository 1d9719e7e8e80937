// The progress line's remaining time: minutes and seconds, hours past an hour, days past a day, and
// a bound for a run that would take longer than anyone waits (no integer overflow).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "train/progress.h"

namespace tessera {
namespace {

TEST(Progress, EtaReadsInTheLargestUnitsThatMatter) {
  EXPECT_EQ(eta_text(0), "00:00");
  EXPECT_EQ(eta_text(59.6), "01:00");
  EXPECT_EQ(eta_text(754), "12:34");
  EXPECT_EQ(eta_text(3600 + 2 * 60 + 3), "1:02:03");
  EXPECT_EQ(eta_text(3 * 86400 + 4 * 3600 + 59), "3d04h");
  EXPECT_EQ(eta_text(5e10), ">99d");  // --steps 1e11 at 0.5 s a step: int(eta) overflowed
  EXPECT_EQ(eta_text(NAN), "00:00");
  EXPECT_EQ(eta_text(-3), "00:00");
}

// Off a terminal a line is printed every 5 s: its tok/s is the steps' since the line before (their
// tokens over their seconds: the harmonic mean of the steps' rates), not the last step's alone.
TEST(Progress, TokensPerSecondCoverTheStepsSinceTheLastLine) {
  testing::internal::CaptureStdout();
  ProgressLine line(10, /*quiet=*/false);
  line.update(1, 2.0f, 1e-3f, 1000.0, 0.0);  // printed: the first
  line.update(2, 2.0f, 1e-3f, 1000.0, 1.0);
  line.update(3, 2.0f, 1e-3f, 250.0, 3.0);   // a slow step
  line.update(4, 2.0f, 1e-3f, 1000.0, 5.5);  // printed: 3 steps of 1 + 4 + 1 time units for 3 token counts
  line.update(10, 2.0f, 1e-3f, 500.0, 7.0);  // the last, printed
  line.finish();
  const std::string out = testing::internal::GetCapturedStdout();
  if (out.find("\r") != std::string::npos) GTEST_SKIP() << "stdout is a terminal";
  EXPECT_NE(out.find("step     1/10 | loss 2.0000 | lr 1.00e-03 |     1000 tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("step     4/10 | loss 2.0000 | lr 1.00e-03 |      500 tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("step    10/10 | loss 2.0000 | lr 1.00e-03 |      500 tok/s"), std::string::npos) << out;
  EXPECT_EQ(out.find("step     2/10"), std::string::npos) << out;
}

}  // namespace
}  // namespace tessera
