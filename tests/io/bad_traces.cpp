#include "tests/io/bad_traces.hpp"

#include <functional>
#include <utility>

namespace memplan::test {

using nlohmann::json;

json valid_small_trace() {
  return json::parse(R"({
    "format": "memplan-trace", "version": 1,
    "provenance": {"source": "hand-written"},
    "device": {"name": "toy", "memory_bytes": 1048576},
    "tensors": [
      {"id": 0, "name": "x", "bytes": 64, "kind": "input", "shape": [4, 4], "dtype": "float32", "producer": null},
      {"id": 1, "name": "w", "bytes": 64, "kind": "parameter", "shape": [4, 4], "dtype": "float32", "producer": null},
      {"id": 2, "name": "y", "bytes": 64, "kind": "activation", "shape": [4, 4], "dtype": "float32", "producer": 0},
      {"id": 3, "name": "a", "bytes": 64, "kind": "activation", "producer": 1},
      {"id": 4, "name": "g_w", "bytes": 64, "kind": "gradient", "producer": 2}
    ],
    "ops": [
      {"id": 0, "name": "fc", "layer": "linear", "phase": "forward", "inputs": [0, 1], "outputs": [2], "workspace_bytes": 0, "duration_ns": 100},
      {"id": 1, "name": "relu", "layer": "relu", "phase": "forward", "inputs": [2], "outputs": [3], "workspace_bytes": 0, "duration_ns": 10},
      {"id": 2, "name": "fc_bwd", "layer": "linear", "phase": "backward", "inputs": [3, 0], "outputs": [4], "workspace_bytes": 0, "duration_ns": 200, "differentiates": 0},
      {"id": 3, "name": "sgd", "layer": "sgd", "phase": "update", "inputs": [1, 4], "outputs": [], "workspace_bytes": 0, "duration_ns": 50}
    ]
  })");
}

json valid_v3_trace(int rank) {
  json j = valid_small_trace();
  j["version"] = 3;
  j["distributed"] = {{"backend", "nccl"}, {"rank", rank}, {"world_size", 2}};
  j["streams"] = {"compute", "nccl"};
  json sgd = j["ops"][3];
  sgd["id"] = 4;
  sgd["after"] = {3};
  j["ops"][3] = json::parse(R"({"id": 3, "name": "nccl:all_reduce", "layer": "nccl:all_reduce",
    "phase": "backward", "inputs": [4], "outputs": [], "workspace_bytes": 0, "duration_ns": 30,
    "stream": 1, "collective": {"kind": "all_reduce", "in_bytes": 64, "out_bytes": 64,
    "dtype": "float32", "group": "0", "sequence": 0}})");
  j["ops"].push_back(sgd);
  return j;
}

json valid_two_rank_job() {
  json job = {{"format", "memplan-trace"}, {"version", 3}, {"ranks", json::array()}};
  for (int rank : {0, 1}) {
    json body = valid_v3_trace(rank);
    body.erase("format");
    body.erase("version");
    job["ranks"].push_back(std::move(body));
  }
  return job;
}

