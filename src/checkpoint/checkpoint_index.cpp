// Reading, writing and checking the tensor index of state.json; nlohmann's exceptions never escape:
// every field is type-checked before it is read, and a bad one is named with its key.
#include "checkpoint/checkpoint_index.h"

#include <charconv>
#include <cstdio>

#include "checkpoint/checkpoint_state.h"
#include "checkpoint/safetensors.h"
#include "core/error.h"
#include "core/user_text.h"
#include "data/json_excerpt.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

bool parse_count(std::string_view text, int64_t& value) {
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && value >= 0 && !text.empty();
}

// A JSON integer in [0, INT64_MAX].
bool is_count(const nlohmann::json& v) {
  return v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX) : v.is_number_integer() && v.get<int64_t>() >= 0;
}

// One tensor of state.json's "tensors", with `where` ("... state.json: 'tensors' entry 'wte'") for errors.
IndexedTensor parse_tensor(const nlohmann::json& entry, const std::string& where) {
  const auto fail = [&](const std::string& what, const nlohmann::json& got) {
    TS_FAIL(where, what, ", got ", json_excerpt(got), "; the index is damaged, restore it or resume from an older checkpoint");
  };
  if (!entry.is_object()) fail(" must be an object", entry);
  IndexedTensor t;
  const nlohmann::json& dtype = entry.contains("dtype") ? entry["dtype"] : nlohmann::json();
  if (dtype != "F32") fail(" field 'dtype' must be \"F32\"", dtype);
  const nlohmann::json& shape = entry.contains("shape") ? entry["shape"] : nlohmann::json();
  if (!shape.is_array() || shape.size() > 8) fail(" field 'shape' must be an array of at most 8 sizes", shape);
  uint64_t numel = 1;
  for (const nlohmann::json& d : shape) {
    if (!is_count(d) || __builtin_mul_overflow(numel, d.get<uint64_t>(), &numel) || numel > uint64_t(INT64_MAX) / 4)
      fail(" field 'shape' must hold non-negative sizes of a tensor that fits in memory", shape);
    t.shape.push_back(d.get<int64_t>());
  }
  const nlohmann::json& slices = entry.contains("slices") ? entry["slices"] : nlohmann::json();
  if (!slices.is_array()) fail(" field 'slices' must be an array", slices);
  for (const nlohmann::json& s : slices) {
    const bool shaped = s.is_object() && s.contains("file") && s["file"].is_string() && s.contains("elements") &&
                        s["elements"].is_array() && s["elements"].size() == 2 && is_count(s["elements"][0]) &&
                        is_count(s["elements"][1]) && s.contains("bytes") && s["bytes"].is_array() &&
                        s["bytes"].size() == 2 && is_count(s["bytes"][0]) && is_count(s["bytes"][1]) &&
                        s.contains("crc32") && s["crc32"].is_array();
    if (!shaped)
      fail(" field 'slices' entries must be {\"file\", \"elements\": [begin, end], \"bytes\": [begin, end], \"crc32\": [...]}", s);
    TensorSlice slice{s["file"].get<std::string>(), s["elements"][0].get<int64_t>(), s["elements"][1].get<int64_t>(),
                      s["bytes"][0].get<uint64_t>(), {}};
    if (slice.end < slice.begin || s["bytes"][1].get<uint64_t>() - slice.offset != slice.bytes())
      fail(" field 'slices': a byte range must hold its elements as F32", s);
    for (const nlohmann::json& crc : s["crc32"]) {
      uint32_t value = 0;
      if (!crc.is_string() || !parse_crc32_hex(crc.get_ref<const std::string&>(), value))
        fail(" field 'slices': 'crc32' must hold CRC-32s of 8 lowercase hex digits", crc);
      slice.crcs.push_back(value);
    }
    t.slices.push_back(std::move(slice));
  }
  return t;
}

// The whole tensors of a first-format file (none when it does not exist), as slices without block CRCs.
void add_whole_tensors(const fs::path& checkpoint, const std::string& file, CheckpointIndex& index) {
  if (!fs::exists(checkpoint / file)) return;
  const SafetensorsFile stored(checkpoint / file);
  for (const SafetensorsInfo& t : stored.tensors()) {
    TS_CHECK(t.type == DType::f32, "checkpoint file ", quoted_text((checkpoint / file).string()), ": tensor '", t.name,
             "' is ", t.dtype, "; a checkpoint stores F32");
    index[t.name] = IndexedTensor{t.shape, {TensorSlice{file, 0, t.numel(), stored.header().size() + t.begin, {}}}};
  }
}

}  // namespace

bool is_optimizer_state_name(std::string_view name) {
  return name.starts_with("m.") || name.starts_with("v.") || name.starts_with("powersgd_");
}

std::string_view state_parameter_name(std::string_view name) {
  for (std::string_view prefix : {"m.", "v.", "powersgd_e."})
    if (name.starts_with(prefix)) return name.substr(prefix.size());
  return name;
}

std::string shard_file_name(int rank, int ranks) {
  char name[64];
  std::snprintf(name, sizeof name, "shard-%05d-of-%05d.safetensors", rank, ranks);
  return name;
}

