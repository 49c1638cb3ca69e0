#include "tests/io/bad_traces.hpp"

#include <functional>

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
      "wrong version", [](json& j) { j["version"] = 3; }, "$.version",
      "version 3 is not supported");
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
  return cases;
}

}  // namespace memplan::test
