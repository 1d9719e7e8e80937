// loss.svg from metrics.jsonl: a resumed run's repeated steps win, each validation source becomes a
// curve of its own with its name (XML-escaped) in the legend, and lines that are not metrics are skipped.
#include <gtest/gtest.h>

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
                      "{\"step\": 3, \"loss\": 4.0}\n"
                      "{\"step\": 3, \"val_loss\": 4.1, \"val_loss_by_source\": {\"a&b/*.bin\": 3.9, \"code/*.bin\": 4.9}}\n");
  const LossCurves curves = read_loss_curves(file);
  ASSERT_EQ(curves.train.size(), 3u);
  EXPECT_FLOAT_EQ(curves.train[1].second, 4.4f);
  ASSERT_EQ(curves.val.size(), 2u);
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
}

}  // namespace
}  // namespace tessera
