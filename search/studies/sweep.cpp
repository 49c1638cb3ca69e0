#include "search/studies/sweep.hpp"

#include <algorithm>
#include <chrono>
#include <iterator>
#include <mutex>

#include <fmt/core.h>
#include <oneapi/tbb/info.h>
#include <oneapi/tbb/task_arena.h>

#include "core/feature_maps.hpp"
#include "core/fsdp_setting.hpp"
#include "core/input_error.hpp"
#include "io/timeline_export.hpp"
#include "io/trace_io.hpp"
#include "search/parallel.hpp"
#include "search/policies/network_view.hpp"
#include "search/policies/policy.hpp"
#include "search/studies/comparison.hpp"
#include "search/studies/sweep_jobs.hpp"
#include "sim/simulation.hpp"

namespace memplan::search {
namespace {

// One (trace, memory, link) point of the grid — (trace, memory, link, interconnect, world size) in
// a grid of jobs — its machine and its ideal iteration time.
struct GridPoint {
  std::size_t trace = 0;
  std::string link;
  sim::Machine machine;  // a job's first rank's
  sim::Nanoseconds ideal_ns = 0;
  // A grid of jobs' point: the job (Sweep::Impl::jobs) and one machine per rank.
  std::string interconnect;
  SweepJobPoint job;
};

// One cell: a policy (index into the selected policies) or the search on one grid point.
struct Cell {
  std::size_t point = 0;
  const Policy* policy = nullptr;  // nullptr: the search
};

SweepRow row_header(const SweepGrid& grid, const GridPoint& point) {
  SweepRow row;
  if (point.job.job != nullptr) {
    row.job = true;
    row.interconnect = point.interconnect;
    row.world_size = point.job.job->world_size();
  }
  row.trace = grid.traces[point.trace].name;
  row.memory_bytes = point.machine.memory_bytes;
  row.link = point.link;
  row.h2d_bytes_per_s = point.machine.link.h2d_bytes_per_s;
  row.d2h_bytes_per_s = point.machine.link.d2h_bytes_per_s;
  row.ideal_ns = point.ideal_ns;
  return row;
}

void fill_outcome(SweepRow& row, const sim::Timeline& timeline, const sim::Program& program,
                  const sim::Workload& workload, const sim::Plan& plan) {
  row.feasible = timeline.feasible;
  row.step_ns = timeline.period_ns;
  row.peak_bytes = timeline.peak_bytes;
  if (row.feasible && row.ideal_ns > 0) {
    row.overhead = static_cast<double>(row.step_ns) / static_cast<double>(row.ideal_ns) - 1.0;
  }
  const auto counts = plan.action_counts();
  row.keep = counts[0];
  row.swap = counts[1];
  row.recompute = counts[2];
  row.encode = counts[3];
  if (!timeline.feasible) row.why_not = sim::why_not_text(timeline, program, workload);
}

SweepRow run_policy_cell(const SweepGrid& grid, const GridPoint& point, const Policy& policy,
                         const SweepOptions& options) {
  const sim::Workload& workload = grid.traces[point.trace].workload;
  const NetworkView view(workload);
  const ComparisonRow result =
      run_policy(policy, workload, point.machine, view, options.encodings, point.ideal_ns);
  SweepRow row = row_header(grid, point);
  row.policy = result.policy;
  row.decide_s = result.decide_s;
  row.note = result.decision.note;
  fill_outcome(row, result.timeline, result.program, workload, result.decision.plan);
  if (!row.feasible && row.why_not.empty() && result.decision.gave_up) {
    row.why_not = "the policy gave up: " + result.decision.note;
  }
  return row;
}

SweepRow run_search_cell(const SweepGrid& grid, const GridPoint& point,
                         const SweepOptions& options) {
  const sim::Workload& workload = grid.traces[point.trace].workload;
  SearchOptions so = options.search;
  so.threads = 1;
  so.deterministic = true;
  so.encodings = options.encodings;
  so.on_progress = nullptr;
  const auto start = std::chrono::steady_clock::now();
  const SearchResult result = search_plan(workload, point.machine, so);
  const auto stop = std::chrono::steady_clock::now();
  SweepRow row = row_header(grid, point);
  row.policy = "search";
  row.decide_s = std::chrono::duration<double>(stop - start).count();
  row.note = fmt::format("from {}, {} rounds{}", result.best_policy, result.rounds,
                         result.converged ? ", converged" : "");
  // The search's winner as it simulated it: no second lowering.
  fill_outcome(row, result.simulation.timeline, result.simulation.program, workload, result.plan);
  return row;
}

// One cell: a policy or the search, on a step or on every rank of a job.
SweepRow run_cell(const SweepGrid& grid, const GridPoint& point, const Cell& cell,
                  const SweepOptions& options) {
  if (point.job.job == nullptr) {
    return cell.policy != nullptr ? run_policy_cell(grid, point, *cell.policy, options)
                                  : run_search_cell(grid, point, options);
  }
  SweepRow row = row_header(grid, point);
  if (cell.policy != nullptr) {
    run_job_policy_cell(point.job, *cell.policy, options, row);
  } else {
    run_job_search_cell(point.job, options, row);
  }
  return row;
}

}  // namespace

std::vector<SweepLink> sweep_links(const std::vector<std::string>& presets,
                                   const std::vector<std::string>& bandwidths) {
  std::vector<SweepLink> links;
  for (const std::string& name : presets) {
    sim::preset_link(name);  // throws for an unknown preset before any cell runs
    SweepLink link;
    link.label = name;
    link.overrides.link_name = name;
    links.push_back(std::move(link));
  }
  for (const std::string& text : bandwidths) {
    SweepLink link;
    link.label = text;
    const sim::BytesPerSecond bandwidth = sim::parse_bandwidth(text, "--bandwidth");
    link.overrides.link.h2d_bytes_per_s = bandwidth;
    link.overrides.link.d2h_bytes_per_s = bandwidth;
    links.push_back(std::move(link));
  }
  if (links.empty()) links.push_back(SweepLink{"trace", {}});
  return links;
}

std::vector<SweepInterconnect> sweep_interconnects(const std::vector<std::string>& names,
                                                   std::optional<std::int32_t> gpus_per_node) {
  std::vector<SweepInterconnect> out;
  for (const std::string& name : names) {
    SweepInterconnect point;
    point.label = name;
    const std::size_t plus = name.find('+');
    point.overrides.interconnect = name.substr(0, plus);
    if (plus != std::string::npos) point.overrides.network = name.substr(plus + 1);
    if (name != sim::kRecordedInterconnect) point.overrides.gpus_per_node = gpus_per_node;
    const auto preset = sim::find_fabric_preset(*point.overrides.interconnect);
    if (preset && preset->between_nodes) {
      throw sim::InputError("--interconnects",
                            fmt::format("{}: '{}' is a network between nodes: write it after the "
                                        "fabric inside a node, e.g. nvlink4+{}",
                                        name, preset->name, preset->name));
    }
    try {  // the names and the count are checked before any cell runs
      if (name != sim::kRecordedInterconnect) {
        (void)sim::make_interconnect(*point.overrides.interconnect, point.overrides.network,
                                     gpus_per_node.value_or(sim::kDefaultGpusPerNode));
      }
    } catch (const sim::InputError& e) {
      const std::string_view what = e.what();
      const std::string_view problem =
          e.where().empty() ? what : what.substr(std::min(what.size(), e.where().size() + 2));
      const bool count = e.where() == "--gpus-per-node";
      throw sim::InputError(count ? "--gpus-per-node" : "--interconnects",
                            fmt::format("{}: {}", name, problem));
    }
    out.push_back(std::move(point));
  }
  return out;
}

sim::Job with_world_size(const sim::Job& job, std::int32_t world_size, std::string_view source) {
  const auto refuse = [&](const std::string& why) {
    throw sim::InputError("--world-sizes", fmt::format("{}: {}", source, why));
  };
  if (job.ranks.size() != 1) {
    refuse(
        fmt::format("holds a job of {} ranks, and a world size is set for one rank whose "
                    "peers are assumed alike: give one rank's trace",
                    job.ranks.size()));
  }
  const sim::Workload& rank = job.ranks.front();
  if (!rank.distributed)
    refuse("is the step of one GPU (no `distributed`): no collective to price");
  const std::int32_t old_world = rank.distributed->world_size;
  if (rank.distributed->rank >= world_size) {
    refuse(fmt::format("rank {} is not in a world of {}", rank.distributed->rank, world_size));
  }
  sim::Job out = job;
  sim::Workload& w = out.ranks.front();
  w.distributed->world_size = world_size;
  for (sim::Op& op : w.ops) {
    if (!op.collective) continue;
    sim::Collective& c = *op.collective;
    if (c.ranks.size() == static_cast<std::size_t>(old_world)) c.ranks.clear();  // every rank
    const bool outside =
        c.peer >= world_size || std::any_of(c.ranks.begin(), c.ranks.end(),
                                            [&](std::int32_t r) { return r >= world_size; });
    if (outside) {
      refuse(fmt::format("op '{}' calls ranks outside a world of {}", op.name, world_size));
    }
  }
  sim::validate(out, source);
  return out;
}

bool SweepGrid::jobs() const {
  return !interconnects.empty() || !world_sizes.empty() ||
         std::any_of(traces.begin(), traces.end(),
                     [](const SweepTrace& t) { return !t.more_ranks.empty(); });
}

struct Sweep::Impl {
  const SweepGrid& grid;
  std::vector<const Policy*> selected;
  std::vector<GridPoint> points;
  std::vector<Cell> cells;
  /// A grid of jobs' jobs: per trace, one per world size (or the trace's own), in that order.
  std::vector<std::unique_ptr<sim::Job>> jobs;
};

namespace {

std::vector<const Policy*> selected_policies(const SweepGrid& grid) {
  std::vector<const Policy*> selected;
  if (grid.policies.empty()) {
    // FSDP's settings where a trace gathers parameters (search::policies_for).
    const bool gathered = std::any_of(grid.traces.begin(), grid.traces.end(), [](const auto& t) {
      return !sim::gathered_parameter_maps(sim::find_feature_maps(t.workload), t.workload).empty();
    });
    for (const Policy& policy : policies()) {
      if (gathered || !policy.fsdp_setting) selected.push_back(&policy);
    }
    return selected;
  }
  for (const std::string& name : grid.policies) {
    const Policy* policy = find_policy(name);
    if (policy == nullptr) {
      std::string known;
      for (const Policy& p : policies()) known += (known.empty() ? "" : ", ") + std::string(p.name);
      throw sim::InputError("--policies",
                            fmt::format("unknown policy '{}' (policies: {})", name, known));
    }
    selected.push_back(policy);
  }
  return selected;
}

// A grid of jobs' jobs: per trace, the job at each world size (or as it is).
std::vector<std::unique_ptr<sim::Job>> grid_jobs(const SweepGrid& grid) {
  std::vector<std::unique_ptr<sim::Job>> jobs;
  for (const SweepTrace& trace : grid.traces) {
    sim::Job job{{trace.workload}};
    job.ranks.insert(job.ranks.end(), trace.more_ranks.begin(), trace.more_ranks.end());
    if (grid.world_sizes.empty()) {
      jobs.push_back(std::make_unique<sim::Job>(std::move(job)));
      continue;
    }
    for (const std::int32_t world_size : grid.world_sizes)
      jobs.push_back(std::make_unique<sim::Job>(with_world_size(job, world_size, trace.name)));
  }
  return jobs;
}

// A grid of jobs' points: trace, memory, link, interconnect, world size; every rank's machine.
std::vector<GridPoint> job_grid_points(const SweepGrid& grid,
                                       const std::vector<std::unique_ptr<sim::Job>>& jobs) {
  const std::vector<std::optional<sim::Bytes>> memories =
      grid.memories.empty() ? std::vector<std::optional<sim::Bytes>>{std::nullopt} : grid.memories;
  const std::vector<SweepLink> links =
      grid.links.empty() ? std::vector<SweepLink>{SweepLink{"trace", {}}} : grid.links;
  const std::vector<SweepInterconnect> interconnects =
      grid.interconnects.empty() ? std::vector<SweepInterconnect>{SweepInterconnect{"recorded", {}}}
                                 : grid.interconnects;
  const std::size_t sizes = std::max<std::size_t>(1, grid.world_sizes.size());
  std::vector<GridPoint> points;
  for (std::size_t t = 0; t < grid.traces.size(); ++t) {
    for (const auto& memory : memories) {
      for (const SweepLink& link : links) {
        for (const SweepInterconnect& fabric : interconnects) {
          sim::MachineOverrides overrides = link.overrides;
          overrides.memory_bytes = memory;
          overrides.interconnect = fabric.overrides.interconnect;
          overrides.network = fabric.overrides.network;
          overrides.gpus_per_node = fabric.overrides.gpus_per_node;
          for (std::size_t s = 0; s < sizes; ++s) {
            GridPoint point;
            point.trace = t;
            point.link = link.label;
            point.interconnect = fabric.label;
            point.job.job = jobs[t * sizes + s].get();
            for (const sim::Workload& w : point.job.job->ranks)
              point.job.machines.push_back(sim::make_machine(w.device, overrides));
            point.machine = point.job.machines.front();
            points.push_back(std::move(point));
          }
        }
      }
    }
  }
  return points;
}

// Every machine is built (and so every value checked) before any cell runs.
std::vector<GridPoint> grid_points(const SweepGrid& grid) {
  const std::vector<std::optional<sim::Bytes>> memories =
      grid.memories.empty() ? std::vector<std::optional<sim::Bytes>>{std::nullopt} : grid.memories;
  const std::vector<SweepLink> links =
      grid.links.empty() ? std::vector<SweepLink>{SweepLink{"trace", {}}} : grid.links;
  std::vector<GridPoint> points;
  for (std::size_t t = 0; t < grid.traces.size(); ++t) {
    for (const auto& memory : memories) {
      for (const SweepLink& link : links) {
        sim::MachineOverrides overrides = link.overrides;
        overrides.memory_bytes = memory;
        GridPoint point;
        point.trace = t;
        point.link = link.label;
        point.machine = sim::make_machine(grid.traces[t].workload.device, overrides);
        points.push_back(std::move(point));
      }
    }
  }
  return points;
}

// The first `count` fields of a CSV line as sweep_csv_line writes them (quotes undone).
std::vector<std::string> leading_fields(const std::string& line, std::size_t count) {
  std::vector<std::string> fields;
  std::size_t i = 0;
  while (fields.size() < count && i <= line.size()) {
    std::string field;
    if (i < line.size() && line[i] == '"') {
      for (++i; i < line.size(); ++i) {
        if (line[i] == '"' && i + 1 < line.size() && line[i + 1] == '"') {
          field += '"';
          ++i;
        } else if (line[i] == '"') {
          ++i;
          break;
        } else {
          field += line[i];
        }
      }
    } else {
      const std::size_t comma = std::min(line.find(',', i), line.size());
      field = line.substr(i, comma - i);
      i = comma;
    }
    fields.push_back(std::move(field));
    if (i >= line.size() || line[i] != ',') break;
    ++i;
  }
  return fields;
}

// Whether a record (one CSV row) is the row of cell `cell`: same trace, memory, link, policy (and
// interconnect and world size in a grid of jobs).
bool is_row_of(const Sweep::Impl& sweep, std::size_t cell, const std::string& record) {
  const Cell& c = sweep.cells.at(cell);
  const GridPoint& point = sweep.points[c.point];
  const bool jobs = point.job.job != nullptr;
  const std::size_t at = jobs ? 7 : 5;  // the policy's column
  const std::vector<std::string> f = leading_fields(record, at + 1);
  if (f.size() < at + 1) return false;
  if (jobs && (f[3] != point.interconnect || f[4] != std::to_string(point.job.job->world_size())))
    return false;
  const std::string policy = c.policy != nullptr ? std::string(c.policy->name) : "search";
  return f[0] == sweep.grid.traces[point.trace].name &&
         f[1] == std::to_string(point.machine.memory_bytes) && f[2] == point.link &&
         (f[at] == policy || (c.policy != nullptr && f[at] == policy + "+gist"));
}

// The records of a CSV, each with its newline (a quoted field may hold newlines); a last record
// without its newline (cut short) is left out.
std::vector<std::string> csv_records(const std::string& text) {
  std::vector<std::string> records;
  bool quoted = false;
  std::size_t begin = 0;
  for (std::size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '"') quoted = !quoted;
    if (text[i] == '\n' && !quoted) {
      records.push_back(text.substr(begin, i + 1 - begin));
      begin = i + 1;
    }
  }
  return records;
}

}  // namespace

