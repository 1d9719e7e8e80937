// FileMapping: a whole file read through a mapping, and what a read that the mapping cannot serve
// does: one line naming the file and exit 1, not a crash dump. A file truncated while mapped is the
// real trigger here; an I/O error of the storage raises the same SIGBUS.
#include <gtest/gtest.h>

#include <csignal>
#include <filesystem>
#include <string>

#include "core/file_checks.h"
#include "core/file_mapping.h"
#include "support/test_support.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

fs::path two_pages(const fs::path& dir) {
  const fs::path file = dir / "two_pages.bin";
  testing::write_text(file, std::string(8192, 'x'));
  return file;
}

// Reads the mapping's byte at `at` (volatile, so the read happens).
char touch(const FileMapping& mapping, size_t at) {
  return char(*static_cast<const volatile std::byte*>(mapping.bytes().data() + at));
}

TEST(FileMapping, MapsTheWholeFile) {
  const fs::path file = two_pages(testing::scratch_dir());
  const FileMapping mapping(RegularFile(file, "test file"), "test file");
  ASSERT_EQ(mapping.bytes().size(), 8192u);
  EXPECT_EQ(touch(mapping, 0), 'x');
  EXPECT_EQ(touch(mapping, 8191), 'x');
  testing::write_text(file.parent_path() / "empty.bin", "");
  EXPECT_TRUE(FileMapping(RegularFile(file.parent_path() / "empty.bin", "empty"), "empty").bytes().empty());
}

TEST(FileMappingDeathTest, AReadPastAFileThatShrankEndsWithOneLineNamingIt) {
  const fs::path file = two_pages(testing::scratch_dir());
  EXPECT_EXIT(
      {
        FileMapping first(RegularFile(file, "shard"), "shard '" + file.string() + "'");
        const FileMapping mapping = std::move(first);  // the registration moves with it
        fs::resize_file(file, 0);
        touch(mapping, 4096);
      },
      ::testing::ExitedWithCode(1),
      "tessera: error: cannot read shard '.*two_pages.bin': a read through its memory mapping failed \\(SIGBUS\\)");
}

TEST(FileMappingDeathTest, ASigbusOutsideEveryMappingStillEndsTheProcessBySignal) {
  const fs::path file = two_pages(testing::scratch_dir());
  EXPECT_EXIT(
      {
        const FileMapping mapping(RegularFile(file, "shard"), "shard");
        std::raise(SIGBUS);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace tessera
