// The progress line's remaining time: minutes and seconds, hours past an hour, days past a day, and
// a bound for a run that would take longer than anyone waits (no integer overflow).
#include <gtest/gtest.h>

#include <cmath>

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

}  // namespace
}  // namespace tessera
