// Checkpoint save in two phases (every rank writes its part; one rank indexes and commits: temp
// folder -> fsync -> rename -> repoint ckpt-latest -> prune) and load through the index, which
// verifies checksums, shapes and finiteness before copying a value into the model or optimizer.
#include "checkpoint/train_checkpoint.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <memory>
#include <set>

#include "checkpoint/checkpoint_files.h"
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_reader.h"
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

fs::path temp_dir_of(const fs::path& out_dir, int64_t step) {
  const std::string name = checkpoint_dir_name(step);
  return out_dir / ("." + name + ".tmp");
}

// Slices "<prefix><name>[begin:end]" of the whole parameters for `segments`, their values at
// values[state_offset ...]: the moments ("m.", "v."), sharded weights ("") and PowerSGD's errors
// ("powersgd_e.", of the parameters in `only`).
void append_segment_entries(const ParameterLayout& layout, const std::vector<AdamWSegment>& segments,
                            const std::string& prefix, const Tensor& values, std::vector<SafetensorsEntry>& entries,
                            const std::vector<std::string>* only = nullptr) {
  for (const AdamWSegment& s : segments) {
    const ParamSpec& spec = layout.spec_at(s.param_offset);
    if (only && std::find(only->begin(), only->end(), spec.name) == only->end()) continue;
    const int64_t begin = s.param_offset - spec.offset;
    spec.for_each_whole_run(begin, begin + s.length, [&](int64_t held, int64_t whole, int64_t count) {
      entries.push_back({slice_name(prefix + spec.name, whole, whole + count), DType::f32, {count},
                         values.data<float>() + s.state_offset + (held - begin)});
    });
  }
}

// Commits temp_dir as out_dir/ckpt-<step>: the folder appears under its final name, then ckpt-latest
// moves to it, then old checkpoints beyond the newest few go. Until the rename of ckpt-latest, the old
// one is live.
fs::path publish(const fs::path& out_dir, const fs::path& temp_dir, int64_t step, Retention retention) {
  const std::string name = checkpoint_dir_name(step);
  const fs::path final_dir = out_dir / name, replaced = out_dir / ("." + name + ".old");
  fs::remove_all(replaced);
  if (fs::exists(final_dir)) fs::rename(final_dir, replaced);
  fs::rename(temp_dir, final_dir);
  const fs::path link_temp = out_dir / ".ckpt-latest.tmp";
  fs::remove(link_temp);
  fs::create_directory_symlink(name, link_temp);
  fs::rename(link_temp, out_dir / kLatestCheckpoint);
  fsync_directory(out_dir);
  fs::remove_all(replaced);
  prune_checkpoints(out_dir, step, retention);
  return final_dir;
}

fs::path commit(const fs::path& out_dir, const ModelConfig& config, const CheckpointState& state, int shards,
                Retention retention) {
  const fs::path temp_dir = temp_dir_of(out_dir, state.step);
  std::map<std::string, FileDigest> files;
  CheckpointIndex index;
  if (fs::exists(temp_dir / kModelFile)) files[kModelFile] = index_written_file(temp_dir, kModelFile, index);
  for (int r = 0; r < shards; ++r) files[shard_file_name(r, shards)] = index_written_file(temp_dir, shard_file_name(r, shards), index);
  if (fs::exists(temp_dir / kTokenizerFile)) files[kTokenizerFile] = file_digest(temp_dir / kTokenizerFile, "checkpoint file");
  // The slices (moments, sharded weights, PowerSGD's errors) came without a shape: each is its parameter's.
  const ParameterLayout layout = decoder_layout(config);
  for (auto& [name, t] : index)
    if (t.shape.empty()) t.shape = layout.find(std::string(state_parameter_name(name))).shape;
  const std::string context = "saving " + quoted_text(temp_dir.string());
  const auto powersgd = size_t(
      std::count_if(index.begin(), index.end(), [](const auto& t) { return t.first.starts_with("powersgd_"); }));
  TS_CHECK(index.size() - powersgd == layout.specs().size() * (shards > 0 ? 3 : 1), context,
           ": the ranks' files hold ", index.size() - powersgd, " tensors, the model has ", layout.specs().size(),
           " parameters");
  check_index(index, files, context);
  // Files of an abandoned save of this step (another world size, a temporary file) are not part of it.
  for (const fs::directory_entry& e : fs::directory_iterator(temp_dir))
    if (!files.contains(e.path().filename().string())) fs::remove_all(e.path());

  const std::string run_config = state.run_config.dump();
  nlohmann::json j = {{"format", 2},
                      {"step", state.step},
                      {"next_batch", state.next_batch},
                      {"seed", state.seed},
                      {"optimizer_steps", state.optimizer_steps},
                      {"model", model_config_to_json(config)},
                      {"layout", {{"world_size", state.layout.world_size}, {"dp", state.layout.dp}, {"tp", state.layout.tp},
                                  {"pp", state.layout.pp}, {"zero", state.layout.zero}}},
                      {"run_config", state.run_config},
                      {"config_hash", crc32_hex(crc32_of(run_config.data(), run_config.size()))},
                      {"files", files_json(files)},
                      {"crc_block_bytes", kCrcBlockBytes},
                      {"tensors", index_json(index)}};
  if (state.consumed_sequences) j["consumed_sequences"] = *state.consumed_sequences;
  if (state.data_origin != SequenceOrigin{})
    j["data_origin"] = {{"sequence", state.data_origin.sequence}, {"epoch", state.data_origin.epoch}};
  if (state.loss_scale > 0) {
    j["loss_scale"] = state.loss_scale;
    j["loss_scale_clean_steps"] = state.loss_scale_clean_steps;
  }
  if (!state.fp8_amax_history.empty()) j["fp8_amax_history"] = state.fp8_amax_history;
  write_file_atomic(temp_dir / "state.json", j.dump(1) + "\n");
  fsync_directory(temp_dir);
  return publish(out_dir, temp_dir, state.step, retention);
}

