#pragma once
// Plan files (JSON, docs/simulator.md "Plan files"): reading with validation against the workload
// the plan is for, and writing. Maps may be named by tensor name or id, in any order; maps a file
// does not mention are kept. Every problem is an InputError naming the file and the JSON path.
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/job.hpp"
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

// A job's plans, one per rank (docs/simulator.md "Plan files"): the ranks of a job may each need
// a plan of their own (a rank with no wait at a collective pays for a swap its slower peer hides).
// {"format": "memplan-job-plan", "version": 1, "ranks": [{"rank": R, "plan": {a plan file}}, ...]}
// with one entry per rank, in the job's order.
inline constexpr std::string_view kJobPlanFormatName = "memplan-job-plan";

/// The plans in `path` for each rank of `job`, in its order: a job plan file's own plan per rank,
/// or a plan file's one plan for every rank (validated against each).
std::vector<Plan> read_job_plans(const std::filesystem::path& path, const Job& job);
/// A job plan file of `plans` (one per rank of `job`, in its order).
std::string write_job_plan(const std::vector<Plan>& plans, const Job& job);

}  // namespace memplan::sim