namespace {

// Trace format v3's fields (streams, waits, collectives, the job), each broken one way.
std::vector<BadTrace> bad_v3_traces() {
  std::vector<BadTrace> cases;
  auto mutate = [&](std::string name, const std::function<void(json&)>& change, std::string where,
                    std::string problem) {
    json j = valid_v3_trace();
    change(j);
    cases.push_back({std::move(name), j.dump(), std::move(where), std::move(problem)});
  };
  auto collective = [&](std::string name, const json& fields, std::string where,
                        std::string problem) {
    mutate(
        std::move(name), [&](json& j) { j["ops"][3]["collective"].update(fields); },
        std::move(where), std::move(problem));
  };
  mutate(
      "a v3 field in a v2 trace",
      [](json& j) {
        j = valid_small_trace();
        j["version"] = 2;
        j["ops"][1]["stream"] = 0;
      },
      "$.ops[1]", "unknown field 'stream'");
  mutate(
      "a v3 field in a v1 trace",
      [](json& j) {
        j = valid_small_trace();
        j["distributed"] = {{"rank", 0}, {"world_size", 1}};
      },
      "$", "unknown field 'distributed'");
  mutate(
      "a job in a v2 trace",
      [](json& j) {
        j = valid_two_rank_job();
        j["version"] = 2;
      },
      "$", "unknown field 'ranks'");
  mutate(
      "a stream beyond the trace's streams", [](json& j) { j["ops"][1]["stream"] = 2; },
      "$.ops[1].stream", "stream 2 is not one of the 2 streams");
  mutate(
      "a negative stream", [](json& j) { j["ops"][1]["stream"] = -1; }, "$.ops[1].stream",
      "stream -1 is not one of the 2 streams");
  mutate(
      "a stream without streams", [](json& j) { j.erase("streams"); }, "$.ops[3].stream",
      "names no streams");
  mutate(
      "a mistyped stream", [](json& j) { j["ops"][3]["stream"] = "nccl"; }, "$.ops[3].stream",
      "expected an integer");
  mutate(
      "an empty stream label", [](json& j) { j["streams"][1] = ""; }, "$.streams[1]",
      "an empty label");
  mutate(
      "a stream label that is not a string", [](json& j) { j["streams"][0] = 7; }, "$.streams[0]",
      "expected a string");
  mutate(
      "after a later op", [](json& j) { j["ops"][2]["after"] = {3}; }, "$.ops[2].after[0]",
      "op 3 is not issued before op 2");
  mutate(
      "after an op of the same stream", [](json& j) { j["ops"][4]["after"] = {2}; },
      "$.ops[4].after[0]", "runs on the same stream (0)");
  mutate(
      "after the same op twice",
      [](json& j) {
        j["ops"][4]["after"] = {3, 3};
      },
      "$.ops[4].after[1]", "op 3 listed twice");
  mutate(
      "after an unknown op", [](json& j) { j["ops"][4]["after"] = {99}; }, "$.ops[4].after[0]",
      "unknown op id 99");
  mutate(
      "after a negative op id", [](json& j) { j["ops"][4]["after"] = {-1}; }, "$.ops[4].after[0]",
      "out of range");
  mutate(
      "after that is not a list", [](json& j) { j["ops"][4]["after"] = 3; }, "$.ops[4].after",
      "expected an array");
  collective("an unknown collective", {{"kind", "allreduce"}}, "$.ops[3].collective.kind",
             "unknown collective 'allreduce' (all_reduce, all_gather");
  collective("a collective of a mistyped size", {{"in_bytes", "64"}},
             "$.ops[3].collective.in_bytes", "expected an integer");
  collective("a collective of a negative size", {{"in_bytes", -64}}, "$.ops[3].collective.in_bytes",
             "negative size -64");
  collective("a collective of an absurd size", {{"out_bytes", 1LL << 51}},
             "$.ops[3].collective.out_bytes", "absurd size");
  collective("a negative sequence number", {{"sequence", -1}}, "$.ops[3].collective.sequence",
             "negative sequence number -1");
  collective("a group's rank listed twice", {{"ranks", {0, 0}}}, "$.ops[3].collective.ranks[1]",
             "rank 0 listed twice");
  collective("a group's rank beyond the world", {{"ranks", {0, 2}}}, "$.ops[3].collective.ranks[1]",
             "rank 2 is not below the world size 2");
  collective("a group's negative rank", {{"ranks", {0, -1}}}, "$.ops[3].collective.ranks[1]",
             "negative rank -1");
  collective("a group without this rank", {{"ranks", {1}}}, "$.ops[3].collective.ranks",
             "does not hold this step's own rank 0");
  collective("a peer of an all_reduce", {{"peer", 1}}, "$.ops[3].collective.peer",
             "a peer, but the collective is all_reduce");
  collective("a send without its peer", {{"kind", "send"}}, "$.ops[3].collective.peer",
             "a send names its peer");
  collective("a recv from itself", {{"kind", "recv"}, {"peer", 0}}, "$.ops[3].collective.peer",
             "peer 0 is this step's own rank");
  collective("a send beyond the world", {{"kind", "send"}, {"peer", 2}}, "$.ops[3].collective.peer",
             "peer 2 is not below the world size 2");
  collective("a negative peer", {{"kind", "send"}, {"peer", -1}}, "$.ops[3].collective.peer",
             "out of range");
  collective("an unknown collective field", {{"root", 0}}, "$.ops[3].collective",
             "unknown field 'root'");
  mutate(
      "a collective without its sequence",
      [](json& j) { j["ops"][3]["collective"].erase("sequence"); }, "$.ops[3].collective",
      "missing field 'sequence'");
  mutate(
      "one call of a group twice",
      [](json& j) { j["ops"][2]["collective"] = j["ops"][3]["collective"]; },
      "$.ops[3].collective.sequence", "all_reduce #0 of group '0' again: op 2 is that call");
  mutate(
      "a collective's op with a workspace", [](json& j) { j["ops"][3]["workspace_bytes"] = 16; },
      "$.ops[3].workspace_bytes", "a collective's op has no workspace");
  mutate(
      "a collective's op with algorithms",
      [](json& j) {
        j["ops"][3]["algorithms"] = {
            {{"name", "ring"}, {"workspace_bytes", 0}, {"duration_ns", 20}}};
      },
      "$.ops[3].algorithms", "a collective's op has no other algorithms");
  mutate(
      "a rank beyond the world", [](json& j) { j["distributed"]["rank"] = 2; },
      "$.distributed.rank", "rank 2 is not below the world size 2");
  mutate(
      "a negative rank", [](json& j) { j["distributed"]["rank"] = -1; }, "$.distributed.rank",
      "negative rank -1");
  mutate(
      "an empty world", [](json& j) { j["distributed"]["world_size"] = 0; },
      "$.distributed.world_size", "0 is out of range (1 to 1048576)");
  mutate(
      "a world too large", [](json& j) { j["distributed"]["world_size"] = 1 << 21; },
      "$.distributed.world_size", "2097152 is out of range (1 to 1048576)");
  mutate(
      "a distributed step without its rank", [](json& j) { j["distributed"].erase("rank"); },
      "$.distributed", "missing field 'rank'");
  mutate(
      "a mistyped backend", [](json& j) { j["distributed"]["backend"] = 1; },
      "$.distributed.backend", "expected a string");
  return cases;
}

}  // namespace

