// Reading element ranges of a checkpoint's tensors by their index: each needed byte range is read
// with pread (rounded out to the 4 MiB blocks its CRCs cover, each verified), never whole files, so a
// rank loading its ZeRO shard reads about 1/dp of the moments. Files are opened once, on first use,
// and their size checked against state.json. Values must be finite (and, for Adam's second moment,
// non-negative) before they reach the caller.
#pragma once

#include <filesystem>
#include <map>
#include <memory>
#include <string>

#include "checkpoint/checkpoint_index.h"
#include "core/file_checks.h"

namespace tessera {

// Throws (one line, naming the file) unless checkpoint/name is present at its recorded size, and
// with `checksum` has its recorded CRC-32 (which reads the whole file).
void verify_checkpoint_file(const std::filesystem::path& checkpoint, const std::string& name,
                            const FileDigest& recorded, bool checksum);

class CheckpointReader {
 public:
  CheckpointReader(std::filesystem::path checkpoint, const CheckpointIndex& index,
                   const std::map<std::string, FileDigest>& files);
  ~CheckpointReader();

  // Elements [begin, end) of `tensor` (flattened) into out.
  void read(const std::string& tensor, int64_t begin, int64_t end, float* out, bool non_negative = false);

 private:
  const RegularFile& open(const std::string& file);
  void read_slice(const std::string& tensor, const TensorSlice& slice, int64_t begin, int64_t end, float* out,
                  bool non_negative);

  std::filesystem::path checkpoint_;
  const CheckpointIndex& index_;
  const std::map<std::string, FileDigest>& files_;
  std::map<std::string, std::unique_ptr<RegularFile>> open_;
  std::vector<std::byte> buffer_;
};

}  // namespace tessera
