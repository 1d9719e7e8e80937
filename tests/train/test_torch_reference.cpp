// Step-by-step agreement with PyTorch: a GPT-2 Hugging Face folder written by
// tests/reference/make_hf_reference.py (Debian's python3-torch) is loaded with --init-from and
// trained with AdamW, cosine schedule, clipping and gradient accumulation; losses, grad norms and
// the final weights must match PyTorch's to 1e-4 relative in fp32.
#include <gtest/gtest.h>

#include "checkpoint/hf_gpt2.h"
#include "support/test_support.h"
#include "train/train_fixtures.h"
#include "train/trainer.h"

namespace tessera {

TEST(TorchReference, HuggingFaceGpt2TrainsLikePyTorch) {
  auto dir = testing::scratch_dir();
  const std::string script = std::string(TESSERA_SOURCE_DIR) + "/tests/reference/make_hf_reference.py";
  testing::CommandResult made = testing::run_command(
      "/usr/bin/python3 " + script + " --out " + dir.string() +
      " --steps 6 --schedule cosine --warmup 2 --lr 2e-3 --min-lr 1e-4 --grad-clip 1.0 --weight-decay 0.1");
  ASSERT_EQ(made.exit_code, 0) << made.output;
  nlohmann::json expected = nlohmann::json::parse(testing::read_text(dir / "expected.json"));
  const nlohmann::json& rc = expected["config"];

  TrainConfig c;
  c.init_from = (dir / "hf").string();
  c.train_data = (dir / "train.bin").string();
  c.data_order = "sequential";
  c.batch_size = rc["batch"].get<int64_t>();
  c.micro_batch_size = c.batch_size / 2;  // accumulation must not change anything
  c.seq_len = rc["seq_len"].get<int64_t>();
  c.steps = rc["steps"].get<int64_t>();
  c.lr = rc["lr"].get<float>();
  c.min_lr = rc["min_lr"].get<float>();
  c.lr_schedule = rc["schedule"].get<std::string>();
  c.warmup = rc["warmup"].get<int64_t>();
  c.weight_decay = rc["weight_decay"].get<float>();
  c.beta1 = rc["beta1"].get<float>();
  c.beta2 = rc["beta2"].get<float>();
  c.eps = rc["eps"].get<float>();
  c.grad_clip = rc["grad_clip"].get<float>();
  c.out_dir = (dir / "run").string();
  c.quiet = true;
  Trainer trainer(c);
  trainer.run();

  auto lines = testing::read_metrics(std::filesystem::path(c.out_dir) / "metrics.jsonl");
  ASSERT_EQ(lines.size(), expected["losses"].size());
  for (size_t s = 0; s < lines.size(); ++s) {
    double loss = expected["losses"][s], norm = expected["grad_norms"][s], lr = expected["lrs"][s];
    EXPECT_NEAR(lines[s]["loss"].get<double>(), loss, 1e-4 * loss) << "step " << s + 1;
    EXPECT_NEAR(lines[s]["grad_norm"].get<double>(), norm, 1e-4 * norm) << "step " << s + 1;
    EXPECT_NEAR(lines[s]["lr"].get<double>(), lr, 1e-6 * lr) << "step " << s + 1;
  }

  Decoder torch_final(read_hf_gpt2_config(dir / "hf_final" / "config.json"));
  load_hf_gpt2(dir / "hf_final", torch_final.config(), torch_final.named_params());
  const Tensor& ours = trainer.model().params();
  const Tensor& theirs = torch_final.params();
  ASSERT_EQ(ours.numel(), theirs.numel());
  double max_diff = 0, max_abs = 0;
  for (int64_t i = 0; i < ours.numel(); ++i) {
    max_diff = std::max(max_diff, double(std::fabs(ours.f32()[i] - theirs.f32()[i])));
    max_abs = std::max(max_abs, double(std::fabs(theirs.f32()[i])));
  }
  EXPECT_LT(max_diff, 1e-4 * max_abs) << "largest weight difference " << max_diff;
}

}  // namespace tessera