bool is_shard_file_name(std::string_view name) {
  constexpr std::string_view prefix = "shard-", middle = "-of-", suffix = ".safetensors";
  if (!name.starts_with(prefix) || !name.ends_with(suffix)) return false;
  const std::string_view numbers = name.substr(prefix.size(), name.size() - prefix.size() - suffix.size());
  const size_t split = numbers.find(middle);
  int64_t rank = 0, ranks = 0;
  return split != std::string_view::npos && parse_count(numbers.substr(0, split), rank) &&
         parse_count(numbers.substr(split + middle.size()), ranks) && rank < ranks && ranks <= 99999 &&
         name == shard_file_name(int(rank), int(ranks));
}

std::string slice_name(const std::string& tensor, int64_t begin, int64_t end) {
  return tensor + "[" + std::to_string(begin) + ":" + std::to_string(end) + "]";
}

bool parse_slice_name(const std::string& name, std::string& tensor, int64_t& begin, int64_t& end) {
  const size_t open = name.rfind('['), colon = name.rfind(':');
  if (name.empty() || name.back() != ']' || open == std::string::npos || colon == std::string::npos || colon < open)
    return false;
  tensor = name.substr(0, open);
  const std::string_view text(name);
  return parse_count(text.substr(open + 1, colon - open - 1), begin) &&
         parse_count(text.substr(colon + 1, name.size() - colon - 2), end) && begin <= end;
}

void check_index(const CheckpointIndex& index, const std::map<std::string, FileDigest>& files,
                 const std::string& context) {
  for (const auto& [name, t] : index) {
    int64_t covered = 0;
    for (const TensorSlice& s : t.slices) {
      const std::string where = context + ": tensor '" + name + "' slice [" + std::to_string(s.begin) + ", " +
                                std::to_string(s.end) + ")";
      TS_CHECK(s.begin == covered && s.end > s.begin, where, " does not continue the slices before it at element ",
               covered, "; the index is damaged, restore it or resume from an older checkpoint");
      covered = s.end;
      auto file = files.find(s.file);
      TS_CHECK(file != files.end(), where, " lies in ", quoted_text(s.file, 60),
               ", which the checkpoint does not record; the index is damaged");
      TS_CHECK(s.offset <= file->second.bytes && s.bytes() <= file->second.bytes - s.offset, where, " lies at bytes [",
               s.offset, ", ", s.offset + s.bytes(), "), past the end of ", s.file, " (", file->second.bytes,
               " bytes); the index is damaged");
      TS_CHECK(s.crcs.empty() || s.crcs.size() == (s.bytes() + kCrcBlockBytes - 1) / kCrcBlockBytes, where, " records ",
               s.crcs.size(), " block CRCs for ", s.bytes(), " bytes; the index is damaged");
    }
    TS_CHECK(covered == shape_numel(t.shape), context, ": tensor '", name, "' of shape ", shape_string(t.shape),
             " has slices for ", covered, " elements; the index is damaged or the checkpoint incomplete");
  }
}

CheckpointIndex read_checkpoint_index(const fs::path& checkpoint, const nlohmann::json& state,
                                      const std::map<std::string, FileDigest>& files) {
  const std::string where = "checkpoint " + quoted_text((checkpoint / "state.json").string());
  CheckpointIndex index;
  auto tensors = state.find("tensors");
  if (tensors == state.end()) {  // the first format: whole tensors, as the headers say
    add_whole_tensors(checkpoint, kModelFile, index);
    add_whole_tensors(checkpoint, kOptimizerFile, index);
    return index;
  }
  const nlohmann::json block = state.value("crc_block_bytes", nlohmann::json());
  TS_CHECK(block.is_number_unsigned() && block.get<uint64_t>() == kCrcBlockBytes, where, ": 'crc_block_bytes' must be ",
           kCrcBlockBytes, ", got ", json_excerpt(block), "; the index is damaged or from a newer Tessera");
  TS_CHECK(tensors->is_object(), where, ": 'tensors' must be an object; the index is damaged");
  for (const auto& [name, entry] : tensors->items())
    index[name] = parse_tensor(entry, where + ": 'tensors' entry " + quoted_text(name, 80));
  check_index(index, files, where);
  return index;
}

nlohmann::json index_json(const CheckpointIndex& index) {
  nlohmann::json tensors = nlohmann::json::object();
  for (const auto& [name, t] : index) {
    nlohmann::json slices = nlohmann::json::array();
    for (const TensorSlice& s : t.slices) {
      nlohmann::json crcs = nlohmann::json::array();
      for (uint32_t crc : s.crcs) crcs.push_back(crc32_hex(crc));
      slices.push_back({{"file", s.file}, {"elements", {s.begin, s.end}}, {"bytes", {s.offset, s.offset + s.bytes()}},
                        {"crc32", crcs}});
    }
    tensors[name] = {{"dtype", "F32"}, {"shape", t.shape}, {"slices", slices}};
  }
  return tensors;
}

}  // namespace tessera
