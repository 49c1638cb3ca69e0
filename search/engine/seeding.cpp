#include "search/engine/seeding.hpp"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <optional>
#include <utility>

#include <fmt/core.h>

#include "search/parallel.hpp"
#include "search/policies/policy.hpp"

namespace memplan::search::engine {

// A deadline `seconds` after `start`, or none when that is too far to represent.
std::chrono::steady_clock::time_point deadline_after(std::chrono::steady_clock::time_point start,
                                                     double seconds) {
  if (!(seconds < 1e9)) return std::chrono::steady_clock::time_point::max();
  return start + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                     std::chrono::duration<double>(seconds));
}

void Reporter::operator()(std::string stage, std::string policy, std::size_t round,
                          std::size_t evaluated, const Evaluation& best) {
  if (!options_.on_progress) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  options_.on_progress({std::move(stage), std::move(policy), round, evaluated, best, elapsed});
}

// Every policy decides, cheapest first and in parallel, under `stop` (Note [Plan search],
// seeding); the cheapest (in-core, which simulates nothing) always seeds.
Seeding seed_with_policies(const sim::Workload& workload, const sim::Machine& machine,
                           const NetworkView& view, const SearchOptions& options, const Stop& stop,
                           double seeding_s, Reporter& report) {
  const std::vector<Policy> all = policies_for(view);
  std::vector<std::size_t> order(all.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return all[a].cost < all[b].cost; });
  std::vector<std::optional<Seed>> decided(all.size());
  std::vector<std::optional<Seed>> state_on_host(all.size());
  std::vector<std::string> why(all.size());
  std::atomic<std::size_t> evaluated{0};
  parallel_each(
      0, order.size(),
      [&](std::size_t k) {
        const Policy& policy = all[order[k]];
        Evaluator evaluator(workload, machine, options.collective_ready_ns);
        if (k > 0) evaluator.stop_when(&stop);
        Evaluation e;
        try {
          if (k > 0 && stop.due()) throw Stopped();
          sim::Plan plan =
              apply_encodings(decide(policy, evaluator, view).plan, view, options.encodings);
          if (!options.host_placement && (plan.host_update || !plan.host_tensors.empty())) {
            why[order[k]] = "places tensors on the host, which this search does not";
            report("seeding", std::string(policy.name), 0, evaluated, e);
            return;
          }
          if (!options.release_points) {
            for (sim::Decision& d : plan.decisions) d.release_before = sim::kNoOp;
          }
          evaluator.measure_excess(true);
          evaluator.measure_step(true);
          e = evaluator.cost(plan);
          if (!e.feasible && options.host_placement && !plan.host_update) {
            // The optimizer states on the host, brought back for the update; where that does not
            // fit, the gradients too (copied out when written, back in for the update).
            sim::Plan moved = plan;
            for (const auto& [kind, what] :
                 {std::pair{sim::TensorKind::kOptimizerState, "state"},
                  std::pair{sim::TensorKind::kGradient, "state and gradients"}}) {
              const std::vector<sim::TensorId> before = moved.host_tensors;
              sim::set_host_placement(moved, workload, kind, true);
              if (moved.host_tensors == before) continue;
              const Evaluation fits = evaluator.cost(moved);
              if (!fits.feasible) continue;
              state_on_host[order[k]] = Seed{std::move(moved), fits,
                                             fmt::format("{}, {} on the host", policy.name, what)};
              break;
            }
          }
          decided[order[k]] = Seed{std::move(plan), e, std::string(policy.name)};
        } catch (const Stopped&) {
          why[order[k]] = stop.cancelled() ? std::string("cancelled")
                                           : fmt::format(
                                                 "not decided within the seeding share of the time "
                                                 "limit ({:.1f} s)",
                                                 seeding_s);
        }
        const std::size_t total = evaluated += evaluator.count();
        report("seeding", std::string(policy.name), 0, total, e);
      },
      Split::kOnePerTask);
  Seeding result;
  result.evaluated = evaluated.load();
  for (std::size_t p = 0; p < all.size(); ++p) {
    if (decided[p]) {
      result.seeds.push_back(std::move(*decided[p]));
    } else {
      result.skipped.push_back({std::string(all[p].name), why[p]});
    }
  }
  for (std::optional<Seed>& seed : state_on_host) {
    if (seed) result.state_on_host.push_back(std::move(*seed));
  }
  std::stable_sort(result.seeds.begin(), result.seeds.end(), ranks_before);
  return result;
}

}  // namespace memplan::search::engine
