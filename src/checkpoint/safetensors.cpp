// Safetensors reader (mmap, header validated in full before use) and atomic writer.
// Multi-byte values are little-endian in the file; we require a little-endian host.
#include "checkpoint/safetensors.h"


#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"

namespace tessera {

static_assert(std::endian::native == std::endian::little, "safetensors I/O assumes a little-endian host");

namespace {

using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we.
constexpr uint64_t max_header_bytes = 100'000'000;

struct DTypeSpec {
  std::string_view name;
  size_t size;
  std::optional<DType> type;
};

constexpr DTypeSpec dtype_specs[] = {
    {"F32", 4, DType::f32},  {"BF16", 2, DType::bf16},    {"F16", 2, DType::f16},
    {"I32", 4, DType::i32},  {"U16", 2, DType::u16},      {"U32", 4, DType::u32},
    {"F64", 8, std::nullopt}, {"I64", 8, std::nullopt},   {"U64", 8, std::nullopt},
    {"I16", 2, std::nullopt}, {"I8", 1, std::nullopt},    {"U8", 1, std::nullopt},
    {"BOOL", 1, std::nullopt}, {"F8_E4M3", 1, std::nullopt}, {"F8_E5M2", 1, std::nullopt},
};

const DTypeSpec* find_dtype(std::string_view name) {
  for (const DTypeSpec& spec : dtype_specs)
    if (spec.name == name) return &spec;
  return nullptr;
}

// How `entry`'s elements are stored: its file_dtype's spec, else its dtype's.
const DTypeSpec& stored_dtype(const SafetensorsEntry& entry) {
  for (const DTypeSpec& spec : dtype_specs)
    if (entry.file_dtype ? spec.name == entry.file_dtype : spec.type == entry.dtype) return spec;
  TS_FAIL("safetensors: tensor '", entry.name, "' has no safetensors type (",
          entry.file_dtype ? entry.file_dtype : dtype_name(entry.dtype), ")");
}

}  // namespace

SafetensorsFile::SafetensorsFile(const std::filesystem::path& path) : path_(path) {
  RegularFile file(path, "safetensors file");
  const size_t file_bytes = size_t(file.size());
  TS_CHECK(file_bytes >= 8, "safetensors file ", path, ": ", file_bytes,
           " bytes is too short to hold the 8-byte header length");
  mapping_ = FileMapping(file, "safetensors file " + quoted_text(path.string()));
  map_ = mapping_.bytes().data();

  uint64_t header_bytes = 0;
  std::memcpy(&header_bytes, map_, 8);
  TS_CHECK(header_bytes <= max_header_bytes, "safetensors file ", path, ": header length ", header_bytes,
           " exceeds the ", max_header_bytes, "-byte limit");
  TS_CHECK(header_bytes <= file_bytes - 8, "safetensors file ", path, ": header length ", header_bytes,
           " runs past the end of the file (", file_bytes, " bytes)");
  data_ = map_ + 8 + header_bytes;
  data_bytes_ = file_bytes - 8 - size_t(header_bytes);
  parse_header(size_t(header_bytes));
}

void SafetensorsFile::parse_header(size_t header_bytes) {
  const char* text = reinterpret_cast<const char*>(map_ + 8);
  json header;
  try {
    header = json::parse(text, text + header_bytes);
  } catch (const json::exception& e) {
    TS_FAIL("safetensors file ", path_, ": header is not valid JSON (", json_error_text(e), ")");
  }
  TS_CHECK(header.is_object(), "safetensors file ", path_, ": header is a JSON ", header.type_name(),
           ", expected an object");

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      TS_CHECK(entry.is_object(), "safetensors file ", path_, ": __metadata__ is not an object");
      for (const auto& [key, value] : entry.items()) {
        TS_CHECK(value.is_string(), "safetensors file ", path_, ": __metadata__ value '", key, "' is not a string");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    auto where = [&, &tensor = name] { return "safetensors file \"" + path_.string() + "\": tensor '" + tensor + "'"; };
    TS_CHECK(entry.is_object(), where(), " is not an object");
    SafetensorsInfo info;
    info.name = name;

    auto dtype = entry.find("dtype");
    TS_CHECK(dtype != entry.end() && dtype->is_string(), where(), " has no dtype string");
    info.dtype = dtype->get<std::string>();
    const DTypeSpec* spec = find_dtype(info.dtype);
    TS_CHECK(spec, where(), " has unknown dtype '", info.dtype, "'");
    info.type = spec->type;
    info.element_size = spec->size;

    auto shape = entry.find("shape");
    TS_CHECK(shape != entry.end() && shape->is_array(), where(), " has no shape array");
    uint64_t numel = 1;
    for (const json& dim : *shape) {
      TS_CHECK(dim.is_number_integer(), where(), " has a shape entry that is not an integer: ", json_excerpt(dim));
      TS_CHECK(dim.is_number_unsigned() && dim.get<uint64_t>() <= uint64_t(INT64_MAX), where(),
               " has a negative or oversized shape entry: ", json_excerpt(dim));
      info.shape.push_back(dim.get<int64_t>());
      TS_CHECK(!__builtin_mul_overflow(numel, dim.get<uint64_t>(), &numel), where(), " has a shape ",
               json_excerpt(*shape), " whose element count overflows");
    }

    auto offsets = entry.find("data_offsets");
    TS_CHECK(offsets != entry.end() && offsets->is_array() && offsets->size() == 2 &&
                 (*offsets)[0].is_number_unsigned() && (*offsets)[1].is_number_unsigned(),
             where(), " needs data_offsets [begin, end] of two non-negative integers");
    uint64_t begin = (*offsets)[0].get<uint64_t>(), end = (*offsets)[1].get<uint64_t>();
    TS_CHECK(begin <= end && end <= data_bytes_, where(), " has data_offsets [", begin, ", ", end,
             "] outside the data section of ", data_bytes_, " bytes (file truncated?)");
    uint64_t expected = 0;
    TS_CHECK(!__builtin_mul_overflow(numel, uint64_t(spec->size), &expected) && end - begin == expected, where(),
             " spans ", end - begin, " bytes but shape ", shape_string(info.shape), " of ", info.dtype, " needs ",
             numel, " x ", spec->size, " bytes");
    info.begin = size_t(begin);
    info.end = size_t(end);
    tensors_.push_back(std::move(info));
  }

  std::sort(tensors_.begin(), tensors_.end(), [](const auto& a, const auto& b) { return a.name < b.name; });

  // No byte may belong to two tensors (empty tensors occupy none).
  std::vector<const SafetensorsInfo*> by_offset;
  for (const SafetensorsInfo& t : tensors_)
    if (t.end > t.begin) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(), [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i)
    TS_CHECK(by_offset[i]->begin >= by_offset[i - 1]->end, "safetensors file ", path_, ": tensor '",
             by_offset[i]->name, "' [", by_offset[i]->begin, ", ", by_offset[i]->end, ") overlaps tensor '",
             by_offset[i - 1]->name, "' [", by_offset[i - 1]->begin, ", ", by_offset[i - 1]->end, ")");
}

const SafetensorsInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = std::lower_bound(tensors_.begin(), tensors_.end(), name,
                             [](const SafetensorsInfo& t, const std::string& n) { return t.name < n; });
  return it != tensors_.end() && it->name == name ? &*it : nullptr;
}

