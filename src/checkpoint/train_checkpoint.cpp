// Checkpoint save/load with an atomic commit: temp folder -> fsync -> rename -> repoint ckpt-latest
// -> prune; load verifies checksums, shapes and finiteness before copying a value into the model.
#include "checkpoint/train_checkpoint.h"

#include <charconv>
#include <cmath>
#include <cstdint>

#include "checkpoint/checkpoint_state.h"
#include "checkpoint/model_config_json.h"
#include "checkpoint/run_folder.h"
#include "checkpoint/safetensors.h"
#include "core/atomic_file.h"
#include "core/cuda/device.h"
#include "core/file_checks.h"
#include "core/user_text.h"
#include "data/whole_file.h"
#include "nn/decoder_layout.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

std::vector<SafetensorsEntry> entries_of(const NamedTensors& tensors, const std::string& prefix) {
  std::vector<SafetensorsEntry> entries;
  for (const NamedTensor& t : tensors)
    entries.push_back({prefix + t.name, DType::f32, t.tensor.shape(), t.tensor.data<float>()});
  return entries;
}

// The file must hold exactly `expected` tensors, so none is left over (a state describing fewer
// layers than the file holds would otherwise drop some silently).
void check_tensor_count(const SafetensorsFile& file, size_t expected) {
  TS_CHECK(file.tensors().size() == expected, "checkpoint file ", quoted_text(file.path().string()), " holds ",
           file.tensors().size(), " tensors, the model described by state.json has ", expected,
           "; the files do not belong together");
}

// Copies tensor `name` into `tensor` after checking its shape and that every value is finite
// (and, for Adam's second moment, non-negative).
void read_into(const SafetensorsFile& file, const std::string& name, Tensor& tensor, bool non_negative = false) {
  const SafetensorsInfo& info = file.info(name);
  TS_CHECK(info.shape == tensor.shape(), "checkpoint file ", quoted_text(file.path().string()), ": tensor '", name,
           "' has shape ", shape_string(info.shape), ", the model needs ", shape_string(tensor.shape()));
  std::vector<float> values = file.read_f32(name);
  for (size_t i = 0; i < values.size(); ++i)
    TS_CHECK(std::isfinite(values[i]) && !(non_negative && values[i] < 0), "checkpoint file ",
             quoted_text(file.path().string()), ": tensor '", name, "' holds ", values[i], " at element ", i,
             "; the file is corrupt, restore it or resume from an older checkpoint");
  std::copy(values.begin(), values.end(), tensor.f32());
}

// Compares the size and (when `checksums`) CRC-32 of each named file with those state.json records.
void verify_files(const fs::path& checkpoint, const std::map<std::string, FileDigest>& recorded,
                  const std::vector<std::string>& names, bool checksums) {
  for (const std::string& name : names) {
    const fs::path file = checkpoint / name;
    auto it = recorded.find(name);
    if (it == recorded.end()) {
      TS_CHECK(recorded.empty(), "checkpoint ", quoted_text(checkpoint.string()), ": state.json records no checksum for ",
               name, "; the checkpoint is incomplete");
      continue;  // written before checksums were recorded
    }
    std::error_code ec;
    const uint64_t bytes = fs::file_size(file, ec);
    TS_CHECK(!ec, "checkpoint file ", quoted_text(file.string()), " is missing (", ec.message(),
             "); the checkpoint is incomplete");
    TS_CHECK(bytes == it->second.bytes, "checkpoint file ", quoted_text(file.string()), " holds ", bytes,
             " bytes, state.json records ", it->second.bytes, "; the file is truncated or replaced");
    if (!checksums) continue;
    const FileDigest digest = file_digest(file, "checkpoint file");
    TS_CHECK(digest.crc32 == it->second.crc32, "checkpoint file ", quoted_text(file.string()), " is corrupt: its CRC-32 ",
             digest.crc32, " differs from the ", it->second.crc32,
             " recorded in state.json; restore it, or delete this checkpoint to resume from an older one");
  }
}

// The highest layer index + 1 among names "h.<index>.*".
// The number of transformer blocks a weights file holds: one past the largest N of its "h.N." (GPT-2)
// or "layers.N." (Llama, MoE) tensor names.
int64_t layers_in(const SafetensorsFile& file) {
  int64_t layers = 0;
  for (const SafetensorsInfo& t : file.tensors()) {
    for (std::string_view prefix : {"h.", "layers."}) {
      if (!t.name.starts_with(prefix)) continue;
      const char* first = t.name.data() + prefix.size();
      const char* last = t.name.data() + std::min(t.name.find('.', prefix.size()), t.name.size());
      int64_t index = 0;
      auto [end, ec] = std::from_chars(first, last, index);
      if (ec == std::errc() && end == last && index >= 0 && index < INT64_MAX) layers = std::max(layers, index + 1);
    }
  }
  return layers;
}

