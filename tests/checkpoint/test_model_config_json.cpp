// A run's model config as its checkpoints' state.json holds it: every preset, every field of ModelConfig,
// comes back equal (a field the writer forgets makes a checkpoint describe another model than its weights). The
// file spells the kv heads and the MLP width out (0 in a preset means heads and 4C).
#include <gtest/gtest.h>

#include "checkpoint/model_config_json.h"
#include "nn/model_presets.h"

namespace tessera {
namespace {

TEST(ModelConfigJson, EveryPresetRoundTrips) {
  for (const std::string& name : model_preset_names()) {
    ModelConfig config = model_preset(name);
    config.num_kv_heads = config.kv_heads();
    config.mlp_hidden = config.hidden();
    EXPECT_TRUE(model_config_from_json(model_config_to_json(config), "test") == config) << name;
  }
}

}  // namespace
}  // namespace tessera
