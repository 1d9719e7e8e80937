// SVG rendering of loss curves: axes with ticks, the train curve, validation points, and a line of
// points per validation source; --choices' accuracy in a second panel beside them.
#include "train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>
#include <limits>

#include <nlohmann/json.hpp>

#include "train/utf8_stream.h"

namespace tessera {
namespace {

constexpr double kWidth = 720, kHeight = 420, kLeft = 60, kRight = 20, kTop = 40, kBottom = 50;

// Colours of the validation sources' curves (train and val take the first two of the same palette).
constexpr const char* kSourceColours[] = {"#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

// Text as XML character data: valid UTF-8 (a path's stray bytes as U+FFFD), markup escaped, and the
// control characters XML 1.0 forbids as '?'.
std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : valid_utf8(text)) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') out += '?';
    else out += c;
  }
  return out;
}

std::string fmt(const char* pattern, double a, double b = 0, double c = 0, double d = 0) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, pattern, a, b, c, d);
  return buffer;
}

// Decimals that tell apart ticks `spacing` apart (2 at least).
int tick_decimals(double spacing) {
  return spacing > 0 ? std::clamp(int(std::ceil(-std::log10(spacing))) + 1, 2, 8) : 2;
}

using Points = std::vector<std::pair<double, double>>;  // (x, y) in the picture

// A curve's points joined by a line; a single point (a one-step run) is a dot, as a polyline of one
// point draws nothing.
std::string curve_svg(const Points& points, const char* colour, double width) {
  if (points.empty()) return "";
  if (points.size() == 1)
    return fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"", points[0].first, points[0].second) + colour + "\"/>\n";
  std::string svg = std::string("<polyline fill=\"none\" stroke=\"") + colour + "\" stroke-width=\"" + fmt("%g", width) +
                    "\" points=\"";
  for (auto [x, y] : points) svg += fmt("%.1f,%.1f ", x, y);
  return svg + "\"/>\n";
}

// One plot of the picture: steps 0..max_step across, values lo..hi up, its frame `left` pixels in.
struct Panel {
  double left, lo, hi, max_step;
  double plot_w() const { return kWidth - kLeft - kRight; }
  double plot_h() const { return kHeight - kTop - kBottom; }
  double x(double step) const { return left + kLeft + plot_w() * step / max_step; }
  double y(double value) const { return kTop + plot_h() * (hi - value) / (hi - lo); }
  Points points(const LossCurves::Curve& curve) const {  // the finite ones
    Points points;
    for (auto [step, value] : curve)
      if (std::isfinite(value)) points.emplace_back(x(double(step)), y(value));
    return points;
  }
};

// The last step with a finite value in any of `curves` (1 at least).
double last_step(const std::vector<const LossCurves::Curve*>& curves) {
  double max_step = 1;
  for (const LossCurves::Curve* curve : curves)
    for (auto [step, value] : *curve)
      if (std::isfinite(value)) max_step = std::max(max_step, double(step));
  return max_step;
}

// A panel `left` pixels in whose values span the finite ones of `curves`, padded by 5% each way.
Panel panel_for(double left, const std::vector<const LossCurves::Curve*>& curves, double max_step) {
  double lo = INFINITY, hi = -INFINITY;
  for (const LossCurves::Curve* curve : curves)
    for (auto [step, value] : *curve) {
      if (!std::isfinite(value)) continue;
      lo = std::min(lo, double(value));
      hi = std::max(hi, double(value));
    }
  if (!(lo < hi)) lo = (std::isfinite(lo) ? lo : 0) - 1, hi = lo + 2;
  const double pad = 0.05 * (hi - lo);
  return {left, lo - pad, hi + pad, max_step};
}

// The white ground of a legend of `lines` lines from `left` to the picture's right edge, at the top.
std::string legend_ground(double left, size_t lines) {
  return fmt("<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"white\" fill-opacity=\"0.85\"/>\n", left,
             kTop + 4, kWidth * std::ceil(left / kWidth) - kRight - 4 - left, 14.0 * double(lines) + 8);
}

// A panel's grid and value labels (five intervals), step ticks (five at most: steps are whole
// numbers, so a short run has fewer) and frame.
std::string frame_svg(const Panel& p) {
  std::string svg;
  const double right = p.left + kWidth - kRight;
  const std::string value_label = "<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%." +
                                  std::to_string(tick_decimals((p.hi - p.lo) / 5)) + "f</text>\n";
  for (int i = 0; i <= 5; ++i) {
    const double value = p.lo + (p.hi - p.lo) * i / 5;
    svg += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>", p.left + kLeft, p.y(value), right,
               p.y(value));
    svg += fmt(value_label.c_str(), p.left + kLeft - 6, p.y(value) + 4, value);
  }
  const int step_ticks = int(std::min(5.0, p.max_step));
  for (int i = 0; i <= step_ticks; ++i) {
    const double step = std::round(p.max_step * i / step_ticks);
    svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%.0f</text>\n", p.x(step), kHeight - kBottom + 18, step);
  }
  svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n", p.left + kLeft + p.plot_w() / 2, kHeight - 12);
  svg += fmt("<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#444\"/>\n", p.left + kLeft, kTop,
             p.plot_w(), p.plot_h());
  return svg;
}

}  // namespace

