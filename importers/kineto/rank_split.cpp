#include "importers/kineto/rank_split.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "importers/kineto/comm_args.hpp"
#include "importers/kineto/event_reader.hpp"
#include "importers/kineto/step_events.hpp"

// Note [Ranks of a file]
// ~~~~~~~~~~~~~~~~~~~~~~~
// The profiler writes one file per process, so a file it wrote holds one rank; with
// torch.distributed initialised its top-level `distributedInfo` names the rank, the world size and
// the backend. A tool that merges the files of a job (TraceLens) keeps each rank's events under
// process ids of its own: CPU events under the rank's process, device events under its device.
// The importer groups a file's pids into ranks by what the file says, in this order:
//  1. a file with `distributedInfo` is one rank, whatever its pids;
//  2. metadata events (`"ph": "M"`: process_name, thread_name, ...) that carry an integer `rank`
//     argument give their pid that rank; when they name two ranks or more the file is a merged
//     one, and the events of a pid no metadata names (the profiler's "Spans" and "Traces") are
//     left out;
//  3. else each process that recorded ProfilerStep#N events of its own is a rank (numbered in the
//     order of their pids: nothing else numbers them), and each device pid belongs to the process
//     whose launches reach it: for every ac2g flow end on the device, the process with the latest
//     flow start of the same id before it (each rank counts its own ids, so a merged file repeats
//     them), by majority; a device that no flow reaches is an error;
//  4. else (one process with steps, or none) the whole file is one rank.
// A rank's number is distributedInfo's, else the metadata's, else its collectives' "Rank"
// argument, else its place in rule 3's order; its world size is distributedInfo's, else the
// largest of the ranks the file holds, one past the largest rank number, and the collectives'
// "Group size". The backend is distributedInfo's, else the library of its collectives (nccl, or
// rccl where the runtime calls are HIP's; gloo for gloo:* ops). The numbers are never derived from
// how a tool offset the pids.

