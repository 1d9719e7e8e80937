// Pipeline schedules as tables (parallel/pp): for every schedule over a range of stages, micro-batches
// and virtual stages, every chunk's forward and backward of every micro-batch appears exactly once,
// on the chunk's rank, backward after forward; every send has its receive; the simulation finishes
// (no deadlock); its bubble equals the textbook value for gpipe, 1f1b and interleaved and for
// zero-bubble (ZB-H1) is below 1F1B's; activations in flight stay within each schedule's bound
// (M for gpipe, P - r for 1F1B, 2(P - r - 1) + (V - 1) P + 1 chunks for interleaved, P for
// zero-bubble). A schedule that cannot run is refused, and a broken table is caught by the simulator.
#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "core/error.h"
#include "parallel/pp/pipeline_render.h"
#include "parallel/pp/pipeline_simulator.h"
#include "support/test_support.h"

namespace tessera {
namespace {

struct ScheduleCase {
  ScheduleKind kind;
  int P, M, V;
};

std::string case_name(const ::testing::TestParamInfo<ScheduleCase>& info) {
  std::string name = schedule_kind_name(info.param.kind);
  for (char& c : name)
    if (c == '-') c = '_';
  return name + "_P" + std::to_string(info.param.P) + "_M" + std::to_string(info.param.M) + "_V" +
         std::to_string(info.param.V);
}

bool is_compute(ActionKind k) {
  return k == ActionKind::forward || k == ActionKind::backward || k == ActionKind::backward_input ||
         k == ActionKind::backward_weight;
}

class PipelineSchedules : public ::testing::TestWithParam<ScheduleCase> {};

TEST_P(PipelineSchedules, EveryStepOnceInDependencyOrderOnItsRank) {
  const auto [kind, P, M, V] = GetParam();
  const PipelineSchedule s = make_pipeline_schedule(kind, P, M, V);
  ASSERT_EQ(int(s.ranks.size()), P);
  const bool split = kind == ScheduleKind::zero_bubble;
  std::map<std::tuple<ActionKind, int, int>, int> count;
  for (int r = 0; r < P; ++r) {
    std::set<std::pair<int, int>> forwarded, input_grads;
    for (const Action& a : s.ranks[size_t(r)]) {
      EXPECT_EQ(s.rank_of(a.chunk), r) << action_text(a) << " on rank " << r;
      if (!is_compute(a.kind)) continue;
      EXPECT_EQ(a.peer, -1) << action_text(a);
      count[{a.kind, a.chunk, a.micro}]++;
      if (a.kind == ActionKind::forward) forwarded.insert({a.chunk, a.micro});
      if (a.kind == ActionKind::backward || a.kind == ActionKind::backward_input) {
        EXPECT_TRUE(forwarded.count({a.chunk, a.micro})) << action_text(a) << " before its forward";
        input_grads.insert({a.chunk, a.micro});
      }
      if (a.kind == ActionKind::backward_weight) {
        EXPECT_TRUE(input_grads.count({a.chunk, a.micro})) << action_text(a) << " before its input gradient";
      }
    }
  }
  const std::vector<ActionKind> kinds =
      split ? std::vector{ActionKind::forward, ActionKind::backward_input, ActionKind::backward_weight}
            : std::vector{ActionKind::forward, ActionKind::backward};
  for (const ActionKind k : kinds)
    for (int c = 0; c < s.chunks(); ++c)
      for (int m = 0; m < M; ++m) EXPECT_EQ((count[{k, c, m}]), 1) << action_text({k, c, m, -1});
  EXPECT_EQ(count.size(), kinds.size() * size_t(s.chunks() * M)) << "compute steps beyond the model's";
}

TEST_P(PipelineSchedules, EverySendHasItsReceive) {
  const auto [kind, P, M, V] = GetParam();
  const PipelineSchedule s = make_pipeline_schedule(kind, P, M, V);
  // (activation?, sending chunk, micro, from rank, to rank) for sends and for receives.
  std::multiset<std::tuple<bool, int, int, int, int>> sends, receives;
  for (int r = 0; r < P; ++r)
    for (const Action& a : s.ranks[size_t(r)]) {
      if (a.kind == ActionKind::send_activation) sends.insert({true, a.chunk, a.micro, r, a.peer});
      if (a.kind == ActionKind::send_gradient) sends.insert({false, a.chunk, a.micro, r, a.peer});
      if (a.kind == ActionKind::recv_activation) receives.insert({true, a.chunk - 1, a.micro, a.peer, r});
      if (a.kind == ActionKind::recv_gradient) receives.insert({false, a.chunk + 1, a.micro, a.peer, r});
    }
  EXPECT_EQ(sends, receives);
  EXPECT_EQ(sends.size(), size_t(2 * (s.chunks() - 1) * M)) << "one activation and one gradient per chunk boundary";
}

TEST_P(PipelineSchedules, SimulationFinishesWithTheTextbookBubbleAndBoundedActivations) {
  const auto [kind, P, M, V] = GetParam();
  const PipelineSchedule s = make_pipeline_schedule(kind, P, M, V);
  const PipelineTimeline t = simulate_pipeline(s);
  const StepCosts c;
  const double work = M * (kind == ScheduleKind::zero_bubble ? c.forward + c.backward_input + c.backward_weight
                                                              : c.forward + c.backward);
  for (int r = 0; r < P; ++r) EXPECT_NEAR(t.busy[size_t(r)], work, 1e-9) << "rank " << r;
  const double analytic = analytic_bubble_fraction(kind, P, M, V);
  if (kind == ScheduleKind::zero_bubble) {
    const PipelineTimeline one_f_one_b = simulate_pipeline(make_pipeline_schedule(ScheduleKind::one_f_one_b, P, M));
    if (P > 1) {
      EXPECT_LT(t.bubble_fraction(), one_f_one_b.bubble_fraction());
    }
    EXPECT_NEAR(t.bubble_fraction(), analytic, 1e-9);
  } else {
    EXPECT_NEAR(t.bubble_fraction(), analytic, 1e-9);
  }
  for (int r = 0; r < P; ++r) {
    int bound = 0;
    switch (kind) {
      case ScheduleKind::gpipe: bound = M; break;
      case ScheduleKind::one_f_one_b: bound = std::min(P - r, M); break;
      case ScheduleKind::interleaved: bound = std::min(2 * (P - r - 1) + (V - 1) * P + 1, M * V); break;
      case ScheduleKind::zero_bubble: bound = std::min(P, M); break;
    }
    EXPECT_LE(t.peak_in_flight[size_t(r)], bound) << "rank " << r;
    EXPECT_GE(t.peak_in_flight[size_t(r)], 1) << "rank " << r;
  }
  if (kind == ScheduleKind::gpipe) {
    EXPECT_EQ(t.peak_in_flight[0], M);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Tables, PipelineSchedules,
    ::testing::Values(ScheduleCase{ScheduleKind::gpipe, 1, 1, 1}, ScheduleCase{ScheduleKind::gpipe, 4, 8, 1},
                      ScheduleCase{ScheduleKind::gpipe, 3, 2, 1}, ScheduleCase{ScheduleKind::one_f_one_b, 1, 3, 1},
                      ScheduleCase{ScheduleKind::one_f_one_b, 4, 8, 1}, ScheduleCase{ScheduleKind::one_f_one_b, 4, 2, 1},
                      ScheduleCase{ScheduleKind::one_f_one_b, 8, 16, 1}, ScheduleCase{ScheduleKind::interleaved, 4, 8, 2},
                      ScheduleCase{ScheduleKind::interleaved, 2, 4, 2}, ScheduleCase{ScheduleKind::interleaved, 4, 12, 3},
                      ScheduleCase{ScheduleKind::interleaved, 4, 4, 2}, ScheduleCase{ScheduleKind::interleaved, 1, 3, 2},
                      ScheduleCase{ScheduleKind::zero_bubble, 4, 8, 1}, ScheduleCase{ScheduleKind::zero_bubble, 2, 6, 1},
                      ScheduleCase{ScheduleKind::zero_bubble, 8, 16, 1}),
    case_name);

TEST(PipelineSchedule, SchedulesThatCannotRunAreRefusedNamingTheFix) {
  EXPECT_NE(testing::error_of([] { make_pipeline_schedule(ScheduleKind::interleaved, 4, 6, 2); }).find("use 4 or 8 micro-batches"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make_pipeline_schedule(ScheduleKind::one_f_one_b, 4, 8, 2); }).find("--pipeline-schedule interleaved"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { make_pipeline_schedule(ScheduleKind::gpipe, 0, 8, 1); }).find("--pp 0"), std::string::npos);
  EXPECT_NE(testing::error_of([] { make_pipeline_schedule(ScheduleKind::gpipe, 2, 0, 1); }).find("at least 1 micro-batch"),
            std::string::npos);
  EXPECT_NE(testing::error_of([] { parse_schedule_kind("zb"); }).find("gpipe, 1f1b, interleaved or zero-bubble"),
            std::string::npos);
  EXPECT_EQ(parse_schedule_kind("zero-bubble"), ScheduleKind::zero_bubble);
}

TEST(PipelineSchedule, TheSimulatorCatchesADeadlockAndALostSend) {
  PipelineSchedule s = make_pipeline_schedule(ScheduleKind::one_f_one_b, 2, 2);
  // Rank 0: F m0, send-act m0, F m1, send-act m1, recv-grad m0, ... Waiting for micro-batch 0's gradient
  // before sending its activation leaves both ranks waiting on each other.
  std::vector<Action>& first = s.ranks[0];
  ASSERT_EQ(first[1].kind, ActionKind::send_activation);
  ASSERT_EQ(first[4].kind, ActionKind::recv_gradient);
  std::swap(first[1], first[4]);
  const std::string deadlock = testing::error_of([&] { simulate_pipeline(s); });
  EXPECT_NE(deadlock.find("deadlocks"), std::string::npos) << deadlock;
  PipelineSchedule lost = make_pipeline_schedule(ScheduleKind::gpipe, 2, 1);
  lost.ranks[0].push_back({ActionKind::send_activation, 0, 0, 1});
  const std::string message = testing::error_of([&] { simulate_pipeline(lost); });
  EXPECT_NE(message.find("never received"), std::string::npos) << message;
}

TEST(PipelineSchedule, TimelineDrawings) {
  const PipelineTimeline t = simulate_pipeline(make_pipeline_schedule(ScheduleKind::one_f_one_b, 2, 2));
  // F=1, B=2: rank 0 F0 F1 . . B0 B0 . B1 B1 ... drawn in unit cells.
  const std::string text = timeline_text(t);
  EXPECT_NE(text.find("rank 0 |FF"), std::string::npos) << text;
  EXPECT_NE(text.find("rank 1 |.F"), std::string::npos) << text;
  const std::string svg = timeline_svg(t, "1f1b");
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_NE(svg.find("</svg>"), std::string::npos);
}

}  // namespace
}  // namespace tessera
