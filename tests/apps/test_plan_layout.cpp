// `tessera plan layout` end to end: the layouts of --world ranks that fit, best first, each one the
// plan `tessera plan memory` gives for its flags (so every listed layout fits and none that fits is
// ranked below a worse one by the stated rule); none fitting is said plainly; bad input is one
// "tessera: error:" line and a non-zero exit.
#include <gtest/gtest.h>

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "support/test_support.h"

namespace tessera {
namespace {

const std::string kPlan = std::string(TESSERA_EXE) + " plan ";

nlohmann::json json_of(const std::string& args) {
  const testing::CommandResult r = testing::run_command(kPlan + args + " --json");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return nlohmann::json::parse(r.output);
}

TEST(PlanLayout, EveryListedLayoutIsWhatPlanMemorySaysAndFits) {
  const std::string model = "--model gpt2-1558m --batch-size 16 --seq-len 1024";
  const nlohmann::json j = json_of("layout " + model + " --world 8 --device-memory-gb 24 --top 6");
  ASSERT_EQ(j["layouts"].size(), 6u) << j.dump();
  EXPECT_GT(j["fitting"].get<size_t>(), 6u);
  int previous_recompute = 0;
  for (const nlohmann::json& layout : j["layouts"]) {
    SCOPED_TRACE(layout["flags"].get<std::string>());
    const nlohmann::json memory =
        json_of("memory " + model + " " + layout["flags"].get<std::string>() + " --device-memory-gb 24");
    EXPECT_TRUE(memory["fits"].get<bool>());
    EXPECT_EQ(memory["largest_total"], layout["largest_total"]);
    EXPECT_EQ(layout["dp"].get<int>() * layout["tp"].get<int>() * layout["pp"].get<int>() * layout["cp"].get<int>(), 8);
    // Least recomputation first.
    const std::string recompute = layout["recompute"];
    const int level = recompute == "none" ? 0 : recompute == "selective" ? 1 : 2;
    EXPECT_GE(level, previous_recompute);
    previous_recompute = level;
  }
  // 1558M at 16 x 1024 on 24 GiB: the unsharded weights and moments alone (23 GiB) leave no room,
  // so the best layout shards or splits the model.
  const nlohmann::json& best = j["layouts"][0];
  EXPECT_TRUE(best["zero"].get<int>() > 0 || best["tp"].get<int>() * best["pp"].get<int>() > 1) << best.dump();
}

// With bf16 moments more layouts fit, and each one's flags carry the setting, so plan memory of those
// flags gives its figure.
TEST(PlanLayout, Bf16MomentsFitMoreAndTheFlagsSayIt) {
  const std::string model = "--model gpt2-1558m --batch-size 16 --seq-len 1024 --world 8 --device-memory-gb 24";
  const nlohmann::json fp32 = json_of("layout " + model), bf16 = json_of("layout " + model + " --optimizer-moments bf16");
  EXPECT_GT(bf16["fitting"].get<size_t>(), fp32["fitting"].get<size_t>());
  const nlohmann::json& best = bf16["layouts"][0];
  const std::string flags = best["flags"];
  EXPECT_NE(flags.find("--optimizer-moments bf16"), std::string::npos) << flags;
  const nlohmann::json memory =
      json_of("memory --model gpt2-1558m --batch-size 16 --seq-len 1024 " + flags + " --device-memory-gb 24");
  EXPECT_EQ(memory["largest_total"], best["largest_total"]);
  EXPECT_EQ(memory["optimizer_moments"], "bf16");
}

// A pipeline's schedule and its virtual stages change its memory: the flags of every layout with pp > 1
// carry them (text and JSON), so plan memory of those flags gives its figure; the interleaved search
// runs the --virtual-stages given.
TEST(PlanLayout, PipelineLayoutsCarryTheirScheduleAndVirtualStages) {
  const std::string model = "--model gpt2-124m --batch-size 8 --seq-len 1024";
  for (const auto& [schedule, header] :
       {std::pair<std::string, std::string>{"--pipeline-schedule zero-bubble", "zero-bubble pipelines"},
        {"--pipeline-schedule interleaved --virtual-stages 2", "interleaved pipelines of 2 virtual stages"}}) {
    SCOPED_TRACE(schedule);
    const std::string search = "layout " + model + " --world 4 --device-memory-gb 4 --top 1000 " + schedule;
    const nlohmann::json j = json_of(search);
    int pipelines = 0;
    for (const nlohmann::json& layout : j["layouts"]) {
      const std::string flags = layout["flags"];
      if (layout["pp"].get<int>() == 1) {
        EXPECT_EQ(flags.find("--pipeline-schedule"), std::string::npos) << flags;
        continue;
      }
      ++pipelines;
      SCOPED_TRACE(flags);
      EXPECT_NE(flags.find(schedule), std::string::npos);
      const nlohmann::json memory = json_of("memory " + model + " " + flags + " --device-memory-gb 4");
      EXPECT_EQ(memory["largest_total"], layout["largest_total"]);
    }
    EXPECT_GT(pipelines, 0) << j.dump();
    const testing::CommandResult text = testing::run_command(kPlan + search);
    EXPECT_TRUE(testing::contains(text.output, header)) << text.output;
  }
}

// --device-memory-gb is printed as given, not rounded to whole GiB.
TEST(PlanLayout, PrintsAFractionalDeviceMemoryAsGiven) {
  const testing::CommandResult r =
      testing::run_command(kPlan + "layout --model gpt2-124m --world 4 --batch-size 8 --device-memory-gb 2.5 --reserve-gb 0");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "layouts fit 2.5 GiB;")) << r.output;
}