namespace memplan::importers::detail {

namespace {

using nlohmann::json;

std::string string_or(const json& e, const char* key) {
  const json* v = e.is_object() ? EventReader::find(e, key) : nullptr;
  return v != nullptr && v->is_string() ? v->get<std::string>() : std::string();
}

bool is_device_event(std::string_view cat) {
  return cat == "kernel" || cat == "Kernel" || cat == "gpu_memcpy" || cat == "gpu_memset" ||
         cat == "Memcpy" || cat == "Memset";
}

// Orders pids numerically where they are numbers.
bool pid_less(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return a.size() < b.size();
  return a < b;
}

}  // namespace

std::optional<std::string> RankSplit::pid_of(const json& event) {
  if (!event.is_object()) return std::nullopt;
  const json* v = EventReader::find(event, "pid");
  if (v == nullptr) return std::nullopt;
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
  if (v->is_number_unsigned()) return std::to_string(v->get<std::uint64_t>());
  return std::nullopt;
}

std::size_t RankSplit::pid_number(const std::string& pid) {
  const auto [it, added] = pid_numbers_.emplace(pid, pids_.size());
  if (added) pids_.push_back(pid);
  return it->second;
}

void RankSplit::observe(const json& e, const std::optional<std::string>& pid_text,
                        std::size_t index) {
  if (!pid_text) return;
  const std::size_t pid = pid_number(*pid_text);
  const std::string ph = string_or(e, "ph");
  if (ph == "M") {
    if (metadata_error_) return;
    try {
      const EventReader r(e, source_, index);
      if (const auto rank = r.int_arg({"rank"})) {
        if (*rank < 0 || *rank >= (std::int64_t{1} << 24))
          r.fail("args.rank", fmt::format("implausible rank {}", *rank));
        const auto [it, added] = rank_of_pid_.emplace(pid, static_cast<std::int32_t>(*rank));
        if (!added && it->second != *rank) {
          r.fail("args.rank",
                 fmt::format("pid {} was given rank {} before", *pid_text, it->second));
        }
      }
    } catch (const sim::InputError& error) {
      metadata_error_ = error;  // an error only if the metadata decides (not distributedInfo)
    }
    return;
  }
  const std::string cat = string_or(e, "cat");
  const bool host = cat == "user_annotation" || cat == "cpu_op" || cat == "Operator";
  if (host && ph == "X" && step_number(string_or(e, "name"))) step_pids_.insert(pid);
  if (is_device_event(cat)) device_pids_.insert(pid);
  if (cat != "ac2g" && cat != "async_cpu_to_gpu") return;
  const json* id = EventReader::find(e, "id");
  const json* ts = EventReader::find(e, "ts");
  if (id == nullptr || ts == nullptr || !id->is_number_integer() || !ts->is_number()) return;
  if (ph == "s") flow_starts_[id->get<std::int64_t>()].emplace_back(pid, ts->get<double>());
  if (ph == "f") flow_ends_.emplace_back(pid, id->get<std::int64_t>(), ts->get<double>());
}

void RankSplit::decide(bool distributed_info) {
  if (distributed_info) {
    rule_ = "distributedInfo";
  } else if (!by_metadata()) {
    by_steps();
  }
  // What the split needed of the events is no longer needed.
  step_pids_.clear();
  device_pids_.clear();
  flow_starts_.clear();
  flow_ends_.clear();
}

std::optional<std::size_t> RankSplit::part_of(const std::optional<std::string>& pid) const {
  if (part_of_pid_.empty()) return 0;
  if (!pid) return std::nullopt;
  const auto it = part_of_pid_.find(*pid);
  if (it == part_of_pid_.end()) return std::nullopt;
  return it->second;
}

bool RankSplit::by_metadata() {
  if (metadata_error_) throw sim::InputError(*metadata_error_);
  std::set<std::int32_t> ranks;
  for (const auto& [pid, rank] : rank_of_pid_) ranks.insert(rank);
  if (ranks.empty()) return false;
  ranks_.assign(ranks.begin(), ranks.end());
  rule_ = "the metadata's rank";
  if (ranks.size() == 1) return true;  // the whole file, its rank named
  for (const auto& [pid, rank] : rank_of_pid_) {
    part_of_pid_[pids_[pid]] =
        static_cast<std::size_t>(std::distance(ranks.begin(), ranks.find(rank)));
  }
  return true;
}

bool RankSplit::by_steps() {
  if (step_pids_.size() < 2) return false;
  std::vector<std::size_t> steps(step_pids_.begin(), step_pids_.end());
  std::sort(steps.begin(), steps.end(),
            [&](std::size_t a, std::size_t b) { return pid_less(pids_[a], pids_[b]); });
  std::map<std::size_t, std::size_t> part;  // pid -> part
  for (const std::size_t pid : steps) part.emplace(pid, part.size());
  std::map<std::size_t, std::map<std::size_t, std::size_t>> votes;  // device pid -> part -> n
  for (const auto& [device, id, ts] : flow_ends_) {
    const auto s = flow_starts_.find(id);
    if (s == flow_starts_.end()) continue;
    const std::pair<std::size_t, double>* best = nullptr;
    for (const auto& candidate : s->second) {
      if (candidate.second <= ts && part.count(candidate.first) > 0 &&
          (best == nullptr || candidate.second > best->second))
        best = &candidate;
    }
    if (best != nullptr) ++votes[device][part.at(best->first)];
  }
  ranks_.assign(steps.size(), std::nullopt);
  for (const auto& [pid, p] : part) part_of_pid_[pids_[pid]] = p;
  std::vector<std::size_t> devices(device_pids_.begin(), device_pids_.end());
  std::sort(devices.begin(), devices.end(), [&](std::size_t a, std::size_t b) {
    return pids_[a] < pids_[b];  // the order the error names the first of (as text)
  });
  for (const std::size_t device : devices) {
    if (part.count(device) > 0) continue;
    const auto v = votes.find(device);
    if (v == votes.end()) {
      throw sim::InputError(
          source_, fmt::format("{} processes record their own ProfilerStep#N, but no launch of "
                               "theirs reaches the device of pid {}: cannot tell which rank it is",
                               steps.size(), pids_[device]));
    }
    const auto most =
        std::max_element(v->second.begin(), v->second.end(),
                         [](const auto& a, const auto& b) { return a.second < b.second; });
    part_of_pid_[pids_[device]] = most->first;
  }
  rule_ = "each process with its own ProfilerStep#N";
  return true;
}

std::optional<sim::Distributed> read_distributed_info(const json& document,
                                                      std::string_view source) {
  if (!document.is_object()) return std::nullopt;
  const json* info = EventReader::find(document, "distributedInfo");
  if (info == nullptr) return std::nullopt;
  auto fail = [&](std::string_view field, const std::string& what) -> void {
    throw sim::InputError(
        fmt::format("{}: $.distributedInfo{}{}", source, field.empty() ? "" : ".", field), what);
  };
  if (!info->is_object()) fail("", "expected an object");
  sim::Distributed d;
  if (const json* b = EventReader::find(*info, "backend")) {
    if (!b->is_string()) fail("backend", "expected a string");
    d.backend = b->get<std::string>();
  }
  auto integer = [&](const char* key, std::int64_t low) -> std::int64_t {
    const json* v = EventReader::find(*info, key);
    if (v == nullptr) fail(key, "missing field");
    if (!v->is_number_integer()) fail(key, "expected an integer");
    const auto n = v->get<std::int64_t>();
    if (n < low || n >= (std::int64_t{1} << 24)) fail(key, fmt::format("implausible value {}", n));
    return n;
  };
  d.world_size = static_cast<std::int32_t>(integer("world_size", 1));
  d.rank = static_cast<std::int32_t>(integer("rank", 0));
  if (d.rank >= d.world_size)
    fail("rank", fmt::format("rank {} of a world of {}", d.rank, d.world_size));
  return d;
}

namespace {

// What the collectives of a trace say of its job: the largest group, this process's rank, the
// library.
struct CommSummary {
  bool any = false;
  bool nccl = false;
  std::int64_t largest_group = 0;
  std::optional<std::int64_t> rank;
};

CommSummary summarize_comms(const KinetoTrace& trace) {
  CommSummary s;
  auto take = [&](const CommArgs& c) {
    s.any = true;
    s.largest_group = std::max(s.largest_group, c.group_size.value_or(0));
    if (!s.rank && c.rank) s.rank = c.rank;
  };
  for (const CpuEvent& e : trace.cpu_events) {
    if (!e.comm) continue;
    take(*e.comm);
    if (!starts_with(e.name, "gloo:")) s.nccl = true;
  }
  for (const GpuEvent& g : trace.gpu_events) {
    if (g.comm) take(*g.comm);
    if (g.kind == GpuKind::kKernel && starts_with(g.name, "nccl")) s.nccl = s.any = true;
  }
  return s;
}

}  // namespace

void settle_distributed(KinetoTrace& trace, std::optional<std::int32_t> rank,
                        std::size_t file_ranks) {
  trace.rank_known = trace.distributed.has_value() || rank.has_value();
  if (trace.distributed) return;  // distributedInfo says it all
  const CommSummary comms = summarize_comms(trace);
  trace.rank_known = trace.rank_known || comms.rank.has_value();
  if (!comms.any && !rank && file_ranks < 2) return;  // a single-GPU step
  sim::Distributed d;
  d.backend = !comms.any ? "" : !comms.nccl ? "gloo" : trace.hip ? "rccl" : "nccl";
  d.rank = rank.value_or(static_cast<std::int32_t>(comms.rank.value_or(0)));
  const std::int64_t world = std::max<std::int64_t>(
      {static_cast<std::int64_t>(file_ranks), std::int64_t{d.rank} + 1, comms.largest_group});
  d.world_size = static_cast<std::int32_t>(world);
  trace.distributed = d;
}

}  // namespace memplan::importers::detail
