// Checkpoint save/load with an atomic commit: temp folder -> fsync -> rename -> repoint ckpt-latest.
#include "checkpoint/train_checkpoint.h"

#include <cmath>
#include <cstdint>
#include <cstdio>

#include "checkpoint/safetensors.h"
#include "core/atomic_file.h"
#include "core/cuda/device.h"
#include "data/whole_file.h"

namespace tessera {
namespace fs = std::filesystem;
namespace {

constexpr const char* kLatest = "ckpt-latest";

std::string step_dir_name(int64_t step) {
  char name[32];
  std::snprintf(name, sizeof name, "ckpt-%08lld", (long long)step);
  return name;
}

std::vector<SafetensorsEntry> entries_of(const NamedTensors& tensors, const std::string& prefix) {
  std::vector<SafetensorsEntry> entries;
  for (const NamedTensor& t : tensors)
    entries.push_back({prefix + t.name, DType::f32, t.tensor.shape(), t.tensor.data<float>()});
  return entries;
}

void read_into(const SafetensorsFile& file, const std::string& name, Tensor& tensor) {
  const SafetensorsInfo& info = file.info(name);
  TS_CHECK(info.shape == tensor.shape(), "checkpoint ", file.path().string(), ": tensor '", name, "' has shape ",
           shape_string(info.shape), ", the model needs ", shape_string(tensor.shape()));
  std::vector<float> values = file.read_f32(name);
  std::copy(values.begin(), values.end(), tensor.f32());
}

nlohmann::json model_config_json(const GPT2Config& c) {
  return {{"num_layers", c.num_layers}, {"num_heads", c.num_heads}, {"channels", c.channels},
          {"vocab_size", c.vocab_size}, {"max_seq_len", c.max_seq_len}};
}

// A count in state.json (step, data position): a fractional, negative, out-of-range or non-numeric
// value would silently become another position in the run, so it is refused.
int64_t count_field(const nlohmann::json& state, const char* key, const fs::path& checkpoint) {
  const nlohmann::json& v = state.at(key);
  const bool in_range = v.is_number_integer() && (v.is_number_unsigned() ? v.get<uint64_t>() <= uint64_t(INT64_MAX)
                                                                          : v.get<int64_t>() >= 0);
  TS_CHECK(in_range, "checkpoint ", (checkpoint / "state.json").string(), ": '", key,
           "' must be a non-negative integer, got ", v.dump().substr(0, 40));
  return v.get<int64_t>();
}

nlohmann::json read_state_json(const fs::path& checkpoint) {
  fs::path path = checkpoint / "state.json";
  nlohmann::json j = nlohmann::json::parse(read_whole_file(path, "checkpoint state"), nullptr, false);
  TS_CHECK(!j.is_discarded() && j.is_object(), "checkpoint ", path.string(), ": not valid JSON");
  return j;
}

}  // namespace

fs::path save_checkpoint(const fs::path& out_dir, const GPT2& model, const OptimizerState* optimizer,
                         const CheckpointState& state, const fs::path& tokenizer_json) {
  fs::create_directories(out_dir);
  const std::string name = step_dir_name(state.step);
  const fs::path final_dir = out_dir / name;
  const fs::path temp_dir = out_dir / ("." + name + ".tmp");
  fs::remove_all(temp_dir);
  fs::create_directories(temp_dir);

  const Tensor params = tensor_to(model.params(), Device::cpu);  // staged through the host for a GPU model
  write_safetensors(temp_dir / "model.safetensors", entries_of(model.layout().views(params), ""), {{"format", "pt"}});
  if (optimizer) {
    std::vector<SafetensorsEntry> moments = entries_of(model.layout().views(optimizer->m), "m.");
    std::vector<SafetensorsEntry> second = entries_of(model.layout().views(optimizer->v), "v.");
    moments.insert(moments.end(), second.begin(), second.end());
    write_safetensors(temp_dir / "optimizer.safetensors", moments);
  }
  nlohmann::json j = {{"step", state.step},
                      {"next_batch", state.next_batch},
                      {"seed", state.seed},
                      {"optimizer_steps", optimizer ? optimizer->steps : 0},
                      {"model", model_config_json(model.config())},
                      {"run_config", state.run_config}};
  if (state.loss_scale > 0) j["loss_scale"] = state.loss_scale;
  write_file_atomic(temp_dir / "state.json", j.dump(2) + "\n");
  if (!tokenizer_json.empty() && fs::exists(tokenizer_json))
    write_file_atomic(temp_dir / "tokenizer.json", read_whole_file(tokenizer_json, "tokenizer"));
  fsync_directory(temp_dir);

  // Commit: the new folder appears under its final name, then ckpt-latest moves to it, then the
  // previous checkpoints go. Until the rename of ckpt-latest, the old checkpoint is the live one.
  const fs::path replaced = out_dir / ("." + name + ".old");
  fs::remove_all(replaced);
  if (fs::exists(final_dir)) fs::rename(final_dir, replaced);
  fs::rename(temp_dir, final_dir);
  const fs::path link_temp = out_dir / ".ckpt-latest.tmp";
  fs::remove(link_temp);
  fs::create_directory_symlink(name, link_temp);
  fs::rename(link_temp, out_dir / kLatest);
  fsync_directory(out_dir);
  fs::remove_all(replaced);
  for (const fs::directory_entry& e : fs::directory_iterator(out_dir)) {
    std::string n = e.path().filename().string();
    if (n.starts_with("ckpt-") && n != name && n != kLatest && e.is_directory() && !e.is_symlink())
      fs::remove_all(e.path());
  }
  return final_dir;
}

std::optional<fs::path> find_checkpoint(const fs::path& path) {
  if (fs::exists(path / "state.json")) return path;
  fs::path latest = path / kLatest;
  if (fs::exists(latest / "state.json")) return fs::canonical(latest);
  return std::nullopt;
}

GPT2Config read_checkpoint_model_config(const fs::path& checkpoint) {
  nlohmann::json j = read_state_json(checkpoint);
  try {
    const nlohmann::json& m = j.at("model");
    GPT2Config c{m.at("num_layers").get<int64_t>(), m.at("num_heads").get<int64_t>(), m.at("channels").get<int64_t>(),
                 m.at("vocab_size").get<int64_t>(), m.at("max_seq_len").get<int64_t>()};
    c.validate();
    return c;
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("checkpoint ", (checkpoint / "state.json").string(), ": bad model config (", e.what(), ")");
  }
}

CheckpointState load_checkpoint(const fs::path& checkpoint, GPT2& model, OptimizerState* optimizer) {
  TS_CHECK(model.device() == Device::cpu, "load_checkpoint: load into the model while it is on the CPU, then move it");
  nlohmann::json j = read_state_json(checkpoint);
  CheckpointState state;
  try {
    state.step = count_field(j, "step", checkpoint);
    state.next_batch = count_field(j, "next_batch", checkpoint);
    state.seed = j.at("seed").get<uint64_t>();
    state.run_config = j.value("run_config", nlohmann::json::object());
    state.loss_scale = j.value("loss_scale", 0.0);
    TS_CHECK(std::isfinite(state.loss_scale) && state.loss_scale >= 0, "checkpoint ",
             (checkpoint / "state.json").string(), ": loss_scale ", state.loss_scale,
             " must be a non-negative number; the file is damaged");
  } catch (const nlohmann::json::exception& e) {
    TS_FAIL("checkpoint ", (checkpoint / "state.json").string(), ": missing field (", e.what(), ")");
  }
  SafetensorsFile weights(checkpoint / "model.safetensors");
  for (NamedTensor& p : model.named_params()) read_into(weights, p.name, p.tensor);
  if (optimizer) {
    SafetensorsFile moments(checkpoint / "optimizer.safetensors");
    optimizer->m = Tensor::zeros({model.layout().total()});
    optimizer->v = Tensor::zeros({model.layout().total()});
    NamedTensors m = model.layout().views(optimizer->m);
    NamedTensors v = model.layout().views(optimizer->v);
    for (NamedTensor& t : m) read_into(moments, "m." + t.name, t.tensor);
    for (NamedTensor& t : v) read_into(moments, "v." + t.name, t.tensor);
    optimizer->steps = j.value("optimizer_steps", state.step);
  }
  return state;
}

}  // namespace tessera
