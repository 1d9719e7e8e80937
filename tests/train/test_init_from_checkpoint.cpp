// --init-from a Tessera checkpoint or run folder (fine-tuning from one's own pretraining run, as
// Megatron's --finetune): the new run starts from the checkpoint's weights with a fresh optimizer at
// step 0, takes the checkpoint's shape, refuses flags that describe another model, and eval and
// generate read the same folder under --init-from as under --checkpoint.
#include <gtest/gtest.h>

#include "checkpoint/run_folder.h"
#include "nn/decoder.h"
#include "support/test_support.h"
#include "train/model_setup.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {
namespace {
namespace fs = std::filesystem;

std::vector<float> weights_of(const Tensor& params) {
  const float* p = params.f32();
  return {p, p + params.numel()};
}

TEST(InitFromCheckpoint, ANewRunStartsFromTheNewestCheckpointsWeightsAtStepZero) {
  const fs::path dir = testing::scratch_dir();
  TrainConfig source = testing::tiny_run(dir);
  source.checkpoint_every = 1;
  const fs::path newest = Trainer(source).run().last_checkpoint;
  const std::vector<float> trained = weights_of(load_model_for_inference(newest.string(), "", "").model->params());

  TrainConfig tuned = testing::tiny_run(dir);
  tuned.model.clear();  // not given: the checkpoint's shape
  tuned.init_from = source.out_dir;  // the run folder: its newest checkpoint
  tuned.out_dir = (dir / "tuned").string();
  tuned.lr = 1e-3f;
  Trainer trainer(tuned);
  EXPECT_EQ(trainer.start_step(), 0);
  EXPECT_EQ(weights_of(trainer.model().params()), trained);

  // A checkpoint folder itself is a source too, and eval/generate read --init-from as --checkpoint.
  const fs::path first = list_checkpoints(source.out_dir).back().path;
  const std::vector<float> at_first = weights_of(load_model_for_inference(first.string(), "", "").model->params());
  EXPECT_NE(at_first, trained);
  EXPECT_EQ(weights_of(load_model_for_inference("", first.string(), "").model->params()), at_first);
  tuned.init_from = first.string();
  tuned.out_dir = (dir / "from-first").string();
  EXPECT_EQ(weights_of(Trainer(tuned).model().params()), at_first);

  const TrainResult result = trainer.run();
  EXPECT_EQ(result.last_step, tuned.steps);  // its own --steps, from step 0
}

TEST(InitFromCheckpoint, FlagsDescribingAnotherModelAreRefused) {
  const fs::path dir = testing::scratch_dir();
  TrainConfig source = testing::tiny_run(dir);
  source.steps = 1;
  const fs::path checkpoint = Trainer(source).run().last_checkpoint;

  TrainConfig tuned = testing::tiny_run(dir);
  tuned.init_from = source.out_dir;
  tuned.out_dir = (dir / "tuned").string();
  tuned.model = "llama-tiny";
  testing::expect_error_with([&] { Trainer{tuned}; },
                             {"--init-from: --model llama-tiny is a llama model but the checkpoint holds a gpt2 model (" +
                              checkpoint.string() + ")"});
  tuned.model.clear();
  tuned.layers = 3;
  testing::expect_error_with([&] { Trainer{tuned}; },
                             {"--layers gives layers 3, the checkpoint has 2", "keep the checkpoint's shape"});
}

}  // namespace
}  // namespace tessera
