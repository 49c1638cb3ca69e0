#include "importers/kineto/kineto_job.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"
#include "importers/kineto/step_selection.hpp"

// Note [Transfer and wait]
// ~~~~~~~~~~~~~~~~~~~~~~~~
// A collective's kernel starts on each rank when that rank's stream reaches it and ends when the
// data has moved, which is only after the last rank of its group has arrived: the time a rank's
// profiler records is its wait for the last peer plus the transfer. The last rank to arrive waits
// least, so in a job of several ranks each collective's transfer is estimated as the least time
// any rank of its group that the job holds recorded for it (the calls are matched by process
// group and sequence number, Note [Collectives of a step]); each rank's op gets that duration and
// the rest of its recorded time is reported as its wait. With the group's last rank missing from
// the job the estimate still holds a wait; with one rank it is the recorded time (its peers are
// assumed alike). A rank that lacks a call its group's other ranks made would have hung the job:
// an error, as is a call whose kind differs between ranks.

namespace memplan::importers {

namespace {

namespace fs = std::filesystem;

bool is_trace_file(const fs::path& p) {
  const std::string name = p.filename().string();
  auto ends = [&](std::string_view suffix) {
    return name.size() >= suffix.size() &&
           name.compare(name.size() - suffix.size(), suffix.size(), suffix) == 0;
  };
  return ends(".json") || ends(".json.gz");
}

// The files an input names: itself, or a folder's trace files in name order.
std::vector<fs::path> files_of(const fs::path& input) {
  std::error_code ec;
  if (!fs::is_directory(input, ec)) return {input};
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(input, ec)) {
    if (entry.is_regular_file(ec) && is_trace_file(entry.path())) files.push_back(entry.path());
  }
  if (ec) throw sim::InputError(input.string(), ec.message());
  if (files.empty())
    throw sim::InputError(input.string(), "a folder without .json or .json.gz profiler files");
  std::sort(files.begin(), files.end());
  return files;
}

// Gives each trace the rank the user named; a file that names another is an error.
void assign_ranks(std::vector<KinetoTrace>& traces, const std::vector<std::int32_t>& ranks) {
  if (ranks.empty()) return;
  if (ranks.size() != traces.size()) {
    throw sim::InputError(
        "--rank", fmt::format("{} ranks given for {} traces read", ranks.size(), traces.size()));
  }
  const std::int32_t largest = *std::max_element(ranks.begin(), ranks.end());
  for (std::size_t i = 0; i < traces.size(); ++i) {
    if (ranks[i] < 0) throw sim::InputError("--rank", fmt::format("negative rank {}", ranks[i]));
    auto& d = traces[i].distributed;
    if (d && d->rank != ranks[i] && traces[i].rank_rule == "distributedInfo") {
      throw sim::InputError(
          traces[i].source,
          fmt::format("its distributedInfo says rank {}, --rank {}", d->rank, ranks[i]));
    }
    if (!d) d = sim::Distributed{};
    d->rank = ranks[i];
    traces[i].rank_known = true;
    d->world_size = std::max({d->world_size, largest + 1, static_cast<std::int32_t>(ranks.size())});
  }
}

void check_ranks(const std::vector<KinetoTrace>& traces) {
  if (traces.size() < 2) return;
  std::map<std::int32_t, const KinetoTrace*> seen;
  for (const KinetoTrace& t : traces) {
    if (!t.distributed || !t.rank_known) {
      throw sim::InputError(t.source,
                            "records no rank (no distributedInfo) beside other ranks: "
                            "give each file's rank with --rank");
    }
    const auto [it, added] = seen.emplace(t.distributed->rank, &t);
    if (!added) {
      throw sim::InputError(t.source, fmt::format("rank {} again (also in {})", t.distributed->rank,
                                                  it->second->source));
    }
    if (t.distributed->world_size != traces.front().distributed->world_size) {
      throw sim::InputError(
          t.source, fmt::format("a world of {} ranks, but {} says {}", t.distributed->world_size,
                                traces.front().source, traces.front().distributed->world_size));
    }
  }
}

bool has_device_work(const KinetoTrace& trace) {
  return std::any_of(trace.gpu_events.begin(), trace.gpu_events.end(),
                     [](const GpuEvent& g) { return g.kind != GpuKind::kMemcpy; });
}

// The job's default step (Note [Default step]): among the step numbers complete on every rank,
// each as long as its slowest rank's, the median.
std::int64_t job_step(const std::vector<KinetoTrace>& traces, std::string& reason) {
  std::map<std::int64_t, std::pair<std::size_t, sim::Nanoseconds>> steps;  // ranks, longest
  std::vector<std::string> per_rank;
  for (const KinetoTrace& t : traces) {
    std::vector<std::int64_t> numbers;
    for (const StepWindow& s : detail::complete_steps(t, has_device_work(t))) {
      auto& [ranks, longest] = steps[s.number];
      ++ranks;
      longest = std::max(longest, s.end_ns - s.start_ns);
      numbers.push_back(s.number);
    }
    per_rank.push_back(fmt::format("rank {} #{}", t.distributed->rank, fmt::join(numbers, ", #")));
  }
  std::vector<sim::Nanoseconds> durations;
  std::vector<std::int64_t> numbers;
  for (const auto& [number, entry] : steps) {
    if (entry.first != traces.size()) continue;
    numbers.push_back(number);
    durations.push_back(entry.second);
  }
  if (numbers.empty()) {
    throw sim::InputError(traces.front().source,
                          fmt::format("no ProfilerStep#N is complete on every rank (complete: {}); "
                                      "pass --step N to import one anyway",
                                      fmt::join(per_rank, "; ")));
  }
  const std::size_t chosen =
      detail::median_step(durations, numbers, "steps complete on every rank", reason);
  if (numbers.size() > 1) reason += ", each as long as its slowest rank's";
  return numbers[chosen];
}

// Note [Transfer and wait]: each collective's duration becomes the least any rank recorded.
void split_transfer(sim::Job& job, std::vector<ImportReport>& reports) {
  using Key = std::pair<std::string, std::int64_t>;  // group, sequence
  std::map<Key, std::vector<std::pair<std::size_t, sim::Op*>>> calls;
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    for (sim::Op& o : job.ranks[r].ops) {
      if (o.collective) calls[{o.collective->group, o.collective->sequence}].emplace_back(r, &o);
    }
  }
  for (auto& [key, ops] : calls) {
    const sim::Op& first = *ops.front().second;
    sim::Nanoseconds transfer = first.duration_ns;
    std::set<std::size_t> holders;
    for (const auto& [r, o] : ops) {
      if (o->collective->kind != first.collective->kind) {
        throw sim::InputError(
            job.ranks[r].provenance.file,
            fmt::format("rank {}'s call #{} of process group '{}' is {} ('{}'), rank {}'s is {}",
                        job.ranks[r].distributed->rank, key.second, key.first,
                        sim::to_string(o->collective->kind), o->name,
                        job.ranks[ops.front().first].distributed->rank,
                        sim::to_string(first.collective->kind)));
      }
      transfer = std::min(transfer, o->duration_ns);
      holders.insert(r);
    }
    for (std::size_t r = 0; r < job.ranks.size(); ++r) {
      const auto& group = first.collective->ranks;
      const bool member = group.empty() || std::find(group.begin(), group.end(),
                                                     job.ranks[r].distributed->rank) != group.end();
      if (member && holders.count(r) == 0) {
        throw sim::InputError(
            job.ranks[r].provenance.file,
            fmt::format(
                "rank {} has no call #{} of process group '{}' ({} '{}' on rank {}): a rank that "
                "skips a collective would hang the job",
                job.ranks[r].distributed->rank, key.second, key.first,
                sim::to_string(first.collective->kind), first.name,
                job.ranks[ops.front().first].distributed->rank));
      }
    }
    for (const auto& [r, o] : ops) o->duration_ns = transfer;
  }
  for (std::size_t r = 0; r < job.ranks.size(); ++r) {
    ImportReport& report = reports[r];
    report.transfer_from_peers = true;
    report.collective_transfer_ns = 0;
    report.op_time_ns = 0;
    for (const sim::Op& o : job.ranks[r].ops) {
      if (o.collective) report.collective_transfer_ns += o.duration_ns;
      report.op_time_ns += o.duration_ns;
    }
  }
}

}  // namespace