LossCurves read_loss_curves(const std::filesystem::path& metrics_file) {
  LossCurves curves;
  std::ifstream in(metrics_file);
  // A run resumed from an older checkpoint appends steps it had logged before: a train line at or
  // before the last one read drops every curve's points from its step on (the run that logged them
  // went on from an older state), its loss a number or not (a skipped step logs null). Lines that
  // are not metrics are skipped.
  int64_t last_train_step = std::numeric_limits<int64_t>::min();
  auto drop_from = [](LossCurves::Curve& curve, int64_t step) {
    while (!curve.empty() && curve.back().first >= step) curve.pop_back();
  };
  auto add = [&](LossCurves::Curve& curve, int64_t step, const nlohmann::json& loss) {
    drop_from(curve, step);
    if (loss.is_number()) curve.emplace_back(step, loss.get<float>());
  };
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step") || !j["step"].is_number_integer()) continue;
    const int64_t step = j["step"].get<int64_t>();
    if (j.contains("loss")) {
      if (step <= last_train_step) {
        drop_from(curves.val, step);
        drop_from(curves.choices, step);
        for (auto& [source, curve] : curves.val_by_source) drop_from(curve, step);
      }
      last_train_step = step;
      add(curves.train, step, j["loss"]);
    }
    if (j.contains("val_loss")) add(curves.val, step, j["val_loss"]);
    if (j.contains("choices_acc_norm")) add(curves.choices, step, j["choices_acc_norm"]);
    if (j.contains("choices_chance") && j["choices_chance"].is_number()) curves.choices_chance = j["choices_chance"];
    if (j.contains("val_loss_by_source") && j["val_loss_by_source"].is_object())
      for (const auto& [source, loss] : j["val_loss_by_source"].items()) add(curves.val_by_source[source], step, loss);
  }
  return curves;
}

std::string loss_plot_svg(const LossCurves& curves, const std::string& title) {
  std::vector<const LossCurves::Curve*> losses = {&curves.train, &curves.val};
  for (const auto& [source, curve] : curves.val_by_source) losses.push_back(&curve);
  const bool accuracy = !curves.choices.empty();
  const double max_step = last_step({&curves.train, &curves.val, &curves.choices});
  const Panel loss = panel_for(0, losses, max_step);
  const double width = accuracy ? 2 * kWidth : kWidth;

  std::string svg = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
                        "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                        width, kHeight);
  svg += "<text x=\"" + fmt("%g", width / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" +
         xml_escaped(title) + "</text>\n";
  svg += frame_svg(loss);
  svg += curve_svg(loss.points(curves.train), "#1f77b4", 1.5);
  for (auto [cx, cy] : loss.points(curves.val)) svg += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#d62728\"/>\n", cx, cy);
  // Each validation source: its points joined by a thin line.
  size_t index = 0;
  for (const auto& [source, curve] : curves.val_by_source) {
    const char* colour = kSourceColours[index++ % std::size(kSourceColours)];
    const Points points = loss.points(curve);
    if (points.size() > 1) svg += curve_svg(points, colour, 1);
    for (auto [cx, cy] : points) svg += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"", cx, cy) + colour + "\"/>\n";
  }
  // The legend, on a white ground over whatever curve passes beneath: a line per curve and source.
  svg += legend_ground(kWidth - 176, 2 + curves.val_by_source.size());
  svg += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#1f77b4\" stroke-width=\"2\"/>", kWidth - 170, kTop + 14,
             kWidth - 150, kTop + 14);
  svg += fmt("<text x=\"%g\" y=\"%g\">train loss</text>", kWidth - 145, kTop + 18);
  svg += fmt("<circle cx=\"%g\" cy=\"%g\" r=\"3.5\" fill=\"#d62728\"/>", kWidth - 160, kTop + 32);
  svg += fmt("<text x=\"%g\" y=\"%g\">val loss</text>\n", kWidth - 145, kTop + 36);
  index = 0;
  for (const auto& [source, curve] : curves.val_by_source) {
    const char* colour = kSourceColours[index % std::size(kSourceColours)];
    const double legend_y = kTop + 50 + 14 * double(index++);
    svg += fmt("<circle cx=\"%g\" cy=\"%g\" r=\"2.5\" fill=\"", kWidth - 160, legend_y - 4) + colour + "\"/>";
    svg += fmt("<text x=\"%g\" y=\"%g\" font-size=\"10\">", kWidth - 145, legend_y) + xml_escaped(source) + "</text>\n";
  }
  if (accuracy) {  // --choices' acc_norm in a panel of its own, on the right, above a guess's (dashed)
    const bool chance = std::isfinite(curves.choices_chance);
    const LossCurves::Curve guess = {{0, curves.choices_chance}};  // not finite: no part of the range
    const Panel acc = panel_for(kWidth, {&curves.choices, &guess}, max_step);
    svg += frame_svg(acc);
    const char* dashed = "stroke=\"#999\" stroke-dasharray=\"5 4\"/>";
    if (chance)
      svg += fmt("<line x1=\"%g\" y1=\"%.1f\" x2=\"%g\" y2=\"%.1f\" ", acc.x(0), acc.y(curves.choices_chance),
                 acc.x(max_step), acc.y(curves.choices_chance)) + dashed + "\n";
    const Points points = acc.points(curves.choices);
    svg += curve_svg(points, "#ff7f0e", 1.5);
    for (auto [cx, cy] : points) svg += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"#ff7f0e\"/>\n", cx, cy);
    svg += legend_ground(2 * kWidth - 204, chance ? 2 : 1);
    svg += fmt("<circle cx=\"%g\" cy=\"%g\" r=\"3\" fill=\"#ff7f0e\"/>", 2 * kWidth - 190, kTop + 14);
    svg += fmt("<text x=\"%g\" y=\"%g\">--choices acc_norm</text>\n", 2 * kWidth - 175, kTop + 18);
    if (chance) {
      svg += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" ", 2 * kWidth - 198, kTop + 32, 2 * kWidth - 182,
                 kTop + 32) + dashed;
      svg += fmt("<text x=\"%g\" y=\"%g\">a guess</text>\n", 2 * kWidth - 175, kTop + 36);
    }
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera
