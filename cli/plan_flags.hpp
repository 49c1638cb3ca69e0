#pragma once
// The flags that name the plan a command runs (--plan FILE or --policy NAME, and --encode), shared
// by `simulate` and `validate` and parsed the same way in both.
#include <string>
#include <string_view>

#include <CLI/CLI.hpp>

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

}  // namespace memplan::cli
