// FileMapping: mmap/munmap, and a table of the live mappings (address range, file name) that a SIGBUS
// handler reads. The table is fixed-size and lock-free, so the handler (async-signal-safe: atomics and
// write(2)) can read it while another thread registers or releases a mapping. A SIGBUS outside every
// registered mapping is a bug of ours: the handler steps aside and the process ends as it would have.
#include "core/file_mapping.h"

#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <utility>

#include "core/error.h"
#include "core/file_checks.h"

namespace tessera {
namespace {

struct Slot {
  std::atomic<bool> taken{false};
  std::atomic<uintptr_t> begin{0}, end{0};  // begin 0: not (yet) live
  std::atomic<const char*> name{nullptr};
};
// More than the shards of any dataset we know of (FineWeb-Edu's 100B tokens are about 1,000); a
// mapping past this many still works, without the named message.
constexpr size_t kSlots = 16384;
std::array<Slot, kSlots> g_slots;

void write_text(const char* text) { (void)!::write(STDERR_FILENO, text, std::strlen(text)); }

void on_sigbus(int signal, siginfo_t* info, void*) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(info->si_addr);
  for (const Slot& slot : g_slots) {
    const uintptr_t begin = slot.begin.load(std::memory_order_acquire);
    if (begin == 0 || at < begin || at >= slot.end.load(std::memory_order_acquire)) continue;
    write_text("tessera: error: cannot read ");
    write_text(slot.name.load(std::memory_order_acquire));
    write_text(": a read through its memory mapping failed (SIGBUS): the storage failed under it, or the file "
               "shrank while in use; check the file system and the file, then run again (--resume continues)\n");
    ::_exit(1);
  }
  // Not ours (a bug, or a SIGBUS sent by kill): the default action ends the process as it would have.
  ::signal(signal, SIG_DFL);
  ::raise(signal);
}

// Checked at every mapping, not once: a library may have put its own handler in since (Open MPI's
// MPI_Init installs one that prints a stack trace and aborts).
void install_handler() {
  struct sigaction current {};
  ::sigaction(SIGBUS, nullptr, &current);
  if ((current.sa_flags & SA_SIGINFO) != 0 && current.sa_sigaction == on_sigbus) return;
  struct sigaction action {};
  action.sa_sigaction = on_sigbus;
  action.sa_flags = SA_SIGINFO;
  sigemptyset(&action.sa_mask);
  ::sigaction(SIGBUS, &action, nullptr);
}

int register_range(const std::byte* data, size_t size, const char* name) {
  for (size_t i = 0; i < kSlots; ++i) {
    bool expected = false;
    if (!g_slots[i].taken.compare_exchange_strong(expected, true)) continue;
    g_slots[i].name.store(name, std::memory_order_release);
    g_slots[i].end.store(reinterpret_cast<uintptr_t>(data) + size, std::memory_order_release);
    g_slots[i].begin.store(reinterpret_cast<uintptr_t>(data), std::memory_order_release);
    return int(i);
  }
  return -1;
}

}  // namespace

FileMapping::FileMapping(const RegularFile& file, std::string_view what) {
  size_ = size_t(file.size());
  if (size_ == 0) return;
  void* map = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, file.fd(), 0);
  TS_CHECK_ERRNO(map != MAP_FAILED, errno, what, ": cannot map its ", size_, " bytes (", errno_text(errno), ")");
  data_ = static_cast<const std::byte*>(map);
  what_ = std::make_unique<char[]>(what.size() + 1);
  std::memcpy(what_.get(), what.data(), what.size());
  install_handler();
  slot_ = register_range(data_, size_, what_.get());
}

FileMapping::~FileMapping() { release(); }

FileMapping::FileMapping(FileMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)),
      slot_(std::exchange(other.slot_, -1)),
      what_(std::move(other.what_)) {}

FileMapping& FileMapping::operator=(FileMapping&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    slot_ = std::exchange(other.slot_, -1);
    what_ = std::move(other.what_);
  }
  return *this;
}

void FileMapping::release() {
  if (slot_ >= 0) {
    Slot& slot = g_slots[size_t(slot_)];
    slot.begin.store(0, std::memory_order_release);
    slot.taken.store(false, std::memory_order_release);
    slot_ = -1;
  }
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

}  // namespace tessera
