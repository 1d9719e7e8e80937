// main for multi-rank tests that need the Runtime: it initialises MPI from the launcher's
// environment, exactly as `tessera` does, then runs the tests.
#include <gtest/gtest.h>

#include "runtime_test_main.h"

namespace tessera::testing {
namespace {
Runtime* runtime = nullptr;
}  // namespace

Runtime& test_runtime() { return *runtime; }

}  // namespace tessera::testing

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  tessera::Runtime runtime(&argc, &argv);
  tessera::testing::runtime = &runtime;
  return RUN_ALL_TESTS();
}
