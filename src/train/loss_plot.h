// A loss-curve picture: <out_dir>/loss.svg, train loss per step and validation loss at each eval
// (with a mixture of validation sources, each source's too), and beside it --choices' accuracy
// (acc_norm) at each eval, as llm.c plots HellaSwag; redrawn from the metrics whenever the run
// evaluates or ends. Plain SVG, viewable in a browser.
#pragma once

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

namespace tessera {

struct LossCurves {
  using Curve = std::vector<std::pair<int64_t, float>>;
  Curve train;                                // (step, loss)
  Curve val;                                  // (step, val_loss)
  std::map<std::string, Curve> val_by_source;  // (step, val_loss_by_source[source])
  Curve choices;                              // (step, choices_acc_norm)
  float choices_chance = NAN;                 // the accuracy of a guess, as last logged
};

// Reads the curves back from a metrics.jsonl file (missing file: empty curves); where a resumed run
// logged a step again, its later lines win.
LossCurves read_loss_curves(const std::filesystem::path& metrics_file);

// The SVG document of the curves.
std::string loss_plot_svg(const LossCurves& curves, const std::string& title);

}  // namespace tessera
