#include "tests/importers/kineto/synthetic_ranks.hpp"

#include <string>

#include "tests/importers/kineto/synthetic_kineto.hpp"

namespace memplan::test {
namespace {

using nlohmann::json;

constexpr std::int64_t kStreamNccl = 20;

json x_event(const std::string& cat, const std::string& name, int pid, int tid, double ts,
             double dur, json args) {
  return {{"ph", "X"},  {"cat", cat}, {"name", name}, {"pid", pid},
          {"tid", tid}, {"ts", ts},   {"dur", dur},   {"args", std::move(args)}};
}

// A kernel launched from thread `tid` at `launch`, running on `stream` from `start`.
void add_kernel(json& events, const std::string& name, int tid, double launch, std::int64_t stream,
                double start, std::int64_t dur, std::int64_t corr, std::int64_t ext) {
  events.push_back(x_event("cuda_runtime", "cudaLaunchKernel", 1, tid, launch, 2,
                           {{"correlation", corr}, {"External id", ext}}));
  events.push_back(
      x_event("kernel", name, 0, static_cast<int>(stream), start, static_cast<double>(dur),
              {{"stream", stream}, {"correlation", corr}, {"External id", ext}, {"device", 0}}));
  events.push_back({{"ph", "s"},
                    {"id", corr},
                    {"pid", 1},
                    {"tid", tid},
                    {"ts", launch},
                    {"cat", "ac2g"},
                    {"name", "ac2g"}});
  events.push_back({{"ph", "f"},
                    {"id", corr},
                    {"pid", 0},
                    {"tid", stream},
                    {"ts", start},
                    {"cat", "ac2g"},
                    {"name", "ac2g"},
                    {"bp", "e"}});
}

// DDP's all-reduce after the last backward op (which starts at `s`) and its finalize.
void add_allreduce(json& events, const SyntheticRank& o, double s, std::int64_t corr) {
  const std::int64_t ext = 900000 + corr;
  json args = {{"External id", ext}};
  if (o.collective_args) {
    args.update({{"Collective name", "allreduce"},
                 {"In msg nelems", o.allreduce_nelems},
                 {"Out msg nelems", o.allreduce_nelems},
                 {"dtype", "Float"},
                 {"Group size", o.world_size},
                 {"Process Group Name", "0"},
                 {"Process Group Description", "default_pg"},
                 {"Rank", o.rank}});
    std::string ranks = "[";
    for (int r = 0; r < o.world_size; ++r) ranks += (r > 0 ? ", " : "") + std::to_string(r);
    args["Process Group Ranks"] = ranks + "]";
  }
  events.push_back(x_event("cpu_op", "record_param_comms", 1, 2, s + 41, 8, args));
  events.push_back(x_event("user_annotation", "nccl:all_reduce", 1, 2, s + 42, 6,
                           {{"External id", ext + 1},
                            {"Input Dims", json::array({json::array({o.allreduce_nelems})})},
                            {"Input type", json::array({"float"})}}));
  add_kernel(events, "ncclDevKernel_Generic(ncclDevComm*, channelMasks, ncclWork*)", 2, s + 43,
             kStreamNccl, s + 45, o.allreduce_us, corr, ext);
  if (o.wait == SyntheticRank::Wait::kNone) return;
  events.push_back(x_event("cuda_runtime", "cudaStreamWaitEvent", 1, 2, s + 49, 0.5,
                           {{"correlation", corr + 1}}));
  if (o.wait != SyntheticRank::Wait::kSyncEvent) return;
  events.push_back(
      x_event("cuda_runtime", "cudaEventRecord", 1, 2, s + 47, 0.5, {{"correlation", corr + 2}}));
  events.push_back(x_event("cuda_sync", "Stream Wait Event", 0, 7, s + 60, 0,
                           {{"cuda_sync_kind", "Stream Wait Event"},
                            {"stream", 7},
                            {"correlation", corr + 1},
                            {"wait_on_stream", kStreamNccl},
                            {"wait_on_cuda_event_record_corr_id", corr + 2},
                            {"wait_on_cuda_event_id", 1},
                            {"device", 0}}));
}

}  // namespace

json synthetic_rank(const SyntheticRank& o) {
  SyntheticOptions base;
  base.steps = o.steps;
  base.step_idle_us = o.step_idle_us;
  base.memory = o.memory;
  json doc = synthetic_kineto(base);
  json& events = doc.at("traceEvents");
  json added = json::array();
  std::int64_t corr = 800000;
  bool side_done = false;
  for (const json& e : events) {
    const std::string name = e.value("name", "");
    if (name == "aten::relu_" && o.side_kernel && !side_done) {
      side_done = true;
      const double r = e.at("ts").get<double>();
      add_kernel(added, "void side_kernel()", 1, r + 35, 13, r + 36, 3, corr, 700000);
      corr += 10;
    }
    const bool last_backward =
        name == "autograd::engine::evaluate_function: ConvolutionBackward0" &&
        e.at("args").value("Sequence number", -1) == 10;
    if (!last_backward) continue;
    add_allreduce(added, o, e.at("ts").get<double>(), corr);
    corr += 10;
  }
  for (json& e : added) events.push_back(std::move(e));
  if (o.distributed_info)
    doc["distributedInfo"] = {{"backend", "nccl"}, {"rank", o.rank}, {"world_size", o.world_size}};
  return doc;
}

json merge_ranks(const std::vector<json>& ranks, bool rank_metadata) {
  json merged = {{"schemaVersion", 1}, {"traceEvents", json::array()}};
  json& out = merged["traceEvents"];
  for (std::size_t r = 0; r < ranks.size(); ++r) {
    const int offset = static_cast<int>(r + 1) * 1000;
    const double shift = static_cast<double>(r) * 100000;
    for (json e : ranks[r].at("traceEvents")) {
      e["pid"] = e.at("pid").get<int>() + offset;
      e["ts"] = e.at("ts").get<double>() + shift;
      out.push_back(std::move(e));
    }
    if (!rank_metadata) continue;
    for (int pid : {0, 1}) {
      out.push_back({{"ph", "M"},
                     {"name", "process_name"},
                     {"pid", pid + offset},
                     {"tid", 0},
                     {"args", {{"name", pid == 0 ? "GPU" : "CPU"}, {"rank", r}}}});
    }
  }
  return merged;
}

}  // namespace memplan::test