// A folder operation (create, rename, link, remove) failed: one line naming it and the way out.
template <typename F>
auto saving(const fs::path& out_dir, int64_t step, F&& f) {
  try {
    return f();
  } catch (const fs::filesystem_error& e) {
    TS_FAIL("saving checkpoint ", checkpoint_dir_name(step), " in ", quoted_text(out_dir.string()), ": ",
            e.code().message(), " on ", quoted_text(e.path1().string()),
            "; free space or fix the folder's permissions, then resume from the newest complete checkpoint");
  }
}

// state.json, its files table and its index, read once for a load.
struct OpenedCheckpoint {
  nlohmann::json state;
  std::map<std::string, FileDigest> files;
  CheckpointIndex index;
};

// A first-format checkpoint's `file` is verified against its CRC-32 before use, unless the caller just
// did; the sharded format's blocks are verified as they are read.
OpenedCheckpoint open_checkpoint(const fs::path& checkpoint, const char* file, bool checksums_verified) {
  OpenedCheckpoint c;
  c.state = read_state_json(checkpoint);
  c.files = state_files(c.state, checkpoint);
  c.index = read_checkpoint_index(checkpoint, c.state, c.files);
  auto recorded = c.files.find(file);
  if (!checksums_verified && !c.state.contains("tensors") && recorded != c.files.end())
    verify_checkpoint_file(checkpoint, file, recorded->second, /*checksum=*/true);
  return c;
}

// The weight tensors a checkpoint stores, by name, and how many values they hold in all: whole in
// model.safetensors (its header), or with sharded weights as slices in the shard files (the index).
struct StoredWeights {
  std::string where;  // for messages: "model.safetensors holds", "the shard files hold"
  bool plural = false;
  std::map<std::string, Shape> shapes;
  uint64_t values = 0;
  std::string holds() const { return where + (plural ? " hold " : " holds "); }
  std::string lack() const { return where + (plural ? " lack" : " lacks"); }
};

StoredWeights stored_weights(const fs::path& checkpoint, const nlohmann::json& state) {
  const std::map<std::string, FileDigest> files = state_files(state, checkpoint);
  StoredWeights stored;
  if (!state.contains("tensors") || files.contains(kModelFile)) {
    stored.where = kModelFile;
    const SafetensorsFile weights(checkpoint / kModelFile);
    for (const SafetensorsInfo& t : weights.tensors()) {
      stored.shapes[t.name] = t.shape;
      stored.values += uint64_t(t.numel());
    }
    return stored;
  }
  stored.where = "the shard files";
  stored.plural = true;
  for (const auto& [name, t] : read_checkpoint_index(checkpoint, state, files)) {
    if (is_optimizer_state_name(name)) continue;
    stored.shapes[name] = t.shape;
    for (const TensorSlice& slice : t.slices) stored.values += uint64_t(slice.end - slice.begin);
  }
  return stored;
}