fs::path write_checkpoint(const fs::path& out_dir, const ModelSnapshot& model, const OptimizerState* optimizer,
                          const CheckpointState& state, const fs::path& tokenizer_json, Retention retention) {
  create_folder(out_dir, "checkpoint folder");
  const std::string name = checkpoint_dir_name(state.step);
  const fs::path final_dir = out_dir / name;
  const fs::path temp_dir = out_dir / ("." + name + ".tmp");
  fs::remove_all(temp_dir);
  fs::create_directories(temp_dir);

  write_safetensors(temp_dir / kModelFile, entries_of(model.layout.views(model.params), ""), {{"format", "pt"}});
  if (optimizer) {
    std::vector<SafetensorsEntry> moments = entries_of(model.layout.views(optimizer->m), "m.");
    std::vector<SafetensorsEntry> second = entries_of(model.layout.views(optimizer->v), "v.");
    moments.insert(moments.end(), second.begin(), second.end());
    write_safetensors(temp_dir / kOptimizerFile, moments);
  }
  if (!tokenizer_json.empty() && fs::exists(tokenizer_json))
    write_file_atomic(temp_dir / kTokenizerFile, read_whole_file(tokenizer_json, "tokenizer", kMaxTokenizerFileBytes));
  std::map<std::string, FileDigest> files;
  for (const char* file : {kModelFile, kOptimizerFile, kTokenizerFile})
    if (fs::exists(temp_dir / file)) files[file] = file_digest(temp_dir / file, "checkpoint file");
  nlohmann::json j = {{"step", state.step},
                      {"next_batch", state.next_batch},
                      {"seed", state.seed},
                      {"optimizer_steps", optimizer ? optimizer->steps : 0},
                      {"model", model_config_to_json(model.config)},
                      {"files", files_json(files)},
                      {"run_config", state.run_config}};
  if (state.loss_scale > 0) j["loss_scale"] = state.loss_scale;
  write_file_atomic(temp_dir / "state.json", j.dump(2) + "\n");
  fsync_directory(temp_dir);

  // Commit: the new folder appears under its final name, then ckpt-latest moves to it, then old
  // checkpoints beyond the newest few go. Until the rename of ckpt-latest, the old one is live.
  const fs::path replaced = out_dir / ("." + name + ".old");
  fs::remove_all(replaced);
  if (fs::exists(final_dir)) fs::rename(final_dir, replaced);
  fs::rename(temp_dir, final_dir);
  const fs::path link_temp = out_dir / ".ckpt-latest.tmp";
  fs::remove(link_temp);
  fs::create_directory_symlink(name, link_temp);
  fs::rename(link_temp, out_dir / kLatestCheckpoint);
  fsync_directory(out_dir);
  fs::remove_all(replaced);
  prune_checkpoints(out_dir, state.step, retention);
  return final_dir;
}

}  // namespace

ModelSnapshot snapshot_of(const Decoder& model) {
  Tensor params = Tensor::zeros({model.layout().total()});
  copy_tensor(params, model.params());
  return ModelSnapshot{model.config(), model.layout(), params};
}

fs::path save_checkpoint(const fs::path& out_dir, const Decoder& model, const OptimizerState* optimizer,
                         const CheckpointState& state, const fs::path& tokenizer_json, Retention retention) {
  // Staged through the host for a GPU model; the CPU model's own buffer otherwise.
  const ModelSnapshot view{model.config(), model.layout(), tensor_to(model.params(), Device::cpu)};
  return save_checkpoint(out_dir, view, optimizer, state, tokenizer_json, retention);
}

fs::path save_checkpoint(const fs::path& out_dir, const ModelSnapshot& model, const OptimizerState* optimizer,
                         const CheckpointState& state, const fs::path& tokenizer_json, Retention retention) {
  try {
    return write_checkpoint(out_dir, model, optimizer, state, tokenizer_json, retention);
  } catch (const fs::filesystem_error& e) {  // a folder operation (create, rename, link, remove) failed
    TS_FAIL("saving checkpoint ", checkpoint_dir_name(state.step), " in ", quoted_text(out_dir.string()), ": ",
            e.code().message(), " on ", quoted_text(e.path1().string()),
            "; free space or fix the folder's permissions, then resume from the newest complete checkpoint");
  }
}

std::optional<fs::path> find_checkpoint(const fs::path& path) {
  if (fs::exists(path / "state.json")) return path;
  fs::path latest = path / kLatestCheckpoint;
  if (fs::exists(latest / "state.json")) return fs::canonical(latest);
  return std::nullopt;
}

