// Trace format v3: jobs of several ranks and the fields of a step on several GPUs (streams,
// waits, collectives, the step's place in its job), read, written and checked; v1 and v2 output
// unchanged. Bad single-step v3 traces are in tests/io/bad_traces.cpp's table.
#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/core.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "io/trace_io.hpp"
#include "tests/io/bad_traces.hpp"
#include "tests/support/run_command.hpp"

using namespace memplan::sim;
using memplan::test::source_path;
using memplan::test::valid_two_rank_job;
using memplan::test::valid_v3_trace;
using nlohmann::json;

namespace {

// The message parse_job gives `job`, or "accepted".
std::string job_error(const json& job) {
  try {
    parse_job(job.dump(), "job.json");
  } catch (const InputError& e) {
    return e.what();
  }
  return "accepted";
}

// A collective of `kind` of 64 bytes, #0 of group "0", appended to a rank's ops on the nccl
// stream; a send or a recv goes to or comes from `peer`.
void add_collective(json& rank, const std::string& kind, int peer = -1) {
  json op = {{"id", rank["ops"].size()}, {"name", "nccl:" + kind},  {"layer", "nccl:" + kind},
             {"phase", "backward"},      {"inputs", json::array()}, {"outputs", json::array()},
             {"workspace_bytes", 0},     {"duration_ns", 10},       {"stream", 1}};
  op["collective"] = {
      {"kind", kind}, {"in_bytes", 64}, {"out_bytes", 64}, {"group", "0"}, {"sequence", 0}};
  if (peer >= 0) op["collective"]["peer"] = peer;
  rank["ops"].push_back(std::move(op));
}

// The top-level keys of a written trace, in order (each at the start of a line).
std::vector<std::string> top_keys(const std::string& text) {
  std::vector<std::string> keys;
  for (std::size_t at = 0; at < text.size(); at = text.find('\n', at) + 1) {
    if (text[at] == '"') keys.push_back(text.substr(at + 1, text.find('"', at + 1) - at - 1));
    if (text.find('\n', at) == std::string::npos) break;
  }
  return keys;
}

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

}  // namespace

TEST_CASE("a job of two ranks: read -> write -> read gives the same job and the same bytes",
          "[io][trace_io][v3]") {
  const Job job = parse_job(valid_two_rank_job().dump(), "job.json");
  REQUIRE(job.ranks.size() == 2);
  CHECK(job.world_size() == 2);
  CHECK(job.rank_of(1) == 1);
  const Workload& one = job.ranks[1];
  CHECK(
      one.distributed ==
      Distributed{.backend = "nccl", .rank = 1, .world_size = 2, .step_start_ns = {}, .fsdp = {}});
  CHECK(one.streams == std::vector<std::string>{"compute", "nccl"});
  CHECK(one.op(OpId{3}).stream == 1);
  CHECK(one.op(OpId{4}).after == std::vector<OpId>{OpId{3}});
  REQUIRE(one.op(OpId{3}).collective.has_value());
  const Collective& all_reduce = *one.op(OpId{3}).collective;
  CHECK(all_reduce.kind == CollectiveKind::kAllReduce);
  CHECK(all_reduce.in_bytes == 64);
  CHECK(all_reduce.out_bytes == 64);
  CHECK(all_reduce.dtype == "float32");
  CHECK(all_reduce.group == "0");
  CHECK(all_reduce.ranks.empty());
  CHECK(all_reduce.peer == -1);
  CHECK(all_reduce.sequence == 0);

  const std::string text = write_job(job);
  const Job second = parse_job(text, "<written>");
  CHECK(second == job);
  CHECK(write_job(second) == text);
  // The layout: the header, then each rank's fields as a trace file holds them, one line per
  // tensor and per op: 4 + 2 x (1 + 4 + 1 + 5 + 2 + 5 + 2) + 2 lines.
  CHECK(text.rfind("{\n\"format\": \"memplan-trace\",\n\"version\": 3,\n\"ranks\": [\n{\n"
                   "\"provenance\": ",
                   0) == 0);
  CHECK(text.find("\n},\n{\n\"provenance\": ") != std::string::npos);
  CHECK(text.ends_with("\n]\n}\n]\n}\n"));
  CHECK(count_lines(text) == 46);
  CHECK(text.find("\n\"distributed\": {\"backend\":\"nccl\",\"rank\":1,\"world_size\":2},\n") !=
        std::string::npos);
  CHECK(text.find("\n\"streams\": [\"compute\",\"nccl\"],\n") != std::string::npos);
  CHECK(text.find(R"("stream":1,"collective":{"kind":"all_reduce","in_bytes":64,"out_bytes":64,)"
                  R"("dtype":"float32","group":"0","sequence":0}})") != std::string::npos);
  CHECK(text.find(R"("after":[3]})") != std::string::npos);
  CHECK(text.find(R"("stream":0)") == std::string::npos);  // stream 0 is not written

  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  write_job_file(job, dir / "job.json");
  CHECK(read_job(dir / "job.json") == job);
  std::filesystem::remove_all(dir);
}

