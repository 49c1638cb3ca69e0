#pragma once
// Plan files (JSON, docs/simulator.md "Plan files"): reading with validation against the workload
// the plan is for, and writing. Maps may be named by tensor name or id, in any order; maps a file
// does not mention are kept. Every problem is an InputError naming the file and the JSON path.
#include <filesystem>
#include <string>
#include <string_view>

#include <nlohmann/json_fwd.hpp>

#include "core/plan.hpp"

namespace memplan::sim {

inline constexpr std::string_view kPlanFormatName = "memplan-plan";
inline constexpr int kPlanFormatVersion = 1;

Plan read_plan(const std::filesystem::path& path, const Workload& workload);
Plan parse_plan(std::string_view text, std::string_view source, const Workload& workload);
Plan plan_from_json(const nlohmann::json& document, std::string_view source,
                    const Workload& workload);

/// One map per line, in tensor id order; stable (write -> read -> write gives the same bytes).
std::string write_plan(const Plan& plan, const Workload& workload);

}  // namespace memplan::sim