Sweep::Sweep(const SweepGrid& grid) : impl_(std::make_unique<Impl>(Impl{grid, {}, {}, {}, {}})) {
  if (grid.traces.empty()) throw sim::InputError("TRACE", "give at least one trace");
  impl_->selected = selected_policies(grid);
  if (impl_->selected.empty() && !grid.search) {
    throw sim::InputError("--policies", "nothing to run: no policy and no search");
  }
  if (grid.jobs()) {
    impl_->jobs = grid_jobs(grid);
    impl_->points = job_grid_points(grid, impl_->jobs);
  } else {
    impl_->points = grid_points(grid);
  }
  for (std::size_t p = 0; p < impl_->points.size(); ++p) {
    for (const Policy* policy : impl_->selected) impl_->cells.push_back({p, policy});
    if (grid.search) impl_->cells.push_back({p, nullptr});
  }
}

Sweep::~Sweep() = default;

std::size_t Sweep::size() const {
  return impl_->cells.size();
}

std::string Sweep::csv_header() const {
  return sweep_csv_header(impl_->grid.jobs());
}

std::vector<SweepRow> Sweep::run(const std::vector<std::size_t>& cells,
                                 const SweepOptions& options) const {
  const SweepGrid& grid = impl_->grid;
  // The points these cells use, with their ideal iteration time.
  std::vector<GridPoint> points = impl_->points;
  std::vector<std::size_t> used;
  used.reserve(cells.size());
  for (const std::size_t i : cells) used.push_back(impl_->cells.at(i).point);
  std::sort(used.begin(), used.end());
  used.erase(std::unique(used.begin(), used.end()), used.end());

  const int threads =
      options.threads > 0 ? options.threads : std::max(1, tbb::info::default_concurrency());
  tbb::task_arena arena(arena_concurrency(threads));
  const auto start = std::chrono::steady_clock::now();
  std::vector<SweepRow> rows(cells.size());
  std::mutex progress_mutex;
  std::size_t done = 0;
  arena.execute([&] {
    parallel_each(0, used.size(), [&](std::size_t u) {
      GridPoint& point = points[used[u]];
      point.ideal_ns = point.job.job != nullptr
                           ? ideal_job_step_ns(point.job)
                           : ideal_step_ns(grid.traces[point.trace].workload, point.machine);
    });
    parallel_each(
        0, cells.size(),
        [&](std::size_t i) {
          const Cell& cell = impl_->cells[cells[i]];
          const GridPoint& point = points[cell.point];
          rows[i] = run_cell(grid, point, cell, options);
          if (options.deterministic) rows[i].decide_s = 0.0;
          if (options.on_row || options.on_progress) {
            const std::lock_guard lock(progress_mutex);
            ++done;
            if (options.on_row) options.on_row(i, rows[i]);
            if (options.on_progress) {
              options.on_progress(
                  {done, cells.size(),
                   std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
                       .count()});
            }
          }
        },
        Split::kOnePerTask);
  });
  return rows;
}