TEST(PlanLayout, SaysWhenNothingFits) {
  const testing::CommandResult r =
      testing::run_command(kPlan + "layout --model gpt2-1558m --world 1 --batch-size 16 --device-memory-gb 4");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(testing::contains(r.output, "gpt2-1558m on 1 ranks: no layout fits; add ranks")) << r.output;
}

// The micro-batch sizes tried are the divisors of a rank's share, found in sqrt(share) steps, and a
// layout whose schedule would hold millions of micro-batches is refused before it is built: a global
// batch of 99,999,999,999 sequences used to count down from itself and fill memory for minutes.
TEST(PlanLayout, AHugeGlobalBatchIsPlannedAtOnce) {
  const int64_t batch = 99999999999;
  const testing::CommandResult r = testing::run_command(
      "timeout 60 " + kPlan + "layout --model gpt2-tiny --seq-len 64 --world 4 --batch-size " + std::to_string(batch) + " --json");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const nlohmann::json j = nlohmann::json::parse(r.output);
  ASSERT_FALSE(j["layouts"].empty()) << r.output;
  for (const nlohmann::json& layout : j["layouts"]) {
    SCOPED_TRACE(layout.dump());
    const int64_t dp = layout["dp"], micro = layout["micro_batch"];
    EXPECT_EQ(batch % dp, 0);
    EXPECT_EQ(batch / dp % micro, 0);
    EXPECT_GT(micro, 1000) << "the largest micro-batch that fits a gpt2-tiny is far above 1000 sequences";
  }
}

