// loss.svg from metrics.jsonl: a resumed run's repeated steps win (its validation points too), each
// validation source becomes a curve of its own with its name (XML-escaped) in the legend, and lines
// that are not metrics are skipped; the title is escaped, one step shows as a dot, and axis labels
// never repeat a value. --choices' accuracy gets a panel of its own, only when logged.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "support/test_support.h"
#include "train/loss_plot.h"

namespace tessera {
namespace {

TEST(LossPlot, ReadsTrainValidationAndEachSourceCurve) {
  const std::filesystem::path file = testing::scratch_dir() / "metrics.jsonl";
  testing::write_text(file,
                      "{\"step\": 1, \"loss\": 5.0}\n"
                      "{\"step\": 2, \"loss\": 4.5}\n"
                      "{\"step\": 2, \"val_loss\": 4.6, \"val_loss_by_source\": {\"a&b/*.bin\": 4.2, \"code/*.bin\": 5.8}}\n"
                      "not json\n"
                      "{\"step\": 2, \"loss\": 4.4}\n"  // resumed from step 1: step 2 again
                      "{\"step\": 2, \"val_loss\": 4.55, \"val_loss_by_source\": {\"a&b/*.bin\": 4.15, \"code/*.bin\": 5.7}}\n"
                      "{\"step\": 3, \"loss\": 4.0}\n"
                      "{\"step\": 3, \"val_loss\": 4.1, \"val_loss_by_source\": {\"a&b/*.bin\": 3.9, \"code/*.bin\": 4.9}}\n");
  const LossCurves curves = read_loss_curves(file);
  ASSERT_EQ(curves.train.size(), 3u);
  EXPECT_FLOAT_EQ(curves.train[1].second, 4.4f);
  ASSERT_EQ(curves.val.size(), 2u);
  EXPECT_FLOAT_EQ(curves.val[0].second, 4.55f);
  ASSERT_EQ(curves.val_by_source.size(), 2u);
  const LossCurves::Curve& code = curves.val_by_source.at("code/*.bin");
  ASSERT_EQ(code.size(), 2u);
  EXPECT_EQ(code[1].first, 3);
  EXPECT_FLOAT_EQ(code[1].second, 4.9f);

  const std::string svg = loss_plot_svg(curves, "run");
  EXPECT_TRUE(testing::contains(svg, ">a&amp;b/*.bin</text>")) << svg;
  EXPECT_TRUE(testing::contains(svg, ">code/*.bin</text>")) << svg;
  size_t polylines = 0;
  for (size_t at = svg.find("<polyline"); at != std::string::npos; at = svg.find("<polyline", at + 1)) ++polylines;
  EXPECT_EQ(polylines, 3u);  // train and the two sources
  EXPECT_TRUE(testing::contains(svg, "width=\"720\"")) << svg;  // one panel
  EXPECT_FALSE(testing::contains(svg, "acc_norm")) << svg;
}

// choices_acc_norm at each validation (with or without val_loss) is a curve on a panel to the right
// of the losses, on the same steps, above a dashed line at a guess's accuracy; a resume drops its later
// points as it does the losses'. Older logs, without choices_chance, draw no line.
TEST(LossPlot, ChoicesAccuracyIsASecondPanel) {
  const std::filesystem::path file = testing::scratch_dir() / "metrics.jsonl";
  testing::write_text(file,
                      "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.5}\n"
                      "{\"step\": 2, \"choices_acc\": 0.25, \"choices_acc_norm\": 0.26, \"choices_loss\": 5.1}\n"
                      "{\"step\": 3, \"loss\": 4.0}\n{\"step\": 4, \"loss\": 3.5}\n"
                      "{\"step\": 4, \"val_loss\": 3.6, \"choices_acc\": 0.3, \"choices_acc_norm\": 0.32}\n");
  LossCurves curves = read_loss_curves(file);
  const LossCurves::Curve choices = {{2, 0.26f}, {4, 0.32f}};
  EXPECT_EQ(curves.choices, choices);
  const std::string svg = loss_plot_svg(curves, "run");
  EXPECT_TRUE(testing::contains(svg, "width=\"1440\"")) << svg;
  EXPECT_TRUE(testing::contains(svg, ">--choices acc_norm</text>")) << svg;
  EXPECT_FALSE(testing::contains(svg, "a guess")) << svg;
  // Its points: step 2 of 4 halfway across the right panel (720 + 60 + 640 / 2), step 4 at its edge;
  // 0.32 at the top of its padded range (0.257..0.323 over 40..370: y 55.0), 0.26 at its foot.
  EXPECT_TRUE(testing::contains(svg, "<polyline fill=\"none\" stroke=\"#ff7f0e\" stroke-width=\"1.5\" "
                                     "points=\"1100.0,355.0 1420.0,55.0 \"/>")) << svg;
  // With a guess's accuracy logged (0.25), the range reaches down to it: 0.2465..0.3235.
  curves.choices_chance = 0.25f;
  const std::string guessed = loss_plot_svg(curves, "run");
  EXPECT_TRUE(testing::contains(guessed, ">a guess</text>")) << guessed;
  EXPECT_TRUE(testing::contains(guessed, "<line x1=\"780\" y1=\"355.0\" x2=\"1420\" y2=\"355.0\" stroke=\"#999\"")) << guessed;
  EXPECT_TRUE(testing::contains(guessed, "points=\"1100.0,312.1 1420.0,55.0 \"")) << guessed;
  testing::write_text(file, testing::read_text(file) + "{\"step\": 5, \"choices_acc_norm\": 0.3, \"choices_chance\": 0.25}\n"
                                                       "{\"step\": 3, \"loss\": 3.9}\n");  // resumed from step 2
  curves = read_loss_curves(file);
  EXPECT_EQ(curves.choices, LossCurves::Curve({{2, 0.26f}}));
  EXPECT_FLOAT_EQ(curves.choices_chance, 0.25f);
}

// A run logged steps 1-4 with validation at 2 and 4, then resumed from step 2's checkpoint: step 3
// again (a skipped step: loss null) drops the first run's steps 3-4 and its validation at 4.
TEST(LossPlot, AResumeDropsTheFirstRunsLaterPointsOfEveryCurve) {
  const std::filesystem::path file = testing::scratch_dir() / "metrics.jsonl";
  testing::write_text(file,
                      "{\"step\": 1, \"loss\": 5.0}\n{\"step\": 2, \"loss\": 4.0}\n{\"step\": 2, \"val_loss\": 4.5}\n"
                      "{\"step\": 3, \"loss\": 3.0}\n{\"step\": 4, \"loss\": 2.0}\n{\"step\": 4, \"val_loss\": 2.5}\n"
                      "{\"step\": 3, \"loss\": null, \"skipped\": true}\n{\"step\": 4, \"loss\": 3.5}\n");
  const LossCurves curves = read_loss_curves(file);
  const LossCurves::Curve train = {{1, 5.0f}, {2, 4.0f}, {4, 3.5f}};
  EXPECT_EQ(curves.train, train);
  const LossCurves::Curve val = {{2, 4.5f}};
  EXPECT_EQ(curves.val, val);
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

TEST(LossPlot, OneStepIsADotAndTheTitleIsEscaped) {
  LossCurves one;
  one.train = {{1, 6.25f}};
  const std::string svg = loss_plot_svg(one, "Tessera: runs/a&b <1>");
  EXPECT_TRUE(testing::contains(svg, ">Tessera: runs/a&amp;b &lt;1&gt;</text>")) << svg;
  EXPECT_EQ(count_of(svg, "<polyline"), 0u);
  EXPECT_TRUE(testing::contains(svg, "<circle cx=\"700.0\"")) << svg;  // step 1 of 1: the plot's right edge
  // Ticks: steps 0 and 1 only (not 0, 0, 0, 1, 1, 1), and losses close together keep their digits.
  EXPECT_EQ(count_of(svg, "text-anchor=\"middle\">0</text>"), 1u) << svg;
  EXPECT_EQ(count_of(svg, "text-anchor=\"middle\">1</text>"), 1u) << svg;
  LossCurves close;
  close.train = {{1, 2.0010f}, {2, 2.0020f}, {3, 2.0030f}};
  const std::string near = loss_plot_svg(close, "run");
  std::set<std::string> labels;  // the loss axis's six
  for (size_t at = near.find("\"end\">"); at != std::string::npos; at = near.find("\"end\">", at + 1))
    labels.insert(near.substr(at + 6, near.find('<', at) - at - 6));
  EXPECT_EQ(labels.size(), 6u) << near;
  EXPECT_TRUE(labels.contains("2.00134")) << near;  // 2.0009 + 0.00044: the padded range over five
  // Not finite everywhere: an empty, still well-formed plot; a path's stray byte becomes U+FFFD.
  LossCurves nan;
  nan.train = {{1, NAN}, {2, INFINITY}};
  const std::string blank = loss_plot_svg(nan, "bad\xFF\x01");
  EXPECT_EQ(count_of(blank, "<polyline"), 0u);
  EXPECT_TRUE(testing::contains(blank, ">bad\xEF\xBF\xBD?</text>")) << blank;
}

}  // namespace
}  // namespace tessera
