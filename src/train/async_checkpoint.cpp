// One background writer thread at a time.
#include "train/async_checkpoint.h"

namespace tessera {

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  if (thread_.joinable()) thread_.join();
}

void AsyncCheckpointWriter::start(std::function<void()> write) {
  wait();
  landed_.store(false, std::memory_order_release);
  thread_ = std::thread([this, write = std::move(write)] {
    try {
      write();
    } catch (...) {
      error_ = std::current_exception();
    }
    landed_.store(true, std::memory_order_release);
  });
}

void AsyncCheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  if (!error_) return;
  std::exception_ptr error = error_;
  error_ = nullptr;
  std::rethrow_exception(error);
}

}  // namespace tessera
