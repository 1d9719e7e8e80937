// Safetensors I/O: an 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {str: str}}, then the data.
// The reader maps the file and validates the whole header before any tensor is read; every error
// names the file (and the tensor). The writer sorts entries by name, lays them out contiguously,
// pads the header with spaces to 8 bytes and commits atomically (temp file, fsync, rename).
#pragma once

#include <cstddef>
#include <filesystem>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/file_mapping.h"
#include "core/tensor.h"

namespace tessera {

// One tensor as the header describes it; begin/end are byte offsets into the data section.
struct SafetensorsInfo {
  std::string name;
  std::string dtype;          // as spelled in the file: "F32", "BF16", "I64", ...
  std::optional<DType> type;  // our element type, when we have one
  size_t element_size = 0;    // bytes per element
  Shape shape;
  size_t begin = 0;
  size_t end = 0;

  int64_t numel() const { return shape_numel(shape); }
};

class SafetensorsFile {
 public:
  // Maps and validates `path`; throws tessera::Error naming the file and the problem.
  explicit SafetensorsFile(const std::filesystem::path& path);
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // Every tensor, sorted by name.
  const std::vector<SafetensorsInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The 8-byte length and the JSON header: every byte before the data section, where a tensor's
  // begin/end count from.
  std::span<const std::byte> header() const { return {map_, size_t(data_ - map_)}; }

  bool contains(const std::string& name) const;
  // Throws naming the file and the tensor when it is absent.
  const SafetensorsInfo& info(const std::string& name) const;
  // The tensor's raw little-endian bytes, inside the mapping (valid while this object lives).
  std::span<const std::byte> bytes(const std::string& name) const;
  // The tensor converted to fp32; F32, BF16 and F16 only.
  std::vector<float> read_f32(const std::string& name) const;

 private:
  void parse_header(size_t header_bytes);
  const SafetensorsInfo* find(const std::string& name) const;

  std::filesystem::path path_;
  FileMapping mapping_;  // the whole file
  const std::byte* map_ = nullptr;  // its first byte
  const std::byte* data_ = nullptr;  // start of the data section
  size_t data_bytes_ = 0;
  std::vector<SafetensorsInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` points at numel(shape) elements of `dtype`, row-major. `file_dtype` names
// a type Tessera does not compute in ("F8_E4M3": one byte each) instead of `dtype`.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  const void* data = nullptr;
  const char* file_dtype = nullptr;
};

// Writes `entries` (any order; sorted by name in the file) and `metadata` to `path` atomically.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace tessera