// The number of transformer blocks the stored weights hold: one past the largest N of their "h.N."
// (GPT-2) or "layers.N." (Llama, MoE) tensor names.
int64_t layers_in(const StoredWeights& stored) {
  int64_t layers = 0;
  for (const auto& [name, shape] : stored.shapes) {
    for (std::string_view prefix : {"h.", "layers."}) {
      if (!name.starts_with(prefix)) continue;
      const char* first = name.data() + prefix.size();
      const char* last = name.data() + std::min(name.find('.', prefix.size()), name.size());
      int64_t index = 0;
      auto [end, ec] = std::from_chars(first, last, index);
      if (ec == std::errc() && end == last && index >= 0 && index < INT64_MAX) layers = std::max(layers, index + 1);
    }
  }
  return layers;
}

}  // namespace

ModelSnapshot snapshot_of(const Decoder& model) {
  Tensor params = Tensor::zeros({model.layout().total()});
  copy_tensor(params, model.params());
  return ModelSnapshot{model.config(), model.layout(), params};
}

namespace {

uint64_t bytes_of(const std::vector<SafetensorsEntry>& entries) {
  uint64_t bytes = 0;
  for (const SafetensorsEntry& e : entries) bytes += uint64_t(shape_numel(e.shape)) * dtype_size(e.dtype);
  return bytes;
}

// A rank's part whose write failed (a full disk, a quota): the save, the part's size against the room
// there was, and the checkpoint a resume continues from, which the failure left as it was.
[[noreturn]] void part_not_written(const fs::path& out_dir, int64_t step, uint64_t bytes,
                                   std::optional<uint64_t> free_before, const std::string& error) {
  std::error_code ec;
  const fs::path latest = fs::read_symlink(out_dir / kLatestCheckpoint, ec);
  TS_FAIL("saving checkpoint ", checkpoint_dir_name(step), " in ", quoted_text(out_dir.string()),
          ": this rank's part holds ", bytes, " bytes of tensors",
          free_before ? ", and " + std::to_string(*free_before) + " bytes were free there when it began" : "", " (",
          error, "); ",
          ec ? std::string("no earlier checkpoint exists") : latest.string() + " is untouched and --resume continues from it",
          "; free space, then resume");
}

}  // namespace

void write_checkpoint_part(const fs::path& out_dir, int64_t step, const CheckpointPart& part) {
  std::vector<SafetensorsEntry> weights, shard;
  if (part.model)
    for (const NamedTensor& t : part.model->layout.views(part.model->params))
      weights.push_back({t.name, DType::f32, t.tensor.shape(), t.tensor.data<float>()});
  if (part.optimizer) {
    const OptimizerState& o = *part.optimizer;
    append_segment_entries(*part.layout, o.segments, "m.", o.m, shard);
    append_segment_entries(*part.layout, o.segments, "v.", o.v, shard);
    if (part.weight_shard) append_segment_entries(*part.layout, o.segments, "", *part.weight_shard, shard);
    if (const PowerSgdPart* p = part.powersgd) {
      append_segment_entries(*part.layout, o.segments, "powersgd_e.", p->errors, shard, &p->compressed);
      for (const auto& [name, t] : p->slices) shard.push_back({name, DType::f32, t.shape(), t.data<float>()});
    }
  }
  saving(out_dir, step, [&] {
    create_folder(out_dir, "checkpoint folder");
    const fs::path temp_dir = temp_dir_of(out_dir, step);
    fs::create_directories(temp_dir);
    const std::optional<uint64_t> free_before = free_disk_bytes(temp_dir);
    try {
      if (part.model) write_checkpoint_file(temp_dir / kModelFile, weights, {{"format", "pt"}});
      if (part.optimizer) write_checkpoint_file(temp_dir / shard_file_name(part.rank, part.ranks), shard);
      if (!part.tokenizer_json.empty() && fs::exists(part.tokenizer_json))
        write_file_atomic(temp_dir / kTokenizerFile,
                          read_whole_file(part.tokenizer_json, "tokenizer", kMaxTokenizerFileBytes));
    } catch (const Error& e) {
      part_not_written(out_dir, step, bytes_of(weights) + bytes_of(shard), free_before, e.what());
    }
    return 0;
  });
}

