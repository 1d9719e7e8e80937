// How `tessera plan memory` shows a MemoryPlan: a table of bytes per pipeline stage (one row per
// kind of memory, GiB), whether the largest rank fits the device and which flags would make it fit;
// or the same as JSON (bytes) for scripts.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/memory_plan.h"

namespace tessera {

// `title` names the model; `fixes` is memory_plan_fixes()'s answer (used when the plan does not fit).
std::string memory_plan_text(const MemoryPlan& plan, const std::string& title, const std::vector<std::string>& fixes);
nlohmann::json memory_plan_json(const MemoryPlan& plan, const std::string& title, const std::vector<std::string>& fixes);

}  // namespace tessera