std::vector<KinetoTrace> read_kineto_job(const std::vector<fs::path>& inputs,
                                         const std::vector<std::int32_t>& ranks) {
  if (inputs.empty()) throw sim::InputError("import", "no profiler file given");
  std::vector<KinetoTrace> traces;
  for (const fs::path& input : inputs) {
    for (const fs::path& file : files_of(input)) {
      for (KinetoTrace& t : read_kineto_ranks(file.string())) traces.push_back(std::move(t));
    }
  }
  assign_ranks(traces, ranks);
  check_ranks(traces);
  std::stable_sort(traces.begin(), traces.end(), [](const KinetoTrace& a, const KinetoTrace& b) {
    return a.distributed && b.distributed && a.distributed->rank < b.distributed->rank;
  });
  return traces;
}

JobImportResult import_kineto_job(const std::vector<KinetoTrace>& traces,
                                  const ImportOptions& options,
                                  const std::vector<AllocationHistory>& allocations) {
  if (traces.empty()) throw sim::InputError("import", "no rank to import");
  if (!allocations.empty() && allocations.size() != traces.size()) {
    throw sim::InputError("--snapshot", fmt::format("{} snapshots for {} ranks: give one per rank, "
                                                    "in rank order",
                                                    allocations.size(), traces.size()));
  }
  check_ranks(traces);
  for (std::size_t i = 1; i < traces.size(); ++i) {
    if (traces[i].distributed->rank < traces[i - 1].distributed->rank)
      throw sim::InputError(traces[i].source, "ranks out of order (read_kineto_job orders them)");
  }
  const bool default_step = !options.step && !options.step_annotation && !options.window &&
                            !options.whole_trace && traces.size() > 1;
  ImportOptions each = options;
  std::string reason;
  if (default_step) each.step = job_step(traces, reason);
  JobImportResult result;
  for (std::size_t i = 0; i < traces.size(); ++i) {
    const KinetoTrace& t = traces[i];
    if (!allocations.empty()) each.allocations = allocations[i];
    ImportResult r = import_kineto(t, each, trace_label(t));
    if (default_step) {
      r.report.step_was_chosen = true;
      r.report.step_reason = reason;
    }
    result.job.ranks.push_back(std::move(r.workload));
    result.reports.push_back(std::move(r.report));
  }
  if (traces.size() > 1) split_transfer(result.job, result.reports);
  sim::validate(result.job, traces.front().source);
  return result;
}

JobImportResult import_kineto_job(const std::vector<fs::path>& inputs, const ImportOptions& options,
                                  const std::vector<std::int32_t>& ranks) {
  return import_kineto_job(read_kineto_job(inputs, ranks), options);
}

std::string trace_label(const KinetoTrace& trace) {
  std::string name = fs::path(trace.source).filename().string();
  if (trace.file_ranks < 2 || !trace.distributed) return name;
  return fmt::format("{} (rank {})", name, trace.distributed->rank);
}

}  // namespace memplan::importers