// What is listed is worth running: a pipeline has at least as many micro-batches a step as stages (with
// one, gpt2-124m on 7 ranks was offered as pp 7 with a single micro-batch of 64: each stage idle 6/7 of
// the step); ZeRO only where there is a data-parallel group to shard over; more recomputation only
// where it fits a larger micro-batch than the same layout with less.
TEST(PlanLayout, ListsNoIdlePipelineNoZeroWithoutDataParallelismNoWastedRecomputation) {
  for (const std::string search : {"layout --model gpt2-124m --world 7 --batch-size 64 --top 1000",
                                   "layout --model gpt2-350m --world 8 --batch-size 32 --device-memory-gb 12 --top 1000"}) {
    SCOPED_TRACE(search);
    const nlohmann::json j = json_of(search);
    ASSERT_FALSE(j["layouts"].empty());
    std::map<std::string, std::pair<int, int64_t>> less_recompute;  // layout and ZeRO -> recompute level, micro-batch
    for (const nlohmann::json& l : j["layouts"]) {
      SCOPED_TRACE(l.dump());
      const int dp = l["dp"], pp = l["pp"], cp = l["cp"], zero = l["zero"];
      const int64_t micro = l["micro_batch"];
      const int64_t batch = search.find("--batch-size 64") != std::string::npos ? 64 : 32;
      EXPECT_GE(batch / dp / micro, pp);
      if (dp * cp == 1) {
        EXPECT_EQ(zero, 0);
      }
      const std::string recompute = l["recompute"];
      const int level = recompute == "none" ? 0 : recompute == "selective" ? 1 : 2;
      // The layout's flags but its recomputation and micro-batch ("... --recompute R --micro-batch-size M ...").
      const std::string flags = l["flags"];
      const size_t recompute_at = flags.find(" --recompute");
      const size_t micro_end = flags.find(' ', flags.find("--micro-batch-size ") + 19);
      const std::string key =
          flags.substr(0, recompute_at) + (micro_end == std::string::npos ? "" : flags.substr(micro_end));
      less_recompute[key + " " + std::to_string(level)] = {level, micro};
    }
    for (const auto& [key, value] : less_recompute)
      for (int lower = 0; lower < value.first; ++lower) {
        const auto it = less_recompute.find(key.substr(0, key.size() - 1) + std::to_string(lower));
        if (it != less_recompute.end()) {
          EXPECT_GT(value.second, it->second.second) << key;
        }
      }
  }
}

// Context parallelism is searched both ways: an all-to-all layout's flags say so and give its figure in
// plan memory, and it is listed only where its cp (times tp) divides the query and key/value heads
// (Llama 3.1 8B: 32 and 8).
TEST(PlanLayout, AllToAllContextParallelLayoutsAreSearchedWhereTheHeadsSplit) {
  const std::string model = "--model llama3.1-8b --batch-size 16 --seq-len 131072";
  const nlohmann::json j = json_of("layout " + model + " --world 16 --top 1000");
  int all_to_all = 0, ring = 0;
  for (const nlohmann::json& l : j["layouts"]) {
    if (l["cp"].get<int>() == 1) continue;
    const bool a2a = l["cp_comm"] == "all-to-all";
    (a2a ? all_to_all : ring)++;
    EXPECT_EQ(l["flags"].get<std::string>().find("--cp-comm all-to-all") != std::string::npos, a2a) << l.dump();
    if (a2a) {
      EXPECT_EQ(8 % (l["cp"].get<int>() * l["tp"].get<int>()), 0) << l.dump();
    }
  }
  EXPECT_GT(all_to_all, 0);
  EXPECT_GT(ring, all_to_all);
  for (const nlohmann::json& l : j["layouts"]) {
    if (l["cp_comm"] != "all-to-all") continue;
    const nlohmann::json memory = json_of("memory " + model + " " + l["flags"].get<std::string>());
    EXPECT_EQ(memory["largest_total"], l["largest_total"]) << l.dump();
    break;
  }
}

