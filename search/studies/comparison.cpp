#include "search/studies/comparison.hpp"

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <optional>

#include <oneapi/tbb/task_arena.h>

#include <fmt/core.h>

#include "core/basic_plans.hpp"
#include "io/timeline_export.hpp"
#include "search/parallel.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace memplan::search {

sim::Nanoseconds ideal_step_ns(const sim::Workload& workload, const sim::Machine& machine) {
  sim::Machine unlimited = machine;
  unlimited.memory_bytes = std::numeric_limits<sim::Bytes>::max() / 4;
  sim::Engine engine;
  const sim::Program program = sim::lower(workload, sim::in_core_plan(workload));
  const sim::Timeline& alone = engine.run(program, unlimited, sim::EngineOptions::totals());
  return sim::step_period_ns(engine, program, unlimited, alone);
}

ComparisonRow run_policy(const Policy& policy, const sim::Workload& workload,
                         const sim::Machine& machine, const NetworkView& view,
                         const EncodingOptions& encodings, sim::Nanoseconds ideal_ns,
                         const Stop* stop) {
  Evaluator evaluator(workload, machine);
  evaluator.stop_when(stop);
  const auto start = std::chrono::steady_clock::now();
  PolicyDecision decision = decide(policy, evaluator, view);
  decision.plan = apply_encodings(decision.plan, view, encodings);
  const auto decided = std::chrono::steady_clock::now();
  ComparisonRow row;
  row.policy = decision.plan.policy;
  row.decide_s = std::chrono::duration<double>(decided - start).count();
  row.program = sim::lower(workload, decision.plan);
  sim::Engine engine;
  row.timeline = engine.run(row.program, machine, sim::EngineOptions::totals());
  sim::set_step_period(row.timeline, row.program, machine);
  row.decision = std::move(decision);
  if (row.timeline.feasible && ideal_ns > 0) {
    row.overhead = static_cast<double>(row.step_ns()) / static_cast<double>(ideal_ns) - 1.0;
  }
  return row;
}

Comparison compare_policies(const sim::Workload& workload, const sim::Machine& machine,
                            const ComparisonOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  Comparison result;
  result.ideal_ns = ideal_step_ns(workload, machine);
  const NetworkView view(workload);
  const std::vector<Policy> all = policies_for(view);
  std::vector<std::optional<ComparisonRow>> rows(all.size());
  const Stop stop{std::chrono::steady_clock::time_point::max(), options.cancel};
  std::mutex progress;
  std::size_t done = 0;
  // The costliest policies start first (longest processing time first): oneTBB's workers run a
  // loop's first indices first, and a slow policy started last would end the comparison alone.
  std::vector<std::size_t> order(all.size());
  for (std::size_t p = 0; p < order.size(); ++p) order[p] = p;
  std::stable_sort(order.begin(), order.end(),
                   [&](std::size_t a, std::size_t b) { return all[a].cost > all[b].cost; });
  const int threads = options.threads > 0 ? options.threads : tbb::task_arena::automatic;
  tbb::task_arena arena(arena_concurrency(threads));
  BoundOptions bound;  // every plan the rows may take: any placement, the encodings given
  bound.encodings = options.encodings;
  arena.execute([&] {
    parallel_each(
        0, order.size() + (options.lower_bound ? 1 : 0),
        [&](std::size_t k) {
          if (stop.due()) return;
          if (k == order.size()) {  // the lower bound, beside the policies
            result.lower_bound = lower_bound(workload, machine, bound);
            return;
          }
          const std::size_t p = order[k];
          try {
            rows[p] = run_policy(all[p], workload, machine, view, options.encodings,
                                 result.ideal_ns, &stop);
          } catch (const Stopped&) {
            return;
          }
          const std::lock_guard<std::mutex> lock(progress);
          ++done;
          if (options.on_progress) {
            const double elapsed =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            options.on_progress({std::string(all[p].name), done, all.size(), elapsed});
          }
        },
        Split::kOnePerTask);
  });
  for (std::optional<ComparisonRow>& row : rows) {
    if (row) result.rows.push_back(std::move(*row));
  }
  result.cancelled = result.rows.size() < all.size();
  return result;
}