fs::path commit_checkpoint(const fs::path& out_dir, const ModelConfig& config, const CheckpointState& state, int shards,
                           Retention retention) {
  return saving(out_dir, state.step, [&] { return commit(out_dir, config, state, shards, retention); });
}

fs::path save_checkpoint(const fs::path& out_dir, const Decoder& model, const OptimizerState* optimizer,
                         const CheckpointState& state, const fs::path& tokenizer_json, Retention retention) {
  // Staged through the host for a GPU model; the CPU model's own buffer otherwise.
  const ModelSnapshot view{model.config(), model.layout(), tensor_to(model.params(), Device::cpu)};
  write_checkpoint_part(out_dir, state.step, CheckpointPart{0, 1, &model.layout(), &view, optimizer, tokenizer_json});
  return commit_checkpoint(out_dir, model.config(), state, optimizer ? 1 : 0, retention);
}

std::optional<fs::path> find_checkpoint(const fs::path& path) {
  if (fs::exists(path / "state.json")) return path;
  fs::path latest = path / kLatestCheckpoint;
  if (fs::exists(latest / "state.json")) return fs::canonical(latest);
  return std::nullopt;
}

void check_checkpoint_complete(const fs::path& checkpoint, bool checksums, FileShare share, CheckpointUse use) {
  const std::string name = checkpoint.filename().string();
  try {
    nlohmann::json j = read_state_json(checkpoint);
    state_count(j, "step", checkpoint);
    state_count(j, "next_batch", checkpoint);
    state_model_config(j, checkpoint);
    const std::map<std::string, FileDigest> files = state_files(j, checkpoint);
    std::error_code ec;
    TS_CHECK(!files.empty() || fs::exists(checkpoint / kModelFile, ec), "no ", kModelFile);
    const CheckpointIndex index = read_checkpoint_index(checkpoint, j, files);
    TS_CHECK(std::any_of(index.begin(), index.end(), [](const auto& t) { return !is_optimizer_state_name(t.first); }),
             "no weights: neither ", kModelFile, " nor weight slices in the shard files");
    std::set<std::string> weight_files = {kModelFile};  // inference reads these alone
    for (const auto& [tensor, t] : index)
      if (!is_optimizer_state_name(tensor))
        for (const TensorSlice& slice : t.slices) weight_files.insert(slice.file);
    int i = 0;
    for (const auto& [file, digest] : files)
      if (use == CheckpointUse::training || weight_files.contains(file))
        verify_checkpoint_file(checkpoint, file, digest, checksums && i++ % share.count == share.index);
  } catch (const Error& e) {
    TS_FAIL(name, " is incomplete or damaged (", e.what(), ")");
  }
}

ModelConfig read_checkpoint_model_config(const fs::path& checkpoint) {
  // A truncated file is named as such, not as a bad header; the moments are not read here.
  check_checkpoint_complete(checkpoint, /*checksums=*/false, {}, CheckpointUse::inference);
  const nlohmann::json state = read_state_json(checkpoint);
  const ModelConfig c = state_model_config(state, checkpoint);
  // Every dimension must fit in the tensors actually stored: a state claiming 10^9 layers is refused
  // here, before a model of that size is allocated.
  const StoredWeights stored = stored_weights(checkpoint, state);
  for (auto [key, value] : {std::pair{"num_layers", c.num_layers}, {"channels", c.channels},
                            {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}})
    TS_CHECK(uint64_t(value) <= stored.values, "checkpoint ", quoted_text(checkpoint.string()), ": state.json says model.",
             key, " ", value, ", more than the ", stored.values, " values ", stored.holds(),
             "; the files do not belong together");
  const int64_t layers = layers_in(stored);
  TS_CHECK(layers == c.num_layers, "checkpoint ", quoted_text(checkpoint.string()), ": state.json says ", c.num_layers,
           " layers but ", stored.holds(), layers, "; the files do not belong together");
  const ParameterLayout layout = decoder_layout(c);
  for (const ParamSpec& spec : layout.specs()) {
    auto it = stored.shapes.find(spec.name);
    TS_CHECK(it != stored.shapes.end(), "checkpoint ", quoted_text(checkpoint.string()), ": state.json describes a ",
             model_family(c), " model with '", spec.name, "' but ", stored.lack(),
             " it; the files do not belong together");
    TS_CHECK(it->second == spec.shape, "checkpoint ", quoted_text(checkpoint.string()), ": state.json describes ",
             model_family(c), " with vocab_size ", c.vocab_size, ", channels ", c.channels, ", max_seq_len ",
             c.max_seq_len, ", so '", spec.name, "' should be ", shape_string(spec.shape), ", but ", stored.holds(),
             shape_string(it->second), "; the files do not belong together");
  }
  return c;
}

