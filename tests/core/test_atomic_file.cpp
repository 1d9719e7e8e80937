// Atomic file writes: contents land whole, replace the old file, leave no temporary behind (also
// when abandoned before commit), a folder that cannot take the file throws naming the path, and a
// write the disk refuses names the bytes written and the room left, keeping the old file.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <csignal>

#include <filesystem>
#include <string>

#include "core/atomic_file.h"
#include "support/test_support.h"

namespace tessera {
namespace {

namespace fs = std::filesystem;

// The names in `dir` other than `keep`.
int other_files(const fs::path& dir, const fs::path& keep) {
  int files = 0;
  for (const auto& entry : fs::directory_iterator(dir)) files += entry.path() != keep;
  return files;
}

TEST(AtomicFile, WritesAndReplacesLeavingNoTemporary) {
  fs::path dir = testing::scratch_dir();
  fs::path path = dir / "out.txt";
  write_file_atomic(path, "first version, longer than the second");
  EXPECT_EQ(testing::read_text(path), "first version, longer than the second");
  write_file_atomic(path, "second");
  EXPECT_EQ(testing::read_text(path), "second");
  write_file_atomic(path, "");
  EXPECT_EQ(testing::read_text(path), "");
  EXPECT_EQ(other_files(dir, path), 0);
}

TEST(AtomicFile, WriterStreamsPiecesAndAbandonedWriteChangesNothing) {
  fs::path dir = testing::scratch_dir();
  fs::path path = dir / "pieces.bin";
  {
    AtomicFileWriter file(path);
    file.write("head", 4);
    file.write("-", 1);
    file.write("tail", 4);
    file.commit();
  }
  EXPECT_EQ(testing::read_text(path), "head-tail");
  {
    AtomicFileWriter file(path);
    file.write("never committed", 15);
  }
  EXPECT_EQ(testing::read_text(path), "head-tail");
  EXPECT_EQ(other_files(dir, path), 0);
}

TEST(AtomicFile, UnwritableFolderThrowsNamingThePath) {
  fs::path dir = testing::scratch_dir();
  // Folders that cannot hold a file even for root: a missing one, and a regular file.
  testing::write_text(dir / "plain", "not a folder");
  for (const fs::path& path : {dir / "missing" / "out.txt", dir / "plain" / "out.txt"}) {
    std::string message = testing::error_of([&] { write_file_atomic(path, "data"); });
    EXPECT_TRUE(testing::contains(message, path.string())) << message;
    EXPECT_TRUE(testing::contains(message, "cannot create")) << message;
    EXPECT_FALSE(fs::exists(path));
  }
  EXPECT_EQ(other_files(dir, dir / "plain"), 0);
}

// A file-size limit stands in for a full disk: write() fails (EFBIG) once the file reaches it.
TEST(AtomicFile, AFailedWriteNamesItsBytesAndKeepsTheOldFile) {
  fs::path dir = testing::scratch_dir();
  fs::path path = dir / "state.bin";
  write_file_atomic(path, "old");
  rlimit before{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &before), 0);
  const auto previous = std::signal(SIGXFSZ, SIG_IGN);
  rlimit limited = before;
  limited.rlim_cur = 4096;
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  const std::string bytes(10000, 'x');
  const std::string message = testing::error_of([&] { write_file_atomic(path, bytes); });
  setrlimit(RLIMIT_FSIZE, &before);
  std::signal(SIGXFSZ, previous);
  EXPECT_TRUE(testing::contains(message, "cannot write " + path.string())) << message;
  EXPECT_TRUE(testing::contains(message, "failed after 4096 bytes (File too large; ")) << message;
  EXPECT_TRUE(testing::contains(message, " bytes free on its file system); check free disk space")) << message;
  EXPECT_EQ(testing::read_text(path), "old");
  EXPECT_EQ(other_files(dir, path), 0);
  ASSERT_TRUE(free_disk_bytes(dir).has_value());
  EXPECT_GT(*free_disk_bytes(dir), 0u);
}

TEST(AtomicFile, FsyncDirectorySyncsAFolderAndSkipsAMissingOne) {
  fs::path dir = testing::scratch_dir();
  EXPECT_NO_THROW(fsync_directory(dir));
  EXPECT_NO_THROW(fsync_directory(dir / "missing"));
}

}  // namespace
}  // namespace tessera