std::vector<BadTrace> bad_traces() {
  std::vector<BadTrace> cases;
  auto mutate = [&](std::string name, const std::function<void(json&)>& change, std::string where,
                    std::string problem) {
    json j = valid_small_trace();
    change(j);
    cases.push_back({std::move(name), j.dump(), std::move(where), std::move(problem)});
  };
  auto raw = [&](std::string name, std::string text, std::string where, std::string problem) {
    cases.push_back({std::move(name), std::move(text), std::move(where), std::move(problem)});
  };
  const std::string good = valid_small_trace().dump();

  raw("truncated JSON", good.substr(0, good.size() / 2), "bad.json", "not valid JSON");
  raw("empty file", "", "bad.json", "not valid JSON");
  raw("number beyond any JSON number type", "{\"format\": 1e99999}", "bad.json", "not valid JSON");
  raw("not an object", "[1, 2, 3]", "$", "expected an object");
  mutate(
      "wrong format name", [](json& j) { j["format"] = "chrome-trace"; }, "$.format",
      "is not 'memplan-trace'");
  mutate(
      "wrong version", [](json& j) { j["version"] = 4; }, "$.version",
      "version 4 is not supported");
  mutate(
      "a version-2 field in a version-1 trace", [](json& j) { j["launch_ns"] = 5000; }, "$",
      "unknown field 'launch_ns'");
  mutate(
      "a host side without dispatch_ns",
      [](json& j) {
        j["version"] = 2;
        j["ops"][0]["host"] = json::object();
      },
      "$.ops[0].host", "missing field 'dispatch_ns'");
  mutate(
      "host time before a wait on an op that does not wait",
      [](json& j) {
        j["version"] = 2;
        j["ops"][0]["host"] = {{"dispatch_ns", 10}, {"sync_after_ns", 5}};
      },
      "$.ops[0].host.sync_after_ns", "needs \"synchronizes\": true");
  mutate(
      "a string among an attribute's numbers",
      [](json& j) {
        j["ops"][1]["attributes"] = {{"stride", {1, "2"}}};
      },
      "$.ops[1].attributes.stride[1]", "expected a number");
  // A window of no size passed reading and failed only in a backend (#40 item 5).
  mutate(
      "a stride of 0",
      [](json& j) {
        j["ops"][1]["attributes"] = {{"stride", {1, 0}}};
      },
      "$.ops[1].attributes.stride[1]", "stride 0: expected a whole number of at least 1");
  mutate(
      "a kernel of 0",
      [](json& j) {
        j["ops"][1]["attributes"] = {{"kernel", 0}};
      },
      "$.ops[1].attributes.kernel", "kernel 0: expected a whole number of at least 1");
  mutate(
      "groups of 0",
      [](json& j) {
        j["ops"][1]["attributes"] = {{"groups", 0}};
      },
      "$.ops[1].attributes.groups", "groups 0: expected a whole number of at least 1");
  mutate(
      "a padding of -1",
      [](json& j) {
        j["ops"][1]["attributes"] = {{"padding", {-1, 1}}};
      },
      "$.ops[1].attributes.padding[0]", "padding -1: expected a whole number of at least 0");
  mutate(
      "an algorithm without its workspace",
      [](json& j) {
        j["ops"][0]["algorithms"] = {{{"name", "gemm"}, {"duration_ns", 5}}};
      },
      "$.ops[0].algorithms[0]", "missing field 'workspace_bytes'");
  raw("a profiler trace", "{\"traceEvents\": []}", "bad.json",
      "convert it first with `memplan import kineto");
  mutate(
      "missing ops", [](json& j) { j.erase("ops"); }, "$", "missing field 'ops'");
  mutate(
      "missing tensor bytes", [](json& j) { j["tensors"][2].erase("bytes"); }, "$.tensors[2]",
      "missing field 'bytes'");
  mutate(
      "missing producer", [](json& j) { j["tensors"][2].erase("producer"); }, "$.tensors[2]",
      "missing field 'producer'");
  mutate(
      "mistyped bytes", [](json& j) { j["tensors"][2]["bytes"] = "64"; }, "$.tensors[2].bytes",
      "expected an integer, found a string");
  mutate(
      "fractional duration", [](json& j) { j["ops"][0]["duration_ns"] = 1.5; },
      "$.ops[0].duration_ns", "expected an integer");
  mutate(
      "mistyped inputs", [](json& j) { j["ops"][0]["inputs"] = 0; }, "$.ops[0].inputs",
      "expected an array");
  mutate(
      "unknown field", [](json& j) { j["ops"][1]["duraton_ns"] = 5; }, "$.ops[1]",
      "unknown field 'duraton_ns'");
  mutate(
      "unknown kind", [](json& j) { j["tensors"][2]["kind"] = "feature"; }, "$.tensors[2].kind",
      "unknown kind 'feature'");
  mutate(
      "unknown phase", [](json& j) { j["ops"][1]["phase"] = "sideways"; }, "$.ops[1].phase",
      "unknown phase 'sideways'");
  mutate(
      "duplicate tensor id", [](json& j) { j["tensors"][3]["id"] = 2; }, "$.tensors[3].id",
      "id 2 where 3 was expected");
  mutate(
      "duplicate op id", [](json& j) { j["ops"][2]["id"] = 1; }, "$.ops[2].id",
      "id 1 where 2 was expected");
  mutate(
      "unknown input tensor", [](json& j) { j["ops"][2]["inputs"][1] = 99; }, "$.ops[2].inputs[1]",
      "unknown tensor id 99");
  mutate(
      "unknown producer op", [](json& j) { j["tensors"][3]["producer"] = 42; },
      "$.tensors[3].producer", "unknown op id 42");
  mutate(
      "negative id", [](json& j) { j["ops"][0]["inputs"][0] = -1; }, "$.ops[0].inputs[0]",
      "out of range");
  mutate(
      "negative size", [](json& j) { j["tensors"][3]["bytes"] = -64; }, "$.tensors[3].bytes",
      "negative size -64");
  mutate(
      "absurd size", [](json& j) { j["tensors"][3]["bytes"] = 1LL << 60; }, "$.tensors[3].bytes",
      "absurd size");
  mutate(
      "size beyond 64 bits", [](json& j) { j["tensors"][3]["bytes"] = 18446744073709551615ULL; },
      "$.tensors[3].bytes", "out of range");
  mutate(
      "size disagrees with shape", [](json& j) { j["tensors"][2]["bytes"] = 60; },
      "$.tensors[2].bytes", "needs 64");
  mutate(
      "negative duration", [](json& j) { j["ops"][1]["duration_ns"] = -10; },
      "$.ops[1].duration_ns", "negative duration");
  mutate(
      "absurd duration", [](json& j) { j["ops"][1]["duration_ns"] = 10'000'000'000'000LL; },
      "$.ops[1].duration_ns", "absurd duration");
  mutate(
      "negative workspace", [](json& j) { j["ops"][0]["workspace_bytes"] = -1; },
      "$.ops[0].workspace_bytes", "negative size");
  mutate(
      "producer does not list output", [](json& j) { j["ops"][1]["outputs"] = json::array(); },
      "$.tensors[3].producer", "does not list tensor 3");
  mutate(
      "output claimed by another op",
      [](json& j) {
        j["ops"][0]["outputs"] = {2, 3};
      },
      "$.ops[0].outputs[1]", "whose producer is op 1");
  mutate(
      "parameter with a producer", [](json& j) { j["tensors"][1]["producer"] = 0; },
      "$.tensors[1].producer", "exists before the step");
  mutate(
      "cycle in the forward graph",
      [](json& j) {
        j["ops"][0]["inputs"] = {0, 1, 3};  // fc reads relu's output, relu reads fc's
      },
      "$.ops[0]", "cycle in the forward graph: 'fc' -> 'relu' -> 'fc'");
  mutate(
      "backward reads a tensor no op produced",
      [](json& j) {
        j["tensors"].push_back({{"id", 5},
                                {"name", "ghost"},
                                {"bytes", 64},
                                {"kind", "gradient"},
                                {"producer", nullptr}});
        j["ops"][2]["inputs"].push_back(5);
      },
      "$.ops[2].inputs[2]", "reads gradient tensor 5 'ghost' that no op produces");
  mutate(
      "used before produced",
      [](json& j) {
        // fc_bwd moves before relu, so it reads relu's output before relu runs.
        std::swap(j["ops"][1], j["ops"][2]);
        j["ops"][1]["id"] = 1;
        j["ops"][2]["id"] = 2;
        j["tensors"][3]["producer"] = 2;
        j["tensors"][4]["producer"] = 1;
      },
      "$.ops[1].inputs[0]", "before it is produced");
  mutate(
      "reads its own output",
      [](json& j) {
        j["ops"][1]["inputs"] = {2, 3};
      },
      "$.ops[1]", "cycle");
  mutate(
      "differentiates a backward op", [](json& j) { j["ops"][2]["differentiates"] = 2; },
      "$.ops[2].differentiates", "is not a forward op");
  mutate(
      "in place over a tensor still read",
      [](json& j) {
        j["tensors"][3]["in_place_of"] = 2;
        j["ops"][2]["inputs"] = {3, 0, 2};
      },
      "$.tensors[3].in_place_of", "still read after");
  mutate(
      "bad device memory", [](json& j) { j["device"]["memory_bytes"] = "lots"; },
      "$.device.memory_bytes", "expected an integer");
  mutate(
      "host-op speed not positive", [](json& j) { j["device"]["host_bytes_per_s"] = 0; },
      "$.device.host_bytes_per_s", "must be positive");
  mutate(
      "unknown allocator model", [](json& j) { j["device"]["allocator"] = "cnmem"; },
      "$.device.allocator", "expected \"arena\" or \"caching\"");
  mutate(
      "bad provenance", [](json& j) { j["provenance"]["source"] = "dreamt"; },
      "$.provenance.source", "is not one of");
  for (BadTrace& bad : bad_v3_traces()) cases.push_back(std::move(bad));
  return cases;
}

}  // namespace memplan::test