Comparison compare_policies(const sim::Workload& workload, const sim::Machine& machine,
                            const EncodingOptions& encodings) {
  ComparisonOptions options;
  options.encodings = encodings;
  return compare_policies(workload, machine, options);
}

double ComparisonRow::gpu_idle_share() const {
  if (step_ns() <= 0) return 0.0;
  return 1.0 - static_cast<double>(timeline.compute_busy_ns) / static_cast<double>(step_ns());
}

bool ComparisonRow::cpu_bound() const {
  // The device's time per step: its compute stream running, or waiting for the plan's copies.
  const auto& stalls = timeline.stall_ns_by_cause;
  const sim::Nanoseconds device =
      sim::add_ns(timeline.compute_busy_ns,
                  sim::add_ns(stalls[static_cast<std::size_t>(sim::StallCause::kSwapIn)],
                              stalls[static_cast<std::size_t>(sim::StallCause::kSwapOut)]));
  return sim::add_ns(timeline.host_busy_ns, program.host.tail_ns) > device;
}

std::vector<std::size_t> Comparison::ranking() const {
  std::vector<std::size_t> order(rows.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const ComparisonRow& x = rows[a];
    const ComparisonRow& y = rows[b];
    if (x.timeline.feasible != y.timeline.feasible) return x.timeline.feasible;
    return x.timeline.feasible && x.step_ns() < y.step_ns();
  });
  return order;
}

nlohmann::json comparison_json(const Comparison& comparison, const sim::Workload& workload,
                               const sim::Machine& machine) {
  nlohmann::json rows = nlohmann::json::array();
  std::vector<std::size_t> rank(comparison.rows.size());
  const std::vector<std::size_t> order = comparison.ranking();
  for (std::size_t r = 0; r < order.size(); ++r) rank[order[r]] = r + 1;
  for (std::size_t i = 0; i < comparison.rows.size(); ++i) {
    const ComparisonRow& row = comparison.rows[i];
    nlohmann::json j = sim::summary_json(row.timeline, row.program, workload, machine);
    j["policy"] = row.policy;
    j["rank"] = rank[i];
    if (row.program.host.active()) {
      j["gpu_idle_share"] =
          row.timeline.feasible ? nlohmann::json(row.gpu_idle_share()) : nlohmann::json(nullptr);
      j["cpu_bound"] = row.cpu_bound();
    }
    j["overhead"] = row.timeline.feasible ? nlohmann::json(row.overhead) : nlohmann::json(nullptr);
    if (comparison.lower_bound) {
      const auto gap = bound_gap(*comparison.lower_bound, bounded_step(row.timeline));
      j["gap"] = gap ? nlohmann::json(*gap) : nlohmann::json(nullptr);
    }
    j["decide_s"] = row.decide_s;
    j["note"] = row.decision.note;
    j["gave_up"] = row.decision.gave_up;
    rows.push_back(std::move(j));
  }
  nlohmann::json out = {{"ideal_s", sim::to_seconds(comparison.ideal_ns)}};
  if (comparison.lower_bound) add_bound_fields(out, *comparison.lower_bound);
  out["rows"] = std::move(rows);
  return out;
}

std::string why_not(const ComparisonRow& row, const sim::Workload& workload) {
  if (row.timeline.feasible) return {};
  std::string why = sim::why_not_text(row.timeline, row.program, workload);
  if (!why.empty()) return why;
  return row.decision.gave_up ? "the policy gave up: " + row.decision.note : "did not fit";
}

namespace {

// A row's gap column: its step against the lower bound, alone or back to back as bound_gap says
// ("-" when it does not fit or there is no bound).
std::string gap_cell(const Comparison& comparison, const ComparisonRow& row) {
  if (!comparison.lower_bound) return "-";
  const auto gap = bound_gap(*comparison.lower_bound, bounded_step(row.timeline));
  return gap ? fmt::format("{:+.1f}%", *gap * 100) : "-";
}

}  // namespace

