// FSDP's reshard and backward prefetch as the search's variables (Note [FSDP's setting in a plan]
// in core/fsdp_setting.hpp, Note [Re-running a side-stream op] in sim/lowering.cpp), on the zoo's
// small GPT trained with FSDP over 4 ranks: the standard settings as rows only where parameters
// are gathered, the oracle's answers for plans that regather units against a lowering and an
// engine run, and the search fitting where no standard setting does.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/fsdp_setting.hpp"
#include "core/interconnect.hpp"
#include "search/engine/plan_search.hpp"
#include "search/oracle/evaluator.hpp"
#include "search/policies/named_plan.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "sim/simulation.hpp"
#include "zoo/data_parallel.hpp"
#include "zoo/zoo.hpp"

using namespace memplan;
using sim::Action;
using sim::Bytes;
using sim::Plan;
using sim::Workload;

namespace {

// One rank of the zoo's 4-layer GPT (64 wide, 64 tokens, batch 2, Adam) under FSDP FULL_SHARD
// over 4 ranks, prefetch 1: a root and four block units.
Workload sharded_gpt() {
  zoo::ZooRequest request;
  request.model = "gpt";
  request.device = "a100-40gb";
  request.options.batch = 2;
  request.options.transformer.layers = 4;
  request.options.transformer.hidden = 64;
  request.options.transformer.heads = 4;
  request.options.transformer.sequence = 64;
  request.options.transformer.vocab = 512;
  request.options.optimizer = zoo::Optimizer::kAdam;
  zoo::DataParallel dp;
  dp.strategy = zoo::DataParallel::Strategy::kFullShard;
  dp.world_size = 4;
  const auto job = zoo::data_parallel_job(zoo::make_workload(request), dp,
                                          sim::make_interconnect("nvlink3", {}, 8));
  return job.ranks.front();
}

sim::Machine machine_of(Bytes memory) {
  sim::Machine m;
  m.memory_bytes = memory;
  return m;
}

Bytes peak_of(const Workload& w, const Plan& plan) {
  const auto s = sim::simulate_plan(w, plan, machine_of(Bytes{1} << 40));
  REQUIRE(s.timeline.feasible);
  return s.timeline.peak_bytes;
}

}  // namespace

TEST_CASE("FSDP's settings are rows where parameters are gathered, and every plan takes the job's",
          "[search][fsdp]") {
  const Workload w = sharded_gpt();
  const search::NetworkView view(w);
  const std::vector<std::size_t> units = sim::gathered_parameter_maps(view.feature_maps(), w);
  REQUIRE(units.size() == 5);  // the root and four blocks
  std::vector<std::string> names;
  for (const auto& p : search::policies_for(view)) names.emplace_back(p.name);
  CHECK(std::count(names.begin(), names.end(), "fsdp-full-shard") == 1);
  CHECK(std::count(names.begin(), names.end(), "fsdp-shard-grad-op") == 1);
  // The job is FULL_SHARD: in-core and swap-all regather the four blocks (not the root), as the
  // fsdp-full-shard row does; fsdp-shard-grad-op keeps every unit.
  const auto regathered = [&](const Plan& plan) {
    return std::count_if(units.begin(), units.end(), [&](std::size_t m) {
      return plan.decisions[m].action == Action::kRecompute;
    });
  };
  const sim::Machine m = machine_of(Bytes{1} << 40);
  CHECK(regathered(search::named_plan("in-core", w, m)) == 4);
  CHECK(regathered(search::named_plan("swap-all", w, m)) == 4);
  CHECK(regathered(search::named_plan("vdnn-all", w, m)) == 4);
  CHECK(regathered(search::named_plan("fsdp-shard-grad-op", w, m)) == 0);
  CHECK(search::named_plan("fsdp-full-shard", w, m).decisions ==
        search::named_plan("in-core", w, m).decisions);
  // Regathering holds less: four units' parameters off the device between forward and backward.
  CHECK(peak_of(w, search::named_plan("fsdp-full-shard", w, m)) <
        peak_of(w, search::named_plan("fsdp-shard-grad-op", w, m)));
  // A step of one GPU has no gathered parameters and no FSDP rows.
  Workload one = w;
  one.distributed.reset();
  for (auto& op : one.ops) op.collective.reset();
  CHECK(search::policies_for(search::NetworkView(one)).size() == search::policies().size() - 2);
}