TEST_CASE("a step is written in the oldest version that holds it", "[io][trace_io][v3]") {
  using Keys = std::vector<std::string>;
  const Keys v1{"format", "version", "provenance", "device", "tensors", "ops"};
  const Keys v2{"format",    "version",      "provenance", "device",
                "launch_ns", "host_tail_ns", "tensors",    "ops"};
  for (const auto& [name, version, keys] :
       std::vector<std::tuple<const char*, int, Keys>>{{"traces/mlp4.json", 1, v1},
                                                       {"traces/resnet_tiny.json", 1, v1},
                                                       {"traces/resnet50_b32_v100.json", 2, v2}}) {
    CAPTURE(name);
    const Workload w = read_trace(source_path(name));
    CHECK(trace_format_version(w) == version);
    const std::string text = write_trace(w);
    CHECK(text.find(fmt::format("\n\"version\": {},\n", version)) != std::string::npos);
    CHECK(top_keys(text) == keys);
    for (const char* v3_key : {"\"stream\"", "\"after\"", "\"collective\""})
      CHECK(text.find(v3_key) == std::string::npos);
    // Read as a job, it is a job of one rank, written as the trace was.
    const Job job = read_job(source_path(name));
    REQUIRE(job.ranks.size() == 1);
    CHECK(job.ranks[0] == w);
    CHECK(job.world_size() == 1);
    CHECK(job.rank_of(0) == 0);
    CHECK(write_job(job) == text);
  }
  const Workload w = read_trace(source_path("traces/mlp4.json"));
  Workload hosted = w;  // a host side without launch_ns
  hosted.ops[0].host = HostSide{.dispatch_ns = 5};
  CHECK(trace_format_version(hosted) == 2);
  CHECK(top_keys(write_trace(hosted)) ==
        Keys{"format", "version", "provenance", "device", "host_tail_ns", "tensors", "ops"});
  for (const std::function<void(Workload&)>& v3_field : std::vector<std::function<void(Workload&)>>{
           [](Workload& s) {
             s.distributed = Distributed{
                 .backend = "", .rank = 0, .world_size = 1, .step_start_ns = {}, .fsdp = {}};
           },
           [](Workload& s) { s.streams = {"compute"}; }, [](Workload& s) { s.ops[1].stream = 1; },
           [](Workload& s) { s.ops[1].after = {OpId{0}}; },
           [](Workload& s) { s.ops[1].collective = Collective{}; }}) {
    Workload s = w;
    v3_field(s);
    CHECK(trace_format_version(s) == 3);
  }
}

TEST_CASE("a step of one GPU with v3 fields: read -> write -> read is stable",
          "[io][trace_io][v3]") {
  const Workload w = parse_trace(valid_v3_trace(1).dump(), "v3.json");
  CHECK(trace_format_version(w) == 3);
  const std::string text = write_trace(w);
  CHECK(text.find("\"version\": 3,\n") != std::string::npos);
  CHECK(text.find("host_tail_ns") == std::string::npos);  // no host side: not written
  const Workload back = parse_trace(text, "<written>");
  CHECK(back == w);
  CHECK(write_trace(back) == text);
  // The same file read as a job: one rank, named by its place in the world.
  const Job job = parse_job(text, "<written>");
  REQUIRE(job.ranks.size() == 1);
  CHECK(job.ranks[0] == w);
  CHECK(job.world_size() == 2);
  CHECK(job.rank_of(0) == 1);
  CHECK(write_job(job) == text);
  // A job's file of one rank reads as that rank's step, and is written as one.
  json single = valid_two_rank_job();
  single["ranks"].erase(1);
  CHECK(parse_trace(single.dump(), "one.json") == parse_trace(valid_v3_trace(0).dump(), "v3"));
  CHECK(write_job(parse_job(single.dump(), "one.json")) ==
        write_trace(parse_trace(valid_v3_trace(0).dump(), "v3")));
}