CheckpointModel open_checkpoint_model(const fs::path& checkpoint, const ModelConfig& config,
                                      const ParameterLayout& layout, bool checksums_verified) {
  // What the weights reader keeps open: the checkpoint's index and files, which the reader refers to.
  struct Opened {
    Opened(const fs::path& checkpoint, bool checksums_verified)
        : c(open_checkpoint(checkpoint, kModelFile, checksums_verified)), reader(checkpoint, c.index, c.files) {}
    OpenedCheckpoint c;
    CheckpointReader reader;
  };
  auto opened = std::make_shared<Opened>(checkpoint, checksums_verified);
  const nlohmann::json& json = opened->c.state;
  CheckpointModel model;
  CheckpointState& state = model.state;
  state.step = state_count(json, "step", checkpoint);
  state.next_batch = state_count(json, "next_batch", checkpoint);
  if (json.contains("consumed_sequences")) state.consumed_sequences = state_count(json, "consumed_sequences", checkpoint);
  if (json.contains("data_origin")) {
    const nlohmann::json& origin = json["data_origin"];
    TS_CHECK(origin.is_object(), "checkpoint ", quoted_text((checkpoint / "state.json").string()),
             ": 'data_origin' must be an object with 'sequence' and 'epoch'");
    state.data_origin = {state_count(origin, "sequence", checkpoint), state_count(origin, "epoch", checkpoint)};
    TS_CHECK(state.consumed_sequences && state.data_origin.sequence <= *state.consumed_sequences, "checkpoint ",
             quoted_text((checkpoint / "state.json").string()), ": 'data_origin.sequence' ",
             state.data_origin.sequence, " lies beyond 'consumed_sequences'; the file is damaged");
  }
  state.seed = state_seed(json, checkpoint);
  state.run_config = json.value("run_config", nlohmann::json::object());
  state.loss_scale = state_loss_scale(json, checkpoint);
  // Absent from checkpoints written before it was recorded: the count starts again.
  if (json.contains("loss_scale_clean_steps"))
    state.loss_scale_clean_steps = state_count(json, "loss_scale_clean_steps", checkpoint);
  state.fp8_amax_history = state_fp8_amax_history(json, checkpoint);
  state.optimizer_steps =
      json.contains("optimizer_steps") ? state_count(json, "optimizer_steps", checkpoint) : state.step;
  const ModelConfig recorded = state_model_config(json, checkpoint);
  TS_CHECK(recorded == config, "checkpoint ", quoted_text(checkpoint.string()),
           ": its model shape differs from the model it is loaded into");
  // The weights must be exactly the whole model's parameters, none left over (a state describing
  // fewer layers than the files hold would otherwise drop some silently); a pipeline stage reads its own.
  const CheckpointIndex& index = opened->c.index;
  const size_t weights =
      size_t(std::count_if(index.begin(), index.end(), [](const auto& t) { return !is_optimizer_state_name(t.first); }));
  const size_t parameters = decoder_layout(config).specs().size();
  TS_CHECK(weights == parameters, "checkpoint ", quoted_text(checkpoint.string()), " holds ", weights,
           " weight tensors, the model described by state.json has ", parameters, "; the files do not belong together");
  for (const ParamSpec& spec : layout.specs()) {
    auto stored = index.find(spec.name);
    TS_CHECK(stored != index.end() && stored->second.shape == spec.whole_shape(), "checkpoint ",
             quoted_text(checkpoint.string()), ": tensor '", spec.name, "' has shape ",
             stored == index.end() ? "(absent)" : shape_string(stored->second.shape), ", the model needs ",
             shape_string(spec.whole_shape()), "; the files do not belong together");
  }
  model.weights = values_from_whole(layout, [opened](const std::string& name, int64_t begin, int64_t end, float* out) {
    opened->reader.read(name, begin, end, out);
  });
  return model;
}