bool SafetensorsFile::contains(const std::string& name) const { return find(name) != nullptr; }

const SafetensorsInfo& SafetensorsFile::info(const std::string& name) const {
  const SafetensorsInfo* t = find(name);
  TS_CHECK(t, "safetensors file ", path_, ": no tensor '", name, "'");
  return *t;
}

std::span<const std::byte> SafetensorsFile::bytes(const std::string& name) const {
  const SafetensorsInfo& t = info(name);
  return {data_ + t.begin, t.end - t.begin};
}

std::vector<float> SafetensorsFile::read_f32(const std::string& name) const {
  const SafetensorsInfo& t = info(name);
  const std::byte* src = data_ + t.begin;
  std::vector<float> out(size_t(t.numel()));
  // memcpy per element: the data section need not be aligned for the element type.
  if (t.type == DType::f32) {
    std::memcpy(out.data(), src, out.size() * sizeof(float));
  } else if (t.type == DType::bf16 || t.type == DType::f16) {
    for (size_t i = 0; i < out.size(); ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      out[i] = t.type == DType::bf16 ? to_float(bf16{bits}) : to_float(f16{bits});
    }
  } else {
    TS_FAIL("safetensors file ", path_, ": tensor '", name, "' is ", t.dtype,
            "; only F32, BF16 and F16 convert to fp32");
  }
  return out;
}

void write_safetensors(const std::filesystem::path& path, const std::vector<SafetensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<const SafetensorsEntry*> sorted;
  for (const SafetensorsEntry& e : entries) sorted.push_back(&e);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });

  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const SafetensorsEntry& e = *sorted[i];
    TS_CHECK(!e.name.empty() && e.name != "__metadata__", "writing ", path, ": invalid tensor name '", e.name, "'");
    TS_CHECK(i == 0 || sorted[i - 1]->name != e.name, "writing ", path, ": tensor '", e.name, "' given twice");
    for (int64_t d : e.shape)
      TS_CHECK(d >= 0, "writing ", path, ": tensor '", e.name, "' has negative shape ", shape_string(e.shape));
    const DTypeSpec& stored = stored_dtype(e);
    uint64_t bytes = uint64_t(shape_numel(e.shape)) * stored.size;
    TS_CHECK(bytes == 0 || e.data, "writing ", path, ": tensor '", e.name, "' has no data");
    header[e.name] = {{"dtype", stored.name}, {"shape", e.shape}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  // Pad with spaces so that the data section starts 8-byte aligned, as the reference writer does.
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');
  uint64_t header_bytes = text.size();

  AtomicFileWriter file(path);
  file.write(&header_bytes, 8);
  file.write(text.data(), text.size());
  for (const SafetensorsEntry* e : sorted) file.write(e->data, size_t(shape_numel(e->shape)) * stored_dtype(*e).size);
  file.commit();
}

}  // namespace tessera
