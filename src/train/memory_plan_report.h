// How `tessera plan memory` shows a MemoryPlan: a table of bytes per pipeline stage (one row per
// kind of memory, GiB), whether the largest rank fits the device and which flags would make it fit;
// or the same as JSON (bytes) for scripts. And how `tessera plan layout` shows its candidates: one
// line per layout (its flags and its largest rank's bytes), best first.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/layout_search.h"
#include "train/memory_plan.h"

namespace tessera {

// `title` names the model; `fixes` is memory_plan_fixes()'s answer (used when the plan does not fit).
std::string memory_plan_text(const MemoryPlan& plan, const std::string& title, const std::vector<std::string>& fixes);
nlohmann::json memory_plan_json(const MemoryPlan& plan, const std::string& title, const std::vector<std::string>& fixes);
// The first `top` of `found` (search_layouts' answer for `world` ranks), and the command line of the best.
std::string layout_search_text(const std::vector<LayoutCandidate>& found, const std::string& title, int world,
                               size_t top);
nlohmann::json layout_search_json(const std::vector<LayoutCandidate>& found, const std::string& title, int world,
                                  size_t top);
// The flags that choose a candidate's layout: "--dp 8 --tp 1 ... --micro-batch-size 4".
std::string layout_flags(const TrainConfig& c);

}  // namespace tessera
