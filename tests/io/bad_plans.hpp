#pragma once
// The catalogue of bad plan files for traces/resnet_tiny.json, shared by the library test and the
// CLI test: each is a plan with one thing wrong and a phrase the error message must contain.
#include <string>
#include <vector>

#include "core/workload.hpp"

namespace memplan::test {

struct BadPlan {
  std::string name;
  std::string text;
  std::string problem;  // must appear in the message
};

/// A plan file for `workload` whose maps array is `maps_json`.
std::string plan_text(const sim::Workload& workload, const std::string& maps_json);

/// The bad plans for `w`, the resnet_tiny trace.
std::vector<BadPlan> bad_plans(const sim::Workload& w);

}  // namespace memplan::test
