// SVG rendering of loss curves: axes with ticks, the train curve, validation points, and a line of
// points per validation source.
#include "train/loss_plot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>

#include <nlohmann/json.hpp>

namespace tessera {
namespace {

constexpr double kWidth = 720, kHeight = 420, kLeft = 60, kRight = 20, kTop = 40, kBottom = 50;

// Colours of the validation sources' curves (train and val take the first two of the same palette).
constexpr const char* kSourceColours[] = {"#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

std::string xml_escaped(const std::string& text) {
  std::string out;
  for (char c : text) {
    if (c == '<') out += "&lt;";
    else if (c == '>') out += "&gt;";
    else if (c == '&') out += "&amp;";
    else if (c == '"') out += "&quot;";
    else out += c;
  }
  return out;
}

std::string fmt(const char* pattern, double a, double b = 0, double c = 0, double d = 0) {
  char buffer[256];
  std::snprintf(buffer, sizeof buffer, pattern, a, b, c, d);
  return buffer;
}

}  // namespace

LossCurves read_loss_curves(const std::filesystem::path& metrics_file) {
  LossCurves curves;
  std::ifstream in(metrics_file);
  // A run resumed from an older checkpoint appends steps it had logged before: a step at or
  // before the last one drawn starts the curve again from there. Lines that are not metrics are skipped.
  auto add = [](LossCurves::Curve& curve, const nlohmann::json& step, const nlohmann::json& loss) {
    if (!step.is_number_integer() || !loss.is_number()) return;
    while (!curve.empty() && curve.back().first >= step.get<int64_t>()) curve.pop_back();
    curve.emplace_back(step.get<int64_t>(), loss.get<float>());
  };
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_object() || !j.contains("step")) continue;
    if (j.contains("loss")) add(curves.train, j["step"], j["loss"]);
    if (j.contains("val_loss")) add(curves.val, j["step"], j["val_loss"]);
    if (j.contains("val_loss_by_source") && j["val_loss_by_source"].is_object())
      for (const auto& [source, loss] : j["val_loss_by_source"].items()) add(curves.val_by_source[source], j["step"], loss);
  }
  return curves;
}

std::string loss_plot_svg(const LossCurves& curves, const std::string& title) {
  double max_step = 1, lo = INFINITY, hi = -INFINITY;
  std::vector<const LossCurves::Curve*> all = {&curves.train, &curves.val};
  for (const auto& [source, curve] : curves.val_by_source) all.push_back(&curve);
  for (const LossCurves::Curve* series : all)
    for (auto [step, loss] : *series) {
      if (!std::isfinite(loss)) continue;
      max_step = std::max(max_step, double(step));
      lo = std::min(lo, double(loss));
      hi = std::max(hi, double(loss));
    }
  if (!(lo < hi)) lo = (std::isfinite(lo) ? lo : 0) - 1, hi = lo + 2;
  const double pad = 0.05 * (hi - lo);
  lo -= pad, hi += pad;
  const double plot_w = kWidth - kLeft - kRight, plot_h = kHeight - kTop - kBottom;
  auto x = [&](double step) { return kLeft + plot_w * step / max_step; };
  auto y = [&](double loss) { return kTop + plot_h * (hi - loss) / (hi - lo); };

  std::string svg = fmt("<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%g\" height=\"%g\" font-family=\"sans-serif\" "
                        "font-size=\"12\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                        kWidth, kHeight);
  svg += "<text x=\"" + fmt("%g", kWidth / 2) + "\" y=\"24\" text-anchor=\"middle\" font-size=\"15\">" + title + "</text>\n";
  for (int i = 0; i <= 5; ++i) {
    double loss = lo + (hi - lo) * i / 5, step = max_step * i / 5;
    svg += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#ddd\"/>", kLeft, y(loss), kWidth - kRight, y(loss));
    svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"end\">%.2f</text>\n", kLeft - 6, y(loss) + 4, loss);
    svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">%.0f</text>\n", x(step), kHeight - kBottom + 18, step);
  }
  svg += fmt("<text x=\"%g\" y=\"%g\" text-anchor=\"middle\">step</text>\n", kLeft + plot_w / 2, kHeight - 12);
  svg += fmt("<rect x=\"%g\" y=\"%g\" width=\"%g\" height=\"%g\" fill=\"none\" stroke=\"#444\"/>\n", kLeft, kTop, plot_w,
             plot_h);
  if (!curves.train.empty()) {
    svg += "<polyline fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\" points=\"";
    for (auto [step, loss] : curves.train)
      if (std::isfinite(loss)) svg += fmt("%.1f,%.1f ", x(double(step)), y(loss));
    svg += "\"/>\n";
  }
  for (auto [step, loss] : curves.val)
    if (std::isfinite(loss)) svg += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"#d62728\"/>\n", x(double(step)), y(loss));
  svg += fmt("<line x1=\"%g\" y1=\"%g\" x2=\"%g\" y2=\"%g\" stroke=\"#1f77b4\" stroke-width=\"2\"/>", kWidth - 170, kTop + 14,
             kWidth - 150, kTop + 14);
  svg += fmt("<text x=\"%g\" y=\"%g\">train loss</text>", kWidth - 145, kTop + 18);
  svg += fmt("<circle cx=\"%g\" cy=\"%g\" r=\"3.5\" fill=\"#d62728\"/>", kWidth - 160, kTop + 32);
  svg += fmt("<text x=\"%g\" y=\"%g\">val loss</text>\n", kWidth - 145, kTop + 36);
  // Each validation source: its points joined by a thin line, and a legend line naming it.
  size_t index = 0;
  for (const auto& [source, curve] : curves.val_by_source) {
    const char* colour = kSourceColours[index % std::size(kSourceColours)];
    svg += std::string("<polyline fill=\"none\" stroke=\"") + colour + "\" stroke-width=\"1\" points=\"";
    for (auto [step, loss] : curve)
      if (std::isfinite(loss)) svg += fmt("%.1f,%.1f ", x(double(step)), y(loss));
    svg += "\"/>\n";
    for (auto [step, loss] : curve)
      if (std::isfinite(loss))
        svg += fmt("<circle cx=\"%.1f\" cy=\"%.1f\" r=\"2.5\" fill=\"", x(double(step)), y(loss)) + colour + "\"/>\n";
    const double legend_y = kTop + 50 + 14 * double(index);
    svg += fmt("<circle cx=\"%g\" cy=\"%g\" r=\"2.5\" fill=\"", kWidth - 160, legend_y - 4) + colour + "\"/>";
    svg += fmt("<text x=\"%g\" y=\"%g\" font-size=\"10\">", kWidth - 145, legend_y) + xml_escaped(source) + "</text>\n";
    ++index;
  }
  svg += "</svg>\n";
  return svg;
}

}  // namespace tessera
