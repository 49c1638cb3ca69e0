#pragma once
// The flags that name the plan a command runs (--plan FILE or --policy NAME, and --encode), shared
// by `simulate` and `validate` and parsed the same way in both.
#include <string>
#include <string_view>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/job.hpp"
#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"

namespace memplan::cli {

struct PlanFlags {
  std::string plan;
  std::string policy;
  std::string encode;
};

void add_plan_flags(CLI::App& command, PlanFlags& flags);

/// The plan file read, or the policy's plan (search/ policies first, then the simulator's
/// swap-all and recompute-all), with the encodings applied; validated. Throws InputError naming
/// `command` when neither --plan nor --policy is given, or the bad flag.
sim::Plan plan_from_flags(const sim::Workload& workload, const sim::Machine& machine,
                          const PlanFlags& flags, std::string_view command);

/// The same for each rank of `job` (rank r on machines[r]): a job plan file's own plan per rank,
/// a plan file's one plan for every rank, or the policy's decision on each rank.
std::vector<sim::Plan> plans_from_flags(const sim::Job& job,
                                        const std::vector<sim::Machine>& machines,
                                        const PlanFlags& flags, std::string_view command);

}  // namespace memplan::cli
