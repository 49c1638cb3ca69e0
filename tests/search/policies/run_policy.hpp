#pragma once
// A policy's decision on a workload and machine, its plan validated: what each policy test runs.
#include <catch2/catch.hpp>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/policies/policy.hpp"

namespace memplan::test {

inline search::PolicyDecision run_policy(const char* name, const sim::Workload& w,
                                         const sim::Machine& m) {
  search::Evaluator evaluator(w, m);
  const search::NetworkView view(w);
  const search::Policy* p = search::find_policy(name);
  REQUIRE(p != nullptr);
  search::PolicyDecision d = p->decide(evaluator, view);
  sim::validate_plan(d.plan, w, name);
  return d;
}

}  // namespace memplan::test