TEST_CASE("read_trace refuses a job of several ranks and says what reads it",
          "[io][trace_io][v3]") {
  const auto dir = std::filesystem::path(memplan::test::temp_dir());
  const auto path = dir / "job.json";
  write_job_file(parse_job(valid_two_rank_job().dump(), "job.json"), path);
  try {
    read_trace(path);
    FAIL("read a job of two ranks as one step");
  } catch (const InputError& e) {
    const std::string message = e.what();
    CHECK(message.rfind(path.string(), 0) == 0);
    CHECK(message.find("holds a job of 2 ranks") != std::string::npos);
    CHECK(message.find("a command that takes a job") != std::string::npos);
  }
  std::filesystem::remove_all(dir);
}

TEST_CASE("a job whose ranks disagree is refused, naming the ranks and the op",
          "[io][trace_io][v3][bad_input]") {
  struct BadJob {
    std::string name;
    std::function<void(json&)> change;
    std::string where;
    std::string problem;
  };
  auto collective = [](int rank) {
    return [rank](json& j) -> json& { return j["ranks"][rank]["ops"][3]["collective"]; };
  };
  const std::vector<BadJob> cases{
      {"a rank without the collective",
       [](json& j) {
         json& ops = j["ranks"][1]["ops"];
         ops.erase(3);
         ops[3]["id"] = 3;
         ops[3].erase("after");
       },
       "job.json: ",
       "rank 0 op 3 is all_reduce #0 of group '0'; rank 1 has no call #0 of that group"},
      {"another collective at the same call",
       [&](json& j) { collective(1)(j)["kind"] = "all_gather"; }, "job.json: ",
       "rank 0 op 3 is all_reduce #0 of group '0'; rank 1 has all_gather there (op 3)"},
      {"another size at the same call", [&](json& j) { collective(1)(j)["in_bytes"] = 32; },
       "job.json: ",
       "rank 0 op 3 is all_reduce #0 of group '0' of 64 bytes in and 64 out; rank 1 has 32 in "
       "and 64 out there (op 3)"},
      {"another group at the same call",
       [&](json& j) {
         collective(0)(j)["ranks"] = {0, 1};
         collective(1)(j)["ranks"] = {1, 0};
       },
       "job.json: ", "over ranks [0, 1]; rank 1 has it over ranks [1, 0]"},
      {"two world sizes", [](json& j) { j["ranks"][1]["distributed"]["world_size"] = 4; },
       "job.json: $.ranks[1].distributed.world_size", "world size 4, but rank 0's is 2"},
      {"a rank twice", [](json& j) { j["ranks"][1]["distributed"]["rank"] = 0; },
       "job.json: $.ranks[1].distributed.rank", "rank 0 appears twice"},
      {"ranks out of order", [](json& j) { std::swap(j["ranks"][0], j["ranks"][1]); },
       "job.json: $.ranks[1].distributed.rank", "rank 0 follows rank 1"},
      {"two backends", [](json& j) { j["ranks"][1]["distributed"]["backend"] = "gloo"; },
       "job.json: $.ranks[1].distributed.backend", "'gloo', but rank 0 ran on 'nccl'"},
      {"a rank without its place", [](json& j) { j["ranks"][1].erase("distributed"); },
       "job.json: $.ranks[1]", "missing field 'distributed'"},
      {"no ranks", [](json& j) { j["ranks"] = json::array(); }, "job.json: $.ranks", "no ranks"},
      {"a rank that breaks a rule", [](json& j) { j["ranks"][1]["ops"][4]["after"] = {9}; },
       "job.json: rank 1: $.ops[4].after[0]", "unknown op id 9"},
      {"a rank with a mistyped field",
       [](json& j) { j["ranks"][1]["ops"][1]["duration_ns"] = "x"; },
       "job.json: rank 1: $.ops[1].duration_ns", "expected an integer"},
      {"a rank with a file's field", [](json& j) { j["ranks"][0]["version"] = 3; },
       "job.json: rank 0: $", "unknown field 'version'"},
      {"a job with a field of a rank", [](json& j) { j["streams"] = json::array(); }, "job.json: $",
       "unknown field 'streams'"},
      {"a send nobody receives", [](json& j) { add_collective(j["ranks"][0], "send", 1); },
       "job.json: ",
       "rank 0 op 5 is send no. 1 of group '0' to rank 1; rank 1 has only 0 recv from rank 0"},
      {"a recv nobody sends", [](json& j) { add_collective(j["ranks"][1], "recv", 0); },
       "job.json: ",
       "rank 1 op 5 is recv no. 1 of group '0' from rank 0; rank 0 has only 0 send to rank 1"},
  };
  for (const BadJob& bad : cases) {
    CAPTURE(bad.name);
    json job = valid_two_rank_job();
    bad.change(job);
    const std::string message = job_error(job);
    CAPTURE(message);
    CHECK(message.rfind(bad.where, 0) == 0);
    CHECK(message.find(bad.problem) != std::string::npos);
  }
}