std::vector<std::string> Sweep::finished_rows(const std::string& csv,
                                              const std::string& source) const {
  const std::vector<std::string> records = csv_records(csv);
  if (records.empty()) return {};
  if (records[0] != csv_header()) {
    throw sim::InputError(source + ":1", "not a CSV of memplan sweep (its header differs)");
  }
  std::vector<std::string> rows(records.begin() + 1, records.end());
  std::size_t line = 2;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    if (i >= size() || !is_row_of(*impl_, i, rows[i])) {
      throw sim::InputError(fmt::format("{}:{}", source, line),
                            fmt::format("row {} is not cell {} of this sweep (trace, memory, "
                                        "link or policy differ): resume with the same grid",
                                        i + 1, i + 1));
    }
    line += static_cast<std::size_t>(std::count(rows[i].begin(), rows[i].end(), '\n'));
  }
  return rows;
}

SweepTrace sweep_trace(std::string name, sim::Job job) {
  sim::require_sizes(job, name);
  SweepTrace trace{std::move(name), std::move(job.ranks.front())};
  trace.more_ranks.assign(std::make_move_iterator(job.ranks.begin() + 1),
                          std::make_move_iterator(job.ranks.end()));
  return trace;
}

std::vector<SweepRow> run_sweep(const SweepGrid& grid, const SweepOptions& options) {
  const Sweep sweep(grid);
  std::vector<std::size_t> cells(sweep.size());
  for (std::size_t i = 0; i < cells.size(); ++i) cells[i] = i;
  return sweep.run(cells, options);
}