void check_checkpoint_complete(const fs::path& checkpoint, bool checksums) {
  const std::string name = checkpoint.filename().string();
  try {
    nlohmann::json j = read_state_json(checkpoint);
    state_count(j, "step", checkpoint);
    state_count(j, "next_batch", checkpoint);
    state_model_config(j, checkpoint);
    std::error_code ec;
    TS_CHECK(fs::exists(checkpoint / kModelFile, ec), "no ", kModelFile);
    const std::map<std::string, FileDigest> files = state_files(j, checkpoint);
    std::vector<std::string> names{kModelFile};
    for (const auto& [name, digest] : files) names.push_back(name);
    verify_files(checkpoint, files, names, checksums);
  } catch (const Error& e) {
    TS_FAIL(name, " is incomplete or damaged (", e.what(), ")");
  }
}

ModelConfig read_checkpoint_model_config(const fs::path& checkpoint) {
  check_checkpoint_complete(checkpoint);  // a truncated file is named as such, not as a bad header
  const ModelConfig c = state_model_config(read_state_json(checkpoint), checkpoint);
  // Every dimension must fit in the tensors actually stored: a state claiming 10^9 layers is refused
  // here, before a model of that size is allocated.
  const SafetensorsFile weights(checkpoint / kModelFile);
  uint64_t stored = 0;
  for (const SafetensorsInfo& t : weights.tensors()) stored += uint64_t(t.numel());
  for (auto [key, value] : {std::pair{"num_layers", c.num_layers}, {"channels", c.channels},
                            {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}})
    TS_CHECK(uint64_t(value) <= stored, "checkpoint ", quoted_text(checkpoint.string()), ": state.json says model.", key,
             " ", value, ", more than the ", stored, " values ", kModelFile, " holds; the files do not belong together");
  const int64_t layers = layers_in(weights);
  TS_CHECK(layers == c.num_layers, "checkpoint ", quoted_text(checkpoint.string()), ": state.json says ", c.num_layers,
           " layers but ", kModelFile, " holds ", layers, "; the files do not belong together");
  const ParameterLayout layout = decoder_layout(c);
  for (const ParamSpec& spec : layout.specs()) {
    TS_CHECK(weights.contains(spec.name), "checkpoint ", quoted_text(checkpoint.string()), ": state.json describes a ",
             model_family(c), " model with '", spec.name, "' but ", kModelFile,
             " lacks it; the files do not belong together");
    const Shape stored_shape = weights.info(spec.name).shape;
    TS_CHECK(stored_shape == spec.shape, "checkpoint ", quoted_text(checkpoint.string()), ": state.json describes ",
             model_family(c), " with vocab_size ", c.vocab_size, ", channels ", c.channels, ", max_seq_len ",
             c.max_seq_len, ", so '", spec.name, "' should be ", shape_string(spec.shape), ", but ", kModelFile,
             " holds ", shape_string(stored_shape), "; the files do not belong together");
  }
  return c;
}

CheckpointState load_checkpoint(const fs::path& checkpoint, Decoder& model, OptimizerState* optimizer,
                                bool checksums_verified) {
  TS_CHECK(model.device() == Device::cpu, "load_checkpoint: load into the model while it is on the CPU, then move it");
  nlohmann::json j = read_state_json(checkpoint);
  CheckpointState state;
  state.step = state_count(j, "step", checkpoint);
  state.next_batch = state_count(j, "next_batch", checkpoint);
  state.seed = state_seed(j, checkpoint);
  state.run_config = j.value("run_config", nlohmann::json::object());
  state.loss_scale = state_loss_scale(j, checkpoint);
  const ModelConfig recorded = state_model_config(j, checkpoint);
  const ModelConfig& into = model.config();
  TS_CHECK(recorded == into, "checkpoint ", quoted_text(checkpoint.string()), ": its model shape differs from the model it is loaded into");
  const std::map<std::string, FileDigest> files = state_files(j, checkpoint);
  std::vector<std::string> needed{kModelFile};
  if (optimizer) needed.push_back(kOptimizerFile);
  if (!checksums_verified) verify_files(checkpoint, files, needed, true);

  const size_t params = model.layout().specs().size();
  SafetensorsFile weights(checkpoint / kModelFile);
  check_tensor_count(weights, params);
  for (NamedTensor& p : model.named_params()) read_into(weights, p.name, p.tensor);
  if (optimizer) {
    SafetensorsFile moments(checkpoint / kOptimizerFile);
    check_tensor_count(moments, 2 * params);
    optimizer->m = Tensor::zeros({model.layout().total()});
    optimizer->v = Tensor::zeros({model.layout().total()});
    NamedTensors m = model.layout().views(optimizer->m);
    NamedTensors v = model.layout().views(optimizer->v);
    for (NamedTensor& t : m) read_into(moments, "m." + t.name, t.tensor);
    for (NamedTensor& t : v) read_into(moments, "v." + t.name, t.tensor, /*non_negative=*/true);
    optimizer->steps = j.contains("optimizer_steps") ? state_count(j, "optimizer_steps", checkpoint) : state.step;
  }
  return state;
}

}  // namespace tessera
