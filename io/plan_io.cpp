#include "io/plan_io.hpp"

#include <algorithm>
#include <limits>
#include <unordered_map>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "io/json_reader.hpp"
#include "io/trace_io.hpp"

namespace memplan::sim {

namespace {

constexpr std::int64_t kMaxId = std::numeric_limits<std::int32_t>::max();

// Resolves a reference to a tensor or op given as an id or a unique name.
template <typename Items>
auto resolve(const JsonReader& r, const Items& items, std::string_view what) {
  using Id = decltype(items.front().id);  // TensorId or OpId
  if (r.value().is_number_integer()) {
    const auto id = r.as_int(0, kMaxId);
    if (id >= static_cast<std::int64_t>(items.size())) {
      r.fail(fmt::format("unknown {} id {}", what, id));
    }
    return static_cast<Id>(static_cast<std::int32_t>(id));
  }
  const std::string name = r.as_string();
  constexpr Id kNone{-1};
  Id found = kNone;
  for (const auto& item : items) {
    if (item.name != name) continue;
    if (found != kNone) r.fail(fmt::format("{} name '{}' is ambiguous; use its id", what, name));
    found = item.id;
  }
  if (found == kNone) r.fail(fmt::format("unknown {} '{}'", what, name));
  return found;
}

// A host-placed tensor's "prefetches": the groups of its uses prefetched before another op than
// the default (Note [Host placement]); checked once the update's place is known.
void read_host_prefetches(const JsonReader& list, TensorId t, const Workload& workload, Plan& plan,
                          std::vector<JsonReader>& readers) {
  for (const JsonReader& entry : list.elements()) {
    entry.reject_unknown_keys({"first_use", "prefetch_before"});
    const JsonReader first_use = entry.at("first_use");
    const OpId first = resolve(first_use, workload.ops, "op");
    for (const HostPrefetch& p : plan.host_prefetches) {
      if (p.tensor == t && p.first_use == first) {
        first_use.fail(
            fmt::format("the group of uses from op '{}' is named twice", workload.op(first).name));
      }
    }
    plan.host_prefetches.push_back(
        {t, first, resolve(entry.at("prefetch_before"), workload.ops, "op")});
    readers.push_back(entry);
  }
}

// "tensors" (placements of tensors other than feature maps, and their groups' prefetch points) and
// "update" (Note [Host placement]).
void read_host_placement(const JsonReader& root, const Workload& workload, Plan& plan) {
  std::vector<JsonReader> prefetch_entries;  // in plan.host_prefetches order, before sorting
  if (auto tensors = root.find("tensors")) {
    for (const JsonReader& entry : tensors->elements()) {
      entry.reject_unknown_keys({"tensor", "placement", "prefetches"});
      const JsonReader tensor_ref = entry.at("tensor");
      const TensorId t = resolve(tensor_ref, workload.tensors, "tensor");
      const JsonReader placement = entry.at("placement");
      const std::string where = placement.as_string();
      if (where != "host" && where != "device") {
        placement.fail(fmt::format("unknown placement '{}' (host, device)", where));
      }
      if (std::find(plan.host_tensors.begin(), plan.host_tensors.end(), t) !=
          plan.host_tensors.end()) {
        tensor_ref.fail(fmt::format("tensor '{}' is named twice", workload.tensor(t).name));
      }
      if (auto problem = host_placement_problem(t, workload); !problem.empty() && where == "host") {
        entry.fail(fmt::format("tensor '{}' cannot be placed on the host: {}",
                               workload.tensor(t).name, problem));
      }
      if (where == "host") plan.host_tensors.push_back(t);
      if (auto prefetches = entry.find("prefetches")) {
        if (where != "host") {
          prefetches->fail(
              fmt::format("tensor '{}' is on the device: only a host-placed tensor's "
                          "uses are prefetched",
                          workload.tensor(t).name));
        }
        read_host_prefetches(*prefetches, t, workload, plan, prefetch_entries);
      }
    }
    std::sort(plan.host_tensors.begin(), plan.host_tensors.end());
  }
  if (auto update = root.find("update")) {
    const std::string where = update->as_string();
    if (where != "host" && where != "device") {
      update->fail(fmt::format("unknown update placement '{}' (host, device)", where));
    }
    plan.host_update = where == "host";
    if (auto problem = host_update_problem(plan, workload); !problem.empty()) update->fail(problem);
  }
  const std::vector<std::string> problems = host_prefetch_problems(plan, workload);
  for (std::size_t i = 0; i < problems.size(); ++i) {
    if (!problems[i].empty()) prefetch_entries[i].fail(problems[i]);
  }
  std::sort(plan.host_prefetches.begin(), plan.host_prefetches.end(),
            [](const HostPrefetch& a, const HostPrefetch& b) {
              return std::pair(a.tensor, a.first_use) < std::pair(b.tensor, b.first_use);
            });
}

// "format" and "version": a plan file (or a job plan file) of the version this memplan reads.
void check_format(const JsonReader& root, std::string_view format = kPlanFormatName) {
  const std::string found = root.at("format").as_string();
  if (found == kJobPlanFormatName && format == kPlanFormatName) {
    root.at("format").fail("a job's plans, one per rank: give them with the job's trace");
  }
  if (found != format) root.at("format").fail(fmt::format("expected \"{}\"", format));
  const auto version = root.at("version").as_int(0, kMaxId);
  if (version != kPlanFormatVersion) {
    root.at("version").fail(fmt::format(
        "unsupported plan format version {} (this memplan reads {})", version, kPlanFormatVersion));
  }
}

// "workload": the fingerprint of the workload the plan was made for, which must be this one's.
void read_fingerprint(const JsonReader& root, const Workload& workload, Plan& plan) {
  const JsonReader wl = root.at("workload");
  wl.reject_unknown_keys({"fingerprint", "ops", "tensors"});
  const JsonReader fp = wl.at("fingerprint");
  const std::string fp_text = fp.as_string();
  std::size_t parsed = 0;
  try {
    plan.fingerprint = std::stoull(fp_text, &parsed, 16);
  } catch (const std::exception&) {
    parsed = 0;
  }
  if (fp_text.size() != 16 || parsed != fp_text.size()) fp.fail("expected 16 hexadecimal digits");
  if (plan.fingerprint != workload_fingerprint(workload)) {
    fp.fail(fmt::format(
        "the plan was made for another workload (fingerprint {}, this trace has {:016x})", fp_text,
        workload_fingerprint(workload)));
  }
}

// "maps": a decision for every feature map of the workload, keep unless the file names it.
void read_decisions(const JsonReader& root, const Workload& workload, Plan& plan) {
  const auto maps = find_feature_maps(workload);
  std::vector<std::int32_t> map_index(workload.tensors.size(), -1);
  for (std::size_t i = 0; i < maps.size(); ++i) {
    map_index[index(maps[i].tensor)] = static_cast<std::int32_t>(i);
    plan.decisions.push_back(Decision{maps[i].tensor, Action::kKeep, Encoding::kNone, kNoOp});
  }
  std::vector<bool> seen(maps.size(), false);
  for (const JsonReader& entry : root.at("maps").elements()) {
    entry.reject_unknown_keys({"tensor", "action", "prefetch_before", "release_before", "per_use"});
    const JsonReader tensor_ref = entry.at("tensor");
    const TensorId t = resolve(tensor_ref, workload.tensors, "tensor");
    const auto map = map_index[index(t)];
    if (map < 0) {
      tensor_ref.fail(
          fmt::format("tensor '{}' is not a feature map (an activation written in "
                      "forward and read in backward)",
                      workload.tensor(t).name));
    }
    if (seen[static_cast<std::size_t>(map)]) {
      tensor_ref.fail(fmt::format("tensor '{}' is named twice", workload.tensor(t).name));
    }
    seen[static_cast<std::size_t>(map)] = true;
    Decision& d = plan.decisions[static_cast<std::size_t>(map)];
    const JsonReader action = entry.at("action");
    const auto parsed_action = parse_action(action.as_string());
    if (!parsed_action) {
      action.fail(
          fmt::format("unknown action '{}' (keep, swap, recompute, encode:binarize, "
                      "encode:sparse, encode:fp16, encode:fp10, encode:fp8)",
                      action.as_string()));
    }
    d.action = parsed_action->first;
    d.encoding = parsed_action->second;
    if (auto prefetch = entry.find("prefetch_before"))
      d.prefetch_before = resolve(*prefetch, workload.ops, "op");
    if (auto release = entry.find("release_before"))
      d.release_before = resolve(*release, workload.ops, "op");
    if (auto per_use = entry.find("per_use")) d.per_use = per_use->as_bool();
    if (auto problem = decision_problem(d, maps[static_cast<std::size_t>(map)], workload);
        !problem.empty()) {
      entry.fail(fmt::format("tensor '{}': {}", workload.tensor(t).name, problem));
    }
  }
}

// "algorithms": the ops that run another of their algorithms than the default, in op order.
void read_algorithms(const JsonReader& root, const Workload& workload, Plan& plan) {
  const auto algorithms = root.find("algorithms");
  if (!algorithms) return;
  for (const JsonReader& entry : algorithms->elements()) {
    entry.reject_unknown_keys({"op", "algorithm"});
    const OpId op = resolve(entry.at("op"), workload.ops, "op");
    const JsonReader name = entry.at("algorithm");
    const auto& choices = workload.op(op).algorithms;
    const auto it = std::find_if(choices.begin(), choices.end(),
                                 [&](const Algorithm& a) { return a.name == name.as_string(); });
    if (it == choices.end()) {
      name.fail(
          fmt::format("op '{}' has no algorithm '{}'", workload.op(op).name, name.as_string()));
    }
    plan.algorithms.push_back({op, static_cast<std::int32_t>(it - choices.begin())});
  }
  std::sort(plan.algorithms.begin(), plan.algorithms.end(),
            [](const AlgorithmChoice& a, const AlgorithmChoice& b) { return a.op < b.op; });
}

}  // namespace

Plan plan_from_json(const nlohmann::json& document, std::string_view source,
                    const Workload& workload) {
  const JsonReader root(document, source);
  check_format(root);
  root.reject_unknown_keys(
      {"format", "version", "policy", "workload", "maps", "algorithms", "tensors", "update"});
  Plan plan;
  if (auto policy = root.find("policy")) plan.policy = policy->as_string();
  read_fingerprint(root, workload, plan);
  read_decisions(root, workload, plan);
  read_algorithms(root, workload, plan);
  read_host_placement(root, workload, plan);
  validate_plan(plan, workload, source);
  return plan;
}

Plan parse_plan(std::string_view text, std::string_view source, const Workload& workload) {
  return plan_from_json(parse_json(text, source), source, workload);
}

Plan read_plan(const std::filesystem::path& path, const Workload& workload) {
  return plan_from_json(read_json(path), path.string(), workload);
}

std::string write_plan(const Plan& plan, const Workload& workload) {
  std::unordered_map<std::string, int> tensor_names;
  for (const Tensor& t : workload.tensors) ++tensor_names[t.name];
  std::unordered_map<std::string, int> op_names;
  for (const Op& op : workload.ops) ++op_names[op.name];
  // An op by its name when that is unique, else by its id.
  auto op_ref = [&](OpId id) {
    const Op& op = workload.op(id);
    return op_names[op.name] == 1 ? nlohmann::json(op.name) : nlohmann::json(value(op.id));
  };
  std::string out = "{\n";
  out +=
      fmt::format("\"format\": \"{}\",\n\"version\": {},\n", kPlanFormatName, kPlanFormatVersion);
  out += fmt::format("\"policy\": {},\n", nlohmann::json(plan.policy).dump());
  out += fmt::format("\"workload\": {{\"fingerprint\":\"{:016x}\",\"ops\":{},\"tensors\":{}}},\n",
                     plan.fingerprint, workload.ops.size(), workload.tensors.size());
  out += "\"maps\": [";
  bool first = true;
  for (const Decision& d : plan.decisions) {
    const Tensor& t = workload.tensor(d.tensor);
    nlohmann::json ref =
        tensor_names[t.name] == 1 ? nlohmann::json(t.name) : nlohmann::json(value(t.id));
    out += fmt::format("{}\n  {{\"tensor\":{},\"action\":\"{}\"", first ? "" : ",", ref.dump(),
                       action_label(d.action, d.encoding));
    auto write_op = [&](std::string_view key, OpId id) {
      if (id != kNoOp) out += fmt::format(",\"{}\":{}", key, op_ref(id).dump());
    };
    write_op("prefetch_before", d.prefetch_before);
    write_op("release_before", d.release_before);
    if (d.per_use) out += ",\"per_use\":true";
    out += "}";
    first = false;
  }
  out += "\n]";
  if (!plan.algorithms.empty()) {
    out += ",\n\"algorithms\": [";
    for (std::size_t i = 0; i < plan.algorithms.size(); ++i) {
      const Op& op = workload.op(plan.algorithms[i].op);
      out += fmt::format(
          "{}\n  {{\"op\":{},\"algorithm\":{}}}", i == 0 ? "" : ",", op_ref(op.id).dump(),
          nlohmann::json(op.algorithms[static_cast<std::size_t>(plan.algorithms[i].algorithm)].name)
              .dump());
    }
    out += "\n]";
  }
  if (!plan.host_tensors.empty()) {
    out += ",\n\"tensors\": [";
    auto prefetch = plan.host_prefetches.begin();  // both ascending by tensor
    for (std::size_t i = 0; i < plan.host_tensors.size(); ++i) {
      const Tensor& t = workload.tensor(plan.host_tensors[i]);
      nlohmann::json ref =
          tensor_names[t.name] == 1 ? nlohmann::json(t.name) : nlohmann::json(value(t.id));
      out += fmt::format("{}\n  {{\"tensor\":{},\"placement\":\"host\"", i == 0 ? "" : ",",
                         ref.dump());
      std::string prefetches;
      for (; prefetch != plan.host_prefetches.end() && prefetch->tensor == t.id; ++prefetch) {
        prefetches += fmt::format("{}{{\"first_use\":{},\"prefetch_before\":{}}}",
                                  prefetches.empty() ? "" : ",", op_ref(prefetch->first_use).dump(),
                                  op_ref(prefetch->prefetch_before).dump());
      }
      if (!prefetches.empty()) out += fmt::format(",\"prefetches\":[{}]", prefetches);
      out += "}";
    }
    out += "\n]";
  }
  if (plan.host_update) out += ",\n\"update\": \"host\"";
  out += "\n}\n";
  return out;
}

std::vector<Plan> read_job_plans(const std::filesystem::path& path, const Job& job) {
  const nlohmann::json document = read_json(path);
  const std::string source = path.string();
  const JsonReader root(document, source);
  std::vector<Plan> plans;
  if (!document.is_object() || !document.contains("format") ||
      document.at("format") != kJobPlanFormatName) {
    for (const Workload& rank : job.ranks) plans.push_back(plan_from_json(document, source, rank));
    return plans;
  }
  root.reject_unknown_keys({"format", "version", "ranks"});
  check_format(root, kJobPlanFormatName);
  const std::vector<JsonReader> ranks = root.at("ranks").elements();
  if (ranks.size() != job.ranks.size()) {
    root.at("ranks").fail(
        fmt::format("{} plans for a job of {} ranks", ranks.size(), job.ranks.size()));
  }
  for (std::size_t i = 0; i < ranks.size(); ++i) {
    ranks[i].reject_unknown_keys({"rank", "plan"});
    if (ranks[i].at("rank").as_int(0, kMaxId) != job.rank_of(i)) {
      ranks[i].at("rank").fail(
          fmt::format("expected rank {} (the job's ranks, in order)", job.rank_of(i)));
    }
    plans.push_back(plan_from_json(ranks[i].at("plan").value(),
                                   fmt::format("{}: ranks[{}].plan", source, i), job.ranks[i]));
  }
  return plans;
}

std::string write_job_plan(const std::vector<Plan>& plans, const Job& job) {
  std::string out = fmt::format("{{\n\"format\": \"{}\",\n\"version\": {},\n\"ranks\": [",
                                kJobPlanFormatName, kPlanFormatVersion);
  for (std::size_t i = 0; i < plans.size(); ++i) {
    std::string plan = write_plan(plans[i], job.ranks[i]);
    while (!plan.empty() && plan.back() == '\n') plan.pop_back();
    out +=
        fmt::format("{}\n{{\"rank\": {}, \"plan\":\n{}}}", i == 0 ? "" : ",", job.rank_of(i), plan);
  }
  return out + "\n]\n}\n";
}

}  // namespace memplan::sim
