// Block CRCs into safetensors metadata on writing; index entries and file digests from headers.
#include "checkpoint/checkpoint_files.h"

#include <algorithm>

#include "core/error.h"
#include "core/user_text.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

constexpr std::string_view kCrcKey = "crc32:";

std::string join_crcs(const std::vector<uint32_t>& crcs) {
  std::string text;
  for (uint32_t crc : crcs) {
    if (!text.empty()) text += ',';
    text += crc32_hex(crc);
  }
  return text;
}

std::vector<uint32_t> split_crcs(const std::string& text, const std::string& where) {
  std::vector<uint32_t> crcs;
  for (size_t at = 0; at < text.size(); at += 9) {
    uint32_t crc = 0;
    TS_CHECK(parse_crc32_hex(std::string_view(text).substr(at, 8), crc) && (at + 8 == text.size() || text[at + 8] == ','),
             where, ": its block CRCs are not comma-separated CRC-32s");
    crcs.push_back(crc);
  }
  return crcs;
}

}  // namespace

void write_checkpoint_file(const fs::path& path, const std::vector<SafetensorsEntry>& entries,
                           std::map<std::string, std::string> metadata) {
  for (const SafetensorsEntry& e : entries)
    metadata[std::string(kCrcKey) + e.name] =
        join_crcs(block_crcs(e.data, size_t(shape_numel(e.shape)) * dtype_size(e.dtype)));
  write_safetensors(path, entries, metadata);
}

FileDigest index_written_file(const fs::path& folder, const std::string& file, CheckpointIndex& index) {
  const SafetensorsFile stored(folder / file);
  const std::string where = "checkpoint file " + quoted_text((folder / file).string());
  std::vector<const SafetensorsInfo*> by_offset;
  for (const SafetensorsInfo& t : stored.tensors()) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  const std::span<const std::byte> header = stored.header();
  uint32_t crc = crc32_of(header.data(), header.size());
  uint64_t end = 0;
  for (const SafetensorsInfo* t : by_offset) {
    TS_CHECK(t->type == DType::f32 && t->begin == end, where, ": tensor '", t->name,
             "' is not F32 or does not follow the one before it; not a file this checkpoint writer wrote");
    auto crcs = stored.metadata().find(std::string(kCrcKey) + t->name);
    TS_CHECK(crcs != stored.metadata().end(), where, ": no block CRCs for tensor '", t->name, "'");
    TensorSlice slice{file, 0, t->numel(), header.size() + t->begin, split_crcs(crcs->second, where)};
    TS_CHECK(slice.crcs.size() == (slice.bytes() + kCrcBlockBytes - 1) / kCrcBlockBytes, where,
             ": wrong number of block CRCs for tensor '", t->name, "'");
    for (size_t b = 0; b < slice.crcs.size(); ++b)
      crc = crc32_join(crc, slice.crcs[b], std::min(kCrcBlockBytes, slice.bytes() - b * kCrcBlockBytes));
    end = t->end;
    std::string tensor = t->name;
    if (parse_slice_name(t->name, tensor, slice.begin, slice.end)) {
      TS_CHECK(slice.end - slice.begin == t->numel(), where, ": slice '", t->name, "' holds ", t->numel(), " elements");
      index[tensor].slices.push_back(std::move(slice));
    } else {
      index[tensor] = IndexedTensor{t->shape, {std::move(slice)}};
    }
  }
  for (auto& [name, t] : index)
    std::sort(t.slices.begin(), t.slices.end(), [](const TensorSlice& a, const TensorSlice& b) { return a.begin < b.begin; });
  const uint64_t bytes = fs::file_size(folder / file);
  TS_CHECK(bytes == header.size() + end, where, " holds ", bytes, " bytes, its tensors end at ", header.size() + end);
  return FileDigest{bytes, crc32_hex(crc)};
}

}  // namespace tessera