std::string sweep_csv_header(bool jobs) {
  return fmt::format(
      "trace,memory_bytes,link,{}h2d_bytes_per_s,d2h_bytes_per_s,policy,feasible,step_s,"
      "ideal_s,overhead,peak_bytes,keep,swap,recompute,encode,decide_s,note,why_not{}\n",
      jobs ? "interconnect,world_size," : "", jobs ? ",slowest_rank,wait_s" : "");
}

std::string sweep_csv_line(const SweepRow& row) {
  const std::string job_point =
      row.job ? fmt::format("{},{},", csv_field(row.interconnect), row.world_size) : "";
  std::string job_outcome;
  if (row.job) {
    job_outcome = row.feasible
                      ? fmt::format(",{},{:.9f}", row.slowest_rank, sim::to_seconds(row.wait_ns))
                      : std::string(",,");
  }
  return fmt::format(
      "{},{},{},{}{:.0f},{:.0f},{},{},{},{:.9f},{},{},{},{},{},{},{:.6f},{},{}{}\n",
      csv_field(row.trace), row.memory_bytes, csv_field(row.link), job_point, row.h2d_bytes_per_s,
      row.d2h_bytes_per_s, csv_field(row.policy), row.feasible ? 1 : 0,
      row.feasible ? fmt::format("{:.9f}", sim::to_seconds(row.step_ns)) : "",
      sim::to_seconds(row.ideal_ns), row.feasible ? fmt::format("{:.6f}", row.overhead) : "",
      row.peak_bytes, row.keep, row.swap, row.recompute, row.encode, row.decide_s,
      csv_field(row.note), csv_field(row.why_not), job_outcome);
}

std::string sweep_csv(const std::vector<SweepRow>& rows) {
  std::string out = sweep_csv_header(!rows.empty() && rows.front().job);
  for (const SweepRow& row : rows) out += sweep_csv_line(row);
  return out;
}

}  // namespace memplan::search
