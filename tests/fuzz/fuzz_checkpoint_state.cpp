// libFuzzer: a checkpoint's state.json on arbitrary bytes through every field reader (counts, seed,
// model shape, the file table, the tensor index).
#include "checkpoint/checkpoint_index.h"
#include "checkpoint/checkpoint_state.h"
#include "core/error.h"
#include "fuzz_input.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::filesystem::path checkpoint = tessera::fuzz::work_dir();
  tessera::fuzz::write_input("state.json", data, size);
  try {
    const nlohmann::json state = tessera::read_state_json(checkpoint);
    for (auto read : {+[](const nlohmann::json& s, const std::filesystem::path& c) { tessera::state_count(s, "step", c); },
                      +[](const nlohmann::json& s, const std::filesystem::path& c) { tessera::state_seed(s, c); },
                      +[](const nlohmann::json& s, const std::filesystem::path& c) { tessera::state_model_config(s, c); },
                      +[](const nlohmann::json& s, const std::filesystem::path& c) { tessera::state_files(s, c); },
                      +[](const nlohmann::json& s, const std::filesystem::path& c) {
                        if (s.contains("tensors")) tessera::read_checkpoint_index(c, s, tessera::state_files(s, c));
                      }}) {
      try {
        read(state, checkpoint);
      } catch (const tessera::Error&) {
      }
    }
  } catch (const tessera::Error&) {
  }
  return 0;
}
