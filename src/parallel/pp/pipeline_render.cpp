// Text and SVG drawings of a pipeline timeline (see pipeline_render.h).
#include "parallel/pp/pipeline_render.h"

#include <algorithm>
#include <cmath>
#include <sstream>

namespace tessera {
namespace {

char kind_letter(ActionKind k) {
  switch (k) {
    case ActionKind::forward: return 'F';
    case ActionKind::backward: return 'B';
    case ActionKind::backward_input: return 'b';
    case ActionKind::backward_weight: return 'W';
    default: return '?';
  }
}

const char* kind_colour(ActionKind k) {
  switch (k) {
    case ActionKind::forward: return "#4e79a7";
    case ActionKind::backward: return "#f28e2b";
    case ActionKind::backward_input: return "#e15759";
    case ActionKind::backward_weight: return "#76b7b2";
    default: return "#999999";
  }
}

double shortest_action(const PipelineTimeline& t) {
  double cell = 0;
  for (const auto& rank : t.ranks)
    for (const TimedAction& a : rank)
      if (a.end > a.start && (cell == 0 || a.end - a.start < cell)) cell = a.end - a.start;
  return cell > 0 ? cell : 1.0;
}

}  // namespace

std::string timeline_text(const PipelineTimeline& t) {
  const double cell = shortest_action(t);
  const size_t cells = size_t(std::llround(t.makespan / cell));
  std::ostringstream out;
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    std::string kinds(cells, '.'), micros(cells, ' ');
    for (const TimedAction& a : t.ranks[r]) {
      const size_t begin = size_t(std::llround(a.start / cell)), end = size_t(std::llround(a.end / cell));
      for (size_t i = begin; i < std::min(end, cells); ++i) {
        kinds[i] = kind_letter(a.action.kind);
        micros[i] = char('0' + a.action.micro % 10);
      }
    }
    out << "rank " << r << " |" << kinds << "|\n       |" << micros << "|\n";
  }
  return out.str();
}

std::string timeline_svg(const PipelineTimeline& t, const std::string& title) {
  const double unit = 960.0 / std::max(t.makespan, 1e-9), row = 28, top = 34, left = 60;
  std::ostringstream out;
  out << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << left + 980 << "\" height=\""
      << top + row * double(t.ranks.size()) + 30 << "\" font-family=\"sans-serif\" font-size=\"11\">\n"
      << "<text x=\"" << left << "\" y=\"20\" font-size=\"14\">" << title << "</text>\n";
  for (size_t r = 0; r < t.ranks.size(); ++r) {
    const double y = top + row * double(r);
    out << "<text x=\"4\" y=\"" << y + 17 << "\">rank " << r << "</text>\n";
    for (const TimedAction& a : t.ranks[r]) {
      const double x = left + a.start * unit, w = (a.end - a.start) * unit;
      out << "<rect x=\"" << x << "\" y=\"" << y << "\" width=\"" << w << "\" height=\"" << row - 4 << "\" fill=\""
          << kind_colour(a.action.kind) << "\" stroke=\"white\"><title>" << action_text(a.action) << "</title></rect>\n";
      if (w >= 12)
        out << "<text x=\"" << x + w / 2 << "\" y=\"" << y + 16 << "\" text-anchor=\"middle\" fill=\"white\">"
            << a.action.micro << "</text>\n";
    }
  }
  out << "<text x=\"" << left << "\" y=\"" << top + row * double(t.ranks.size()) + 18
      << "\">F forward, B backward, Bi input gradient, W weight gradient (blue, orange, red, teal); "
         "numbers are micro-batches</text>\n</svg>\n";
  return out.str();
}

}  // namespace tessera
