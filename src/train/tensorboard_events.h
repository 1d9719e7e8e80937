// TensorBoard's event files, written directly: a TFRecord stream (each record its length, the
// masked CRC-32C of the length, the bytes, their masked CRC-32C) of `Event` protocol buffers, the
// first naming the format ("brain.Event:2"), then a SessionLog START at the first step written
// (TensorBoard then hides what older files logged from that step on: a resumed run's repeated steps
// replace the first run's, as torch's SummaryWriter(purge_step=) does), then one per step holding
// `Summary` scalars. What
// TensorBoard, tensorboardX and torch.utils.tensorboard read, so `tensorboard --logdir` plots a run
// beside Megatron's and torchtitan's. Only scalars; each record is flushed as written, so a crashed
// run keeps everything up to its last step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

// CRC-32C (Castagnoli), the checksum TFRecord frames use.
uint32_t crc32c(const void* data, size_t size);

class TensorBoardEvents {
 public:
  // Creates `dir` if needed and a new events.out.tfevents.<seconds>.<host>.<pid> file in it (a
  // resumed run adds a file; TensorBoard merges a folder's files by step). Throws naming the path.
  explicit TensorBoardEvents(const std::filesystem::path& dir);
  ~TensorBoardEvents();
  TensorBoardEvents(const TensorBoardEvents&) = delete;
  TensorBoardEvents& operator=(const TensorBoardEvents&) = delete;

  // One event at `step` holding each (tag, value) as a scalar; the first call marks the session's start there.
  void write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars);
  const std::filesystem::path& path() const { return path_; }

 private:
  void write_record(const std::string& event);

  std::filesystem::path path_;
  std::FILE* file_ = nullptr;
  bool started_ = false;  // the SessionLog START is written
};

}  // namespace tessera
