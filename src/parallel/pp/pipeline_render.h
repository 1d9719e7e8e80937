// A simulated pipeline timeline for people: text (two lines per rank, the action kind and the
// micro-batch in each time cell) and SVG (one bar per action, coloured by kind).
#pragma once

#include <string>

#include "parallel/pp/pipeline_simulator.h"

namespace tessera {

// Cells as long as the shortest compute action. Kinds: F forward, B backward, b input gradient,
// W weight gradient, . idle; the second line gives each cell's micro-batch (mod 10).
std::string timeline_text(const PipelineTimeline& timeline);

// A standalone SVG document; `title` is drawn above the bars.
std::string timeline_svg(const PipelineTimeline& timeline, const std::string& title);

}  // namespace tessera