TEST_CASE("jobs that hold what a real job may are accepted", "[io][trace_io][v3]") {
  CHECK(job_error(valid_two_rank_job()) == "accepted");
  json p2p = valid_two_rank_job();  // a send and the recv that pairs with it
  add_collective(p2p["ranks"][0], "send", 1);
  add_collective(p2p["ranks"][1], "recv", 0);
  CHECK(job_error(p2p) == "accepted");
  json uneven = valid_two_rank_job();  // an all-to-all's sizes differ by rank
  for (int rank : {0, 1}) uneven["ranks"][rank]["ops"][3]["collective"]["kind"] = "all_to_all";
  uneven["ranks"][1]["ops"][3]["collective"]["in_bytes"] = 32;
  CHECK(job_error(uneven) == "accepted");
  json subset = valid_two_rank_job();  // ranks 0 and 2 of a world of 4
  for (int rank : {0, 1}) subset["ranks"][rank]["distributed"]["world_size"] = 4;
  subset["ranks"][1]["distributed"]["rank"] = 2;
  CHECK(job_error(subset) == "accepted");
  const Job job = parse_job(subset.dump(), "subset.json");
  CHECK(job.world_size() == 4);
  CHECK(job.rank_of(1) == 2);
  json groups = valid_two_rank_job();  // each rank's call in a group the other is not in
  groups["ranks"][0]["ops"][3]["collective"].update({{"group", "a"}, {"ranks", {0}}});
  groups["ranks"][1]["ops"][3]["collective"].update({{"group", "b"}, {"ranks", {1}}});
  CHECK(job_error(groups) == "accepted");
  json outside = valid_two_rank_job();  // a group of ranks 0 and 3, rank 3 not in the job
  for (int rank : {0, 1}) outside["ranks"][rank]["distributed"]["world_size"] = 4;
  outside["ranks"][0]["ops"][3]["collective"]["ranks"] = {0, 3};
  outside["ranks"][1]["ops"][3]["collective"].update({{"group", "1"}, {"ranks", {1, 2}}});
  CHECK(job_error(outside) == "accepted");
}

TEST_CASE("a group of some ranks is checked among those ranks alone", "[io][trace_io][v3]") {
  json job = {{"format", "memplan-trace"}, {"version", 3}, {"ranks", json::array()}};
  for (int rank : {0, 1, 2}) {
    json body = valid_v3_trace(rank);
    body.erase("format");
    body.erase("version");
    body["distributed"]["world_size"] = 3;
    if (rank > 0) {  // ranks 1 and 2 all-reduce among themselves too
      add_collective(body, "all_reduce");
      body["ops"][5]["collective"].update({{"group", "pair"}, {"ranks", {1, 2}}});
    }
    job["ranks"].push_back(std::move(body));
  }
  CHECK(job_error(job) == "accepted");
  json skipped = job;  // rank 1, the group's lead in the job, skips it
  skipped["ranks"][1]["ops"].erase(5);
  CHECK(job_error(skipped) ==
        "job.json: rank 2 op 5 is all_reduce #0 of group 'pair'; rank 1 has no call #0 of that "
        "group (a rank that skips a collective hangs the job)");
  json other = job;  // rank 2 calls another collective there
  other["ranks"][2]["ops"][5]["collective"]["kind"] = "broadcast";
  CHECK(
      job_error(other) ==
      "job.json: rank 1 op 5 is all_reduce #0 of group 'pair'; rank 2 has broadcast there (op 5)");
}