TEST_CASE("the oracle answers plans that regather units as a lowering and an engine run do",
          "[search][fsdp]") {
  // From the job's in-core plan (FULL_SHARD, prefetch 1) as the base: each unit kept, regathered
  // at its use or issued at another point, and activations evicted beside them, on budgets from
  // the in-core peak down; the Evaluator's answers (through the base where a way applies) against
  // a lowering and an engine run of each plan.
  const Workload w = sharded_gpt();
  const search::NetworkView view(w);
  const std::vector<std::size_t> units = sim::gathered_parameter_maps(view.feature_maps(), w);
  const Plan base = *sim::basic_plan("in-core", w);
  const Bytes peak = peak_of(w, base);
  for (const double share : {1.0, 0.9, 0.8, 0.7}) {
    CAPTURE(share);
    const sim::Machine m = machine_of(static_cast<Bytes>(static_cast<double>(peak) * share));
    search::Evaluator oracle(w, m);
    oracle.rebase(base);
    std::vector<Plan> trials;
    for (std::size_t k = 0; k < units.size(); ++k) {
      Plan kept = base;
      kept.decisions[units[k]] = sim::Decision{kept.decisions[units[k]].tensor};
      trials.push_back(kept);
      Plan at_use = base;
      at_use.decisions[units[k]].action = Action::kRecompute;
      at_use.decisions[units[k]].prefetch_before = sim::kNoOp;
      trials.push_back(at_use);
    }
    Plan evicted = base;  // every other activation recomputed where it can be, or swapped
    const std::vector<bool> regenerable = sim::regenerable_tensors(w);
    for (std::size_t d = 0; d < evicted.decisions.size(); d += 3) {
      if (std::find(units.begin(), units.end(), d) != units.end()) continue;
      evicted.decisions[d].action =
          regenerable[index(evicted.decisions[d].tensor)] ? Action::kRecompute : Action::kSwap;
    }
    trials.push_back(evicted);
    for (std::size_t t = 0; t < trials.size(); ++t) {
      CAPTURE(t);
      sim::validate_plan(trials[t], w, "trial");
      sim::Engine engine;
      const sim::Program program = sim::lower(w, trials[t]);
      const sim::Timeline& want = engine.run(program, m, sim::EngineOptions::totals());
      const search::Evaluation fit = oracle.fits(trials[t]);
      REQUIRE(fit.feasible == want.feasible);
      REQUIRE(fit.peak_reserved_bytes == want.peak_reserved_bytes);
      const search::Evaluation cost = oracle.cost(trials[t]);
      REQUIRE(cost.iteration_ns == want.iteration_ns);
      REQUIRE(cost.peak_bytes == want.peak_bytes);
    }
  }
}

TEST_CASE("the search fits where no standard FSDP setting does, choosing each unit's regather",
          "[search][fsdp]") {
  // At the full-shard setting's peak less one byte neither standard setting fits (SHARD_GRAD_OP
  // holds more); the search finds a plan that fits, no slower than the ideal step allows.
  const Workload w = sharded_gpt();
  const sim::Machine unlimited = machine_of(Bytes{1} << 40);
  const Bytes full_shard = peak_of(w, search::named_plan("fsdp-full-shard", w, unlimited));
  const Bytes shard_grad_op = peak_of(w, search::named_plan("fsdp-shard-grad-op", w, unlimited));
  REQUIRE(shard_grad_op > full_shard);
  const sim::Machine tight = machine_of(full_shard - 1);
  search::SearchOptions options;
  options.threads = 2;
  options.deterministic = true;
  options.time_limit_s = 60;
  options.max_rounds = 20;
  const search::SearchResult r = search::search_plan(w, tight, options);
  REQUIRE(r.simulation.timeline.feasible);
  CHECK(r.simulation.timeline.peak_bytes < full_shard);
  const search::NetworkView view(w);
  const std::vector<std::size_t> units = sim::gathered_parameter_maps(view.feature_maps(), w);
  // Every unit but the root regathered (keeping one would hold more than the setting does), at
  // its own point.
  CHECK(std::count_if(units.begin(), units.end(), [&](std::size_t m) {
          return r.plan.decisions[m].action == Action::kRecompute;
        }) >= 4);
}
