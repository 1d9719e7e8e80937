// TFRecord framing and the few protocol-buffer fields of tensorboard's Event and Summary messages
// (tensorboard/compat/proto/event.proto, summary.proto) that scalars need, encoded by hand.
#include "train/tensorboard_events.h"

#include <unistd.h>

#include <array>
#include <bit>
#include <chrono>
#include <cstring>

#include "core/error.h"
#include "core/user_text.h"

namespace tessera {
namespace {

constexpr uint32_t kCastagnoli = 0x82F63B78;  // the reflected polynomial

const std::array<uint32_t, 256>& crc_table() {
  static const std::array<uint32_t, 256> table = [] {
    std::array<uint32_t, 256> t{};
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = c & 1 ? (c >> 1) ^ kCastagnoli : c >> 1;
      t[i] = c;
    }
    return t;
  }();
  return table;
}

// TFRecord stores CRCs rotated and offset, so that a CRC of data holding CRCs stays well mixed.
uint32_t masked_crc32c(const void* data, size_t size) {
  const uint32_t crc = crc32c(data, size);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

void append_le(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(char((value >> (8 * i)) & 0xff));
}

void append_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(char((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(char(value));
}

// Protocol-buffer field keys: field number and wire type (0 varint, 1 64-bit, 2 length-delimited, 5 32-bit).
void append_key(std::string& out, int field, int wire_type) { append_varint(out, uint64_t(field << 3 | wire_type)); }

void append_bytes_field(std::string& out, int field, const std::string& bytes) {
  append_key(out, field, 2);
  append_varint(out, bytes.size());
  out += bytes;
}

// Event { double wall_time = 1; int64 step = 2; oneof { string file_version = 3; Summary summary = 5; } }
std::string event_header(int64_t step) {
  const double wall_time =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  std::string event;
  append_key(event, 1, 1);
  append_le(event, std::bit_cast<uint64_t>(wall_time), 8);
  append_key(event, 2, 0);
  append_varint(event, uint64_t(step));
  return event;
}

}  // namespace

uint32_t crc32c(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) crc = crc_table()[(crc ^ bytes[i]) & 0xff] ^ (crc >> 8);
  return crc ^ 0xffffffffu;
}

TensorBoardEvents::TensorBoardEvents(const std::filesystem::path& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TS_CHECK(!ec, "--tensorboard-dir ", quoted_text(dir.string()), ": cannot create the folder (", ec.message(),
           "); choose a writable folder");
  char host[256] = "localhost";
  gethostname(host, sizeof host - 1);
  const auto seconds =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  path_ = dir / ("events.out.tfevents." + std::to_string(seconds) + "." + host + "." + std::to_string(getpid()));
  file_ = std::fopen(path_.c_str(), "ab");
  TS_CHECK(file_ != nullptr, "--tensorboard-dir: cannot open ", quoted_text(path_.string()), " for writing (",
           std::strerror(errno), ")");
  std::string event = event_header(0);
  append_bytes_field(event, 3, "brain.Event:2");
  write_record(event);
}

TensorBoardEvents::~TensorBoardEvents() {
  if (file_) std::fclose(file_);
}

void TensorBoardEvents::write_scalars(int64_t step, const std::vector<std::pair<std::string, double>>& scalars) {
  if (!started_) {  // Event { SessionLog session_log = 7; }  SessionLog { SessionStatus status = 1; } START = 1
    std::string session_log;
    append_key(session_log, 1, 0);
    append_varint(session_log, 1);
    std::string event = event_header(step);
    append_bytes_field(event, 7, session_log);
    write_record(event);
    started_ = true;
  }
  // Summary { repeated Value value = 1; }  Value { string tag = 1; float simple_value = 2; }
  std::string summary;
  for (const auto& [tag, value] : scalars) {
    std::string v;
    append_bytes_field(v, 1, tag);
    append_key(v, 2, 5);
    append_le(v, std::bit_cast<uint32_t>(float(value)), 4);
    append_bytes_field(summary, 1, v);
  }
  std::string event = event_header(step);
  append_bytes_field(event, 5, summary);
  write_record(event);
}

void TensorBoardEvents::write_record(const std::string& event) {
  std::string record;
  append_le(record, event.size(), 8);
  append_le(record, masked_crc32c(record.data(), 8), 4);
  record += event;
  append_le(record, masked_crc32c(event.data(), event.size()), 4);
  const bool written = std::fwrite(record.data(), 1, record.size(), file_) == record.size() && std::fflush(file_) == 0;
  TS_CHECK(written, "--tensorboard-dir: cannot write ", quoted_text(path_.string()), " (", std::strerror(errno),
           "); free space or choose another folder");
}

}  // namespace tessera