// ZeRO-3 is searched resharding its parameters after the forward and keeping them (one all-gather a
// step instead of two, for more memory): a kept layout's flags say --no-reshard-after-forward and give
// its figure in plan memory, it holds at least the resharding one's bytes at the same micro-batch, and
// it ranks first among the split's ZeRO-3 layouts.
TEST(PlanLayout, ZeroThreeIsSearchedKeepingItsParametersToo) {
  const std::string model = "--model gpt2-1558m --batch-size 16 --seq-len 1024 --device-memory-gb 24";
  const nlohmann::json j = json_of("layout " + model + " --world 8 --top 1000");
  std::map<std::string, nlohmann::json> resharding;  // the flags without --no-reshard-after-forward
  int kept = 0;
  for (const nlohmann::json& l : j["layouts"]) {
    const std::string flags = l["flags"];
    const bool keeps = !l["reshard_after_forward"].get<bool>();
    EXPECT_EQ(flags.find("--no-reshard-after-forward") != std::string::npos, keeps) << flags;
    if (!keeps) {
      resharding[flags] = l;
      continue;
    }
    EXPECT_EQ(l["zero"], 3) << flags;
    if (kept++ == 0) {
      EXPECT_EQ(json_of("memory " + model + " " + flags)["largest_total"], l["largest_total"]) << flags;
    }
    const std::string twin = flags.substr(0, flags.find(" --no-reshard-after-forward"));
    if (resharding.count(twin)) ADD_FAILURE() << "the resharding twin ranks first: " << twin;
  }
  EXPECT_GT(kept, 0);
  for (const nlohmann::json& l : j["layouts"]) {
    if (l["reshard_after_forward"].get<bool>()) continue;
    const std::string flags = l["flags"], twin = flags.substr(0, flags.find(" --no-reshard-after-forward"));
    if (resharding.count(twin)) {
      EXPECT_GE(l["largest_total"].get<int64_t>(), resharding[twin]["largest_total"].get<int64_t>()) << flags;
    }
  }
}

// Each GPU keeps --reserve-gb (2 by default) for what is not Tessera's (the CUDA context, the libraries,
// NCCL): a layout is listed only when its plan and the reserve fit.
TEST(PlanLayout, LeavesTheReserveFree) {
  const std::string search = "layout --model gpt2-350m --world 8 --batch-size 32 --device-memory-gb 12 --top 1000";
  const nlohmann::json reserved = json_of(search), bare = json_of(search + " --reserve-gb 0"),
                       more = json_of(search + " --reserve-gb 4");
  // A layout's micro-batch (by its other flags) shrinks as the reserve grows, and somewhere it must.
  const auto micro_batches = [](const nlohmann::json& j) {
    std::map<std::string, int64_t> micro;
    for (const nlohmann::json& l : j["layouts"]) {
      const std::string flags = l["flags"];
      micro[flags.substr(0, flags.find(" --micro-batch-size"))] = l["micro_batch"];
    }
    return micro;
  };
  int shrunk = 0;
  for (const auto& [less, most] : {std::pair{&bare, &reserved}, {&reserved, &more}})
    for (const auto& [flags, micro] : micro_batches(*most)) {
      const auto loose = micro_batches(*less);
      if (!loose.count(flags)) continue;
      EXPECT_LE(micro, loose.at(flags)) << flags;
      shrunk += micro < loose.at(flags);
    }
  EXPECT_GT(shrunk, 0);
  for (const nlohmann::json& l : reserved["layouts"]) EXPECT_LE(l["largest_total"].get<int64_t>(), int64_t(12) << 30);
  const nlohmann::json memory = json_of("memory --model gpt2-350m --batch-size 32 --seq-len 1024 " +
                                        reserved["layouts"][0]["flags"].get<std::string>() + " --device-memory-gb 12");
  EXPECT_EQ(memory["ranks"][0]["reserved"], int64_t(2) << 30);
}

TEST(PlanLayout, BadInputIsOneLineAndANonZeroExit) {
  testing::expect_one_line_errors(kPlan, {
      {"layout --reserve-gb -1", "--reserve-gb must not be negative"},
      {"layout --reserve-gb 24 --device-memory-gb 24", "--reserve-gb 24 leaves nothing of --device-memory-gb 24"},
      {"layout --pipeline-schedule 1f2b", "--pipeline-schedule"},
      {"layout --batch-size 0", "--batch-size must be positive, got 0"},
      {"layout --model gpt2-124m --seq-len 4096", "--seq-len 4096 exceeds the model's context of 1024 tokens"},
      {"layout --world 0", "--world must be between 1 and 65536 ranks, got 0"},
      {"layout --device-memory-gb -1", "--device-memory-gb must be a positive number"},
      {"layout --top 0", "--top must be at least 1"},
      {"layout --model gpt4", "gpt2-124m"},
      {"layout --virtual-stages 2", "--virtual-stages 2 needs --pipeline-schedule interleaved, not 1f1b"},
  });
}

}  // namespace
}  // namespace tessera