CheckpointState load_checkpoint(const fs::path& checkpoint, Decoder& model, bool checksums_verified) {
  TS_CHECK(model.device() == Device::cpu, "load_checkpoint: load into the model while it is on the CPU, then move it");
  const CheckpointModel opened = open_checkpoint_model(checkpoint, model.config(), model.layout(), checksums_verified);
  opened.weights({0, model.layout().total()}, model.params().f32());
  return opened.state;
}

std::string powersgd_slice_name(std::string_view kind, const std::string& parameter, int tp_rank, int tp, bool copy) {
  std::string name = "powersgd_";
  name.append(kind).append(".").append(parameter).append(".tp").append(std::to_string(tp_rank));
  return name.append("of").append(std::to_string(tp)).append(copy ? ".copy" : "");
}

StoredPowerSgd load_powersgd_state(const fs::path& checkpoint, const ParameterLayout& layout,
                                   const std::vector<std::string>& compressed,
                                   const std::vector<std::string>& slice_names) {
  const OpenedCheckpoint c = open_checkpoint(checkpoint, kOptimizerFile, /*checksums_verified=*/true);
  StoredPowerSgd stored;
  CheckpointReader reader(checkpoint, c.index, c.files);
  const bool has_errors = std::any_of(c.index.begin(), c.index.end(),
                                      [](const auto& t) { return t.first.starts_with("powersgd_e."); });
  if (has_errors) {
    stored.error_sum = Tensor::zeros({layout.total()});
    for (const std::string& name : compressed) {
      auto found = c.index.find("powersgd_e." + name);
      if (found == c.index.end()) continue;  // not compressed when saved
      const ParamSpec& spec = layout.find(name);
      TS_CHECK(found->second.shape == spec.whole_shape(), "checkpoint ", quoted_text(checkpoint.string()),
               ": tensor 'powersgd_e.", name, "' has shape ", shape_string(found->second.shape), ", the model needs ",
               shape_string(spec.whole_shape()), "; the files do not belong together");
      float* out = stored.error_sum->f32() + spec.offset;
      spec.for_each_whole_run(0, spec.numel(), [&](int64_t held, int64_t whole, int64_t count) {
        reader.read(found->first, whole, whole + count, out + held);
      });
    }
  }
  for (const std::string& name : slice_names) {
    auto found = c.index.find(name);
    if (found == c.index.end()) continue;
    Tensor slice = Tensor::zeros(found->second.shape);
    reader.read(name, 0, slice.numel(), slice.f32());
    stored.slices.emplace(name, std::move(slice));
  }
  return stored;
}

OptimizerState load_optimizer_state(const fs::path& checkpoint, const ParameterLayout& layout,
                                    std::vector<AdamWSegment> segments, bool checksums_verified) {
  const OpenedCheckpoint c = open_checkpoint(checkpoint, kOptimizerFile, checksums_verified);
  int64_t size = 0;
  for (const AdamWSegment& s : segments) size = std::max(size, s.state_offset + s.length);
  OptimizerState state{std::move(segments), Tensor::zeros({size}), Tensor::zeros({size})};
  CheckpointReader reader(checkpoint, c.index, c.files);
  for (const AdamWSegment& s : state.segments) {
    const ParamSpec& spec = layout.spec_at(s.param_offset);
    for (const char* prefix : {"m.", "v."}) {
      auto stored = c.index.find(prefix + spec.name);
      TS_CHECK(stored != c.index.end(), "checkpoint ", quoted_text(checkpoint.string()),
               " holds no optimizer state (no '", prefix, spec.name,
               "'); it holds weights only: start a new run from it with --init-from ", quoted_text(checkpoint.string()),
               " and another --out-dir");
      TS_CHECK(stored->second.shape == spec.whole_shape(), "checkpoint ", quoted_text(checkpoint.string()),
               ": tensor '", prefix, spec.name, "' has shape ", shape_string(stored->second.shape),
               ", the model needs ", shape_string(spec.whole_shape()), "; the files do not belong together");
      Tensor& moment = prefix[0] == 'm' ? state.m : state.v;
      const int64_t begin = s.param_offset - spec.offset;
      spec.for_each_whole_run(begin, begin + s.length, [&](int64_t held, int64_t whole, int64_t count) {
        reader.read(prefix + spec.name, whole, whole + count, moment.f32() + s.state_offset + (held - begin),
                    /*non_negative=*/prefix[0] == 'v');
      });
    }
  }
  return state;
}

}  // namespace tessera