std::string comparison_text(const Comparison& comparison, const sim::Workload& workload,
                            const sim::Machine& machine) {
  std::string out =
      fmt::format("device memory {}, H2D {:.1f} GB/s, D2H {:.1f} GB/s; ideal step {:.3f} ms\n",
                  sim::format_bytes(machine.memory_bytes), machine.link.h2d_bytes_per_s / 1e9,
                  machine.link.d2h_bytes_per_s / 1e9, sim::to_seconds(comparison.ideal_ns) * 1e3);
  if (comparison.lower_bound) {
    out += bound_text(*comparison.lower_bound, {});
    if (comparison.lower_bound->fits) {
      out += comparison.lower_bound->period_bound_ns
                 ? "gap: each plan's step back to back against its lower bound\n"
                 : "gap: each plan's step alone against the lower bound\n";
    }
  }
  const bool host = !comparison.rows.empty() && comparison.rows.front().program.host.active();
  if (host) {
    out +=
        "step: the period of the step repeated back to back with its host side, what a training "
        "loop sees; GPU idle share of that step; bound: CPU when the host's time per step "
        "exceeds the GPU's (running or waiting for copies)\n";
  }
  out += fmt::format("{:<22} {:>4} {:>12} {:>9} {:>8} {:>12} {:>5} {:>5} {:>5} {:>5} {:>9}",
                     "policy", "fits", "step", "overhead", "gap", "peak", "keep", "swap", "recmp",
                     "enc", "decide");
  out += host ? fmt::format(" {:>8} {:>5}  note\n", "GPU idle", "bound") : "  note\n";
  for (const std::size_t i : comparison.ranking()) {
    const ComparisonRow& row = comparison.rows[i];
    const auto counts = row.decision.plan.action_counts();
    const bool fits = row.timeline.feasible;
    out += fmt::format("{:<22} {:>4} {:>12} {:>9} {:>8} {:>12} {:>5} {:>5} {:>5} {:>5} {:>8.3f}s",
                       row.policy, fits ? "yes" : "no",
                       fits ? fmt::format("{:.3f} ms", sim::to_seconds(row.step_ns()) * 1e3) : "-",
                       fits ? fmt::format("{:+.1f}%", row.overhead * 100) : "-",
                       // A row that does not fit has no peak: what was live when it ran out is in
                       // its "why not" (and is not the step's in-core peak of `memplan info`).
                       gap_cell(comparison, row),
                       fits ? sim::format_bytes(row.timeline.peak_bytes) : "-", counts[0],
                       counts[1], counts[2], counts[3], row.decide_s);
    if (host) {
      out += fmt::format(" {:>8} {:>5}",
                         fits ? fmt::format("{:.1f}%", 100.0 * row.gpu_idle_share()) : "-",
                         fits ? (row.cpu_bound() ? "CPU" : "GPU") : "-");
    }
    out += fmt::format("  {}\n", row.decision.note);
    if (!fits) out += fmt::format("{:<22} why not: {}\n", "", why_not(row, workload));
  }
  return out;
}

std::string csv_field(const std::string& text) {
  if (text.find_first_of(",\"\r\n") == std::string::npos) return text;
  std::string out = "\"";
  for (char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + '"';
}

std::string comparison_csv(const Comparison& comparison, const sim::Workload& workload) {
  std::string out =
      "policy,feasible,step_s,overhead,peak_bytes,peak_reserved_bytes,stall_s,keep,swap,"
      "recompute,encode,decide_s,why_not\n";
  for (const ComparisonRow& row : comparison.rows) {
    const auto counts = row.decision.plan.action_counts();
    out += fmt::format(
        "{},{},{},{},{},{},{},{},{},{},{},{},{}\n", csv_field(row.policy),
        row.timeline.feasible ? 1 : 0,
        row.timeline.feasible ? fmt::format("{:.9f}", sim::to_seconds(row.step_ns())) : "",
        row.timeline.feasible ? fmt::format("{:.6f}", row.overhead) : "", row.timeline.peak_bytes,
        row.timeline.peak_reserved_bytes, sim::to_seconds(row.timeline.stall_ns()), counts[0],
        counts[1], counts[2], counts[3], row.decide_s, csv_field(why_not(row, workload)));
  }
  return out;
}

}  // namespace memplan::search
