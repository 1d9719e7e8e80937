// What a run's start-up takes for a refused configuration (exit 2, never restarted by tessera launch)
// and what not: a failure of the storage under a read, which a restart may get past, stays a
// StorageError (exit 1).
#include <gtest/gtest.h>

#include <cerrno>

#include "data/whole_file.h"
#include "train/run_refused.h"

namespace tessera {
namespace {

TEST(RunRefused, StorageFailuresAreTellableFromBadPaths) {
  for (const int err : {EIO, ESTALE, ETIMEDOUT, ENOMEM}) EXPECT_TRUE(is_storage_failure(err)) << errno_text(err);
  for (const int err : {0, ENOENT, EACCES, ENOTDIR, EISDIR, ELOOP}) EXPECT_FALSE(is_storage_failure(err)) << err;
}

TEST(RunRefused, AReadTheStorageFailsIsAStorageError) {
  // /proc/self/mem is a regular file whose read at offset 0 (an address never mapped) fails with EIO,
  // as a read from a failing disk or a stale network mount does.
  try {
    read_whole_file("/proc/self/mem", "config file", kMaxConfigFileBytes);
    FAIL() << "the read succeeded";
  } catch (const StorageError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read config file '/proc/self/mem'"), std::string::npos) << e.what();
  }
}

TEST(RunRefused, RefusesTheConfigurationButNotTheStorage) {
  EXPECT_THROW(refuse_on_error([] { TS_FAIL("--zero must be 0, 1, 2 or 3"); }), RunRefused);
  EXPECT_THROW(refuse_on_error([] { read_whole_file("/nonexistent/config.json", "config file", 1024); }),
               RunRefused);
  try {
    refuse_on_error([] { read_whole_file("/proc/self/mem", "config file", kMaxConfigFileBytes); });
    FAIL() << "the read succeeded";
  } catch (const RunRefused&) {
    FAIL() << "a storage failure was taken for a refused configuration";
  } catch (const StorageError&) {
  }
  EXPECT_EQ(refuse_on_error([] { return 7; }), 7);
}

}  // namespace
}  // namespace tessera
