// `memplan import kineto` as a user runs it.
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include <fmt/core.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "io/json_reader.hpp"
#include "io/trace_io.hpp"
#include "tests/importers/kineto/synthetic_kineto.hpp"
#include "tests/importers/kineto/synthetic_ranks.hpp"
#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::synthetic_kineto;
using memplan::test::write_temp;

namespace {

void check_one_line_error(const memplan::test::CommandResult& r, const std::string& problem) {
  CAPTURE(r.err, r.out);
  CHECK(r.exit_status == 2);
  CHECK(r.out.empty());
  REQUIRE(!r.err.empty());
  CHECK(r.err.find('\n') == r.err.size() - 1);
  CHECK(r.err.find(problem) != std::string::npos);
}

}  // namespace

TEST_CASE("memplan import kineto writes a valid trace from .json and .json.gz", "[cli][import]") {
  const std::string in = write_temp("t.json", synthetic_kineto().dump());
  REQUIRE(std::system(("gzip -c '" + in + "' > '" + in + ".gz'").c_str()) == 0);
  for (const std::string& file : {in, in + ".gz"}) {
    const std::string out = std::filesystem::path(in).parent_path() / "out.json";
    std::filesystem::remove(out);
    const auto r = run_memplan(fmt::format("import kineto '{}' -o '{}'", file, out));
    CAPTURE(r.err);
    REQUIRE(r.exit_status == 0);
    CHECK(r.out.find("imported ProfilerStep#1 (the first complete step)") != std::string::npos);
    const auto w = memplan::sim::read_trace(out);
    CHECK(w.provenance.source == "imported");
    CHECK(w.provenance.step == 1);
    CHECK(w.ops.size() == 21);
  }
}

TEST_CASE("memplan import kineto: bad input is one line and exit 2, no output file",
          "[cli][import][bad_input]") {
  const std::string dir = memplan::test::temp_dir();
  const std::string out = dir + "/never.json";
  const std::string text = synthetic_kineto().dump();
  const std::string good = write_temp("good.json", text);
  REQUIRE(std::system(("gzip -c '" + good + "' > '" + good + ".gz'").c_str()) == 0);
  std::string gz;
  {
    std::ifstream f(good + ".gz", std::ios::binary);
    gz.assign(std::istreambuf_iterator<char>(f), {});
  }
  SECTION("truncated gzip") {
    const auto f = write_temp("cut.json.gz", gz.substr(0, gz.size() / 2));
    check_one_line_error(run_memplan("import kineto '" + f + "' -o '" + out + "'"),
                         "truncated gzip data");
  }
  SECTION("corrupt gzip") {
    std::string bad = gz;
    for (std::size_t i = 20; i < 60 && i < bad.size(); ++i)
      bad[i] = static_cast<char>(bad[i] ^ 0x5a);
    const auto f = write_temp("bad.json.gz", bad);
    check_one_line_error(run_memplan("import kineto '" + f + "' -o '" + out + "'"), "gzip data");
  }
  SECTION("truncated JSON") {
    const auto f = write_temp("cut.json", text.substr(0, text.size() - 100));
    check_one_line_error(run_memplan("import kineto '" + f + "' -o '" + out + "'"),
                         "not valid JSON");
  }
  SECTION("a missing file") {
    check_one_line_error(run_memplan("import kineto '" + dir + "/nope.json' -o '" + out + "'"),
                         "nope.json");
  }
  SECTION("a step that is not there") {
    check_one_line_error(run_memplan("import kineto '" + good + "' --step 4 -o '" + out + "'"),
                         "no ProfilerStep#4");
  }
  SECTION("more than the input limits (#40 item 2), given before or after the command") {
    check_one_line_error(
        run_memplan("--max-input-values 500 import kineto '" + good + "' -o '" + out + "'"),
        "good.json: holds more than 500 JSON values (memplan's input limit: raise it with "
        "--max-input-values");
    check_one_line_error(
        run_memplan("import kineto '" + good + ".gz' -o '" + out + "' --max-input-size 1KiB"),
        "good.json.gz: larger than 1.00 KiB once decompressed (memplan's input limit: raise it "
        "with --max-input-size");
    check_one_line_error(run_memplan("import kineto '" + good + "' --max-input-values 0"),
                         "--max-input-values");
  }
  SECTION("a trace followed by a NUL and garbage") {
    const auto f = write_temp("nul.json", text + std::string(1, '\0') + "garbage");
    check_one_line_error(
        run_memplan("import kineto '" + f + "' -o '" + out + "'"),
        fmt::format("nul.json: a NUL byte at byte {}: not a text file", text.size()));
  }
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("memplan info /dev/zero is refused at once, and the limits let a big input through",
          "[cli][import][bad_input]") {
  check_one_line_error(run_memplan("info /dev/zero"), "/dev/zero: a NUL byte at byte 0");
  const std::string in = write_temp("limits.json", synthetic_kineto().dump());
  const std::string out = std::filesystem::path(in).parent_path() / "limits_out.json";
  const auto r = run_memplan("--max-input-values 100000 --max-input-size 1MiB import kineto '" +
                             in + "' -o '" + out + "'");
  CAPTURE(r.err);
  CHECK(r.exit_status == 0);
  CHECK(memplan::sim::read_trace(out).ops.size() == 21);
}

TEST_CASE("memplan import kineto --json prints one object, -o - writes the trace to stdout",
          "[cli][import]") {
  const std::string in = write_temp("j.json", synthetic_kineto().dump());
  const std::string out = std::filesystem::path(in).parent_path() / "j_out.json";
  const auto r = run_memplan("import kineto '" + in + "' --json -o '" + out + "'");
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("step") == "ProfilerStep#1");
  CHECK(j.at("step_number") == 1);
  CHECK(j.at("tensors").get<std::size_t>() == memplan::sim::read_trace(out).tensors.size());
  CHECK(j.at("output") == out);
  const auto piped = run_memplan("import kineto '" + in + "' -o -");
  REQUIRE(piped.exit_status == 0);
  CHECK(memplan::sim::parse_trace(piped.out, "<stdout>").ops.size() == 21);
  CHECK(piped.err.find("imported ProfilerStep#1") != std::string::npos);  // the report moved
}

TEST_CASE("memplan import kineto: every rank of a job, in several files or one merged file",
          "[cli][import][multirank]") {
  memplan::test::SyntheticRank o;
  o.rank = 1;
  o.allreduce_us = 200;
  const auto one = memplan::test::synthetic_rank(o);
  const std::string r1 = write_temp("cli_rank1.json", one.dump());
  o.rank = 0;
  o.allreduce_us = 500;
  const auto zero = memplan::test::synthetic_rank(o);
  const std::string r0 = write_temp("cli_rank0.json", zero.dump());
  const std::string merged =
      write_temp("cli_merged.json", memplan::test::merge_ranks({zero, one}, true).dump());
  const std::string out = std::filesystem::path(r0).parent_path() / "cli_job.json";
  for (const std::string& inputs : {"'" + r1 + "' '" + r0 + "'", "'" + merged + "'"}) {
    CAPTURE(inputs);
    std::filesystem::remove(out);
    const auto r = run_memplan(fmt::format("import kineto {} -o '{}'", inputs, out));
    CAPTURE(r.err);
    REQUIRE(r.exit_status == 0);
    CHECK(r.out.find("== rank 0 (") != std::string::npos);
    CHECK(r.out.find("== rank 1 (") != std::string::npos);
    CHECK(r.out.find("rank 1 of 2 (nccl)") != std::string::npos);
    CHECK(r.out.find("streams: 2 (compute (stream 7), nccl (stream 20))") != std::string::npos);
    CHECK(r.out.find("collectives: 1, 200 B, recorded 0.500 ms, transfer 0.200 ms (the least any "
                     "rank of the group recorded; 0.300 ms waiting for the last peer)") !=
          std::string::npos);
    CHECK(r.out.find("device time: in-core replay") != std::string::npos);
    CHECK(r.out.find("(a job of 2 ranks)") != std::string::npos);
    CHECK(std::filesystem::file_size(out) > 0);  // sim::write_job's (trace format v3)
  }
  const auto j = run_memplan(fmt::format("import kineto '{}' --json -o '{}'", merged, out));
  REQUIRE(j.exit_status == 0);
  const auto report = nlohmann::json::parse(j.out);
  REQUIRE(report.at("ranks").size() == 2);
  CHECK(report.at("ranks")[1].at("rank") == 1);
  CHECK(report.at("ranks")[0].at("collectives") == 1);
  CHECK(report.at("ranks")[0].at("collective_wait_s").get<double>() == Approx(300e-6));
  CHECK(report.at("output") == out);
  // One rank of a larger job: a trace, its collectives' recorded times kept.
  const auto single = run_memplan(fmt::format("import kineto '{}' -o '{}'", r1, out));
  REQUIRE(single.exit_status == 0);
  CHECK(single.out.find("a single rank keeps its recorded time") != std::string::npos);
  CHECK(memplan::sim::read_trace(out).ops.size() > 21);
  // Files that say no rank, numbered by --rank; a clash is one line and exit 2.
  check_one_line_error(run_memplan(fmt::format("import kineto '{}' '{}' -o '{}'", r0, r0, out)),
                       "rank 0 again");
}

TEST_CASE("memplan import kineto --whole refuses a trace of several steps, exit 2, no file",
          "[cli][import][bad_input]") {
  // #40 item 5: --whole on a multi-step file made one step of the first iteration's ops with
  // every iteration's device time, exit 0.
  memplan::test::SyntheticOptions two;
  two.steps = 2;
  const std::string in = write_temp("two_steps.json", synthetic_kineto(two).dump());
  const std::string out = memplan::test::temp_dir() + "/never.json";
  check_one_line_error(run_memplan(fmt::format("import kineto '{}' --whole -o '{}'", in, out)),
                       "--whole takes one training step, and the whole trace holds 2 "
                       "(ProfilerStep#1, #2)");
  CHECK_FALSE(std::filesystem::exists(out));
  // One step in the trace: --whole takes it.
  const std::string one = write_temp("one_step.json", synthetic_kineto().dump());
  const auto r = run_memplan(fmt::format("import kineto '{}' --whole -o '{}'", one, out));
  CAPTURE(r.err);
  CHECK(r.exit_status == 0);
}

TEST_CASE("memplan import snapshot reads a real snapshot: --json with the dump's figures",
          "[cli][import][snapshot]") {
  const auto r = run_memplan(
      fmt::format("import snapshot '{}' --json",
                  memplan::test::source_path("traces/kineto-h200/gpt_blocks.snapshot.pickle.gz")));
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j["segments"] == 109);
  REQUIRE(j["devices"].size() == 1);
  const auto& d = j["devices"][0];
  CHECK(d["reserved_bytes"] == 9277800448LL);   // pickle.load: the segments' total sizes
  CHECK(d["allocated_bytes"] == 2066014208LL);  // the active_allocated blocks' sizes
  CHECK(d["events"] == 10975);
  CHECK(d["event_sizes"] == "requested");
  CHECK(d["peak_live_bytes"] == 8472355016LL);
  CHECK(j["allocator_settings"]["expandable_segments"] == false);
  const auto text = run_memplan(
      fmt::format("import snapshot '{}'",
                  memplan::test::source_path("traces/kineto-h200/gpt_blocks.snapshot.pickle.gz")));
  REQUIRE(text.exit_status == 0);
  CHECK(text.out.find("device 0: 109 segments (8.64 GiB reserved") != std::string::npos);
}

TEST_CASE("memplan import snapshot --trace joins a profiler trace of the same run",
          "[cli][import][snapshot]") {
  const std::string snapshot =
      memplan::test::source_path("traces/kineto-h200/gpt2.snapshot.pickle.gz");
  const auto r = run_memplan(
      fmt::format("import snapshot '{}' --trace '{}'", snapshot,
                  memplan::test::source_path("traces/kineto-h200/gpt2.pt.trace.json.gz")));
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  // The profiler's three steps hold 2,016 of the snapshot's 3,588 allocations, each inside an op
  // (tests/importers/snapshot/trace_join_test.cpp checks which).
  CHECK(r.out.find("by time: 2016 of the 2016 allocations in its span made inside an op") !=
        std::string::npos);
  const auto other = run_memplan(
      fmt::format("import snapshot '{}' --trace '{}'", snapshot,
                  memplan::test::source_path("traces/kineto-h200/resnet50.pt.trace.json.gz")));
  CHECK(other.exit_status == 2);
  CHECK(other.out.empty());
  CHECK(other.err.find("do not overlap in time: not the same run") != std::string::npos);
  CHECK(std::count(other.err.begin(), other.err.end(), '\n') == 1);
}

TEST_CASE("memplan import snapshot refuses a pickle that would run code, and a truncated one",
          "[cli][import][snapshot]") {
  const std::filesystem::path pwned = std::filesystem::temp_directory_path() / "memplan-pwned";
  std::filesystem::remove(pwned);
  // pickle.dumps of an object whose __reduce__ is os.system('touch <pwned>'), protocol 0.
  const std::string evil = write_temp(
      "evil.pickle", "cposix\nsystem\np0\n(Vtouch " + pwned.string() + "\np1\ntp2\nRp3\n.");
  check_one_line_error(run_memplan(fmt::format("import snapshot '{}'", evil)),
                       "evil.pickle: pickle byte 0: GLOBAL (imports a Python object by name): "
                       "refused");
  CHECK_FALSE(std::filesystem::exists(pwned));
  // The real snapshot cut short, gzip'd and not.
  const std::string whole =
      memplan::test::source_path("traces/kineto-h200/gpt_blocks.snapshot.pickle.gz");
  const std::string cut = write_temp("cut.pickle", "");
  REQUIRE(std::system(fmt::format("gzip -dc '{}' | head -c 100000 > '{}'", whole, cut).c_str()) ==
          0);
  check_one_line_error(run_memplan(fmt::format("import snapshot '{}'", cut)), "truncated");
  REQUIRE(std::system(fmt::format("head -c 30000 '{}' > '{}'", whole, cut).c_str()) == 0);
  check_one_line_error(run_memplan(fmt::format("import snapshot '{}'", cut)), "cut.pickle");
}

TEST_CASE("a flood of values is refused for the machine's memory, running out is one line",
          "[cli][bad_input]") {
  // Found by scripts/fuzz-cli: with the values limit raised past what the machine holds, a
  // std::bad_alloc in a noexcept function ended in std::terminate (SIGABRT). 2 M small arrays of
  // three values each are about 10 M values, more than 400 MB of address space holds: refused as
  // they are counted, whatever the limit.
  if (memplan::test::kSanitizedBuild) {
    WARN("skipped: a sanitized memplan cannot start under ulimit -v (its shadow memory)");
    return;
  }
  std::string text = "[";
  for (int i = 0; i < 2000000; ++i) text += R"([1,2,{"a":"x"}],)";
  text += "0]";
  const std::string in = write_temp("nested.json", text);
  const auto flood =
      run_memplan("info '" + in + "' --max-input-values 1000000000", "ulimit -v 400000;");
  CHECK(flood.exit_status == 2);
  CHECK_THAT(flood.err, Catch::StartsWith("memplan: " + in + ": holds more than ") &&
                            Catch::Contains(" JSON values, as many as this machine's available "
                                            "memory ("));
  // Few values, each a string of 4 MB (100 of them, 400 MB in 400 KB of gzip): no count refuses
  // them, and the machine runs out. One line, exit 1, once what was parsed has been freed.
  const std::string strings = write_temp("strings.json.gz", "");
  REQUIRE(std::system(fmt::format("{{ printf '['; for i in $(seq 100); do printf '\"'; "
                                  "head -c 4000000 /dev/zero | tr '\\0' x; printf '\",'; done; "
                                  "printf '0]'; }} | gzip -1 > '{}'",
                                  strings)
                          .c_str()) == 0);
  const auto out = run_memplan("info '" + strings + "'", "ulimit -v 400000;");
  CHECK(out.exit_status == 1);
  CHECK(out.err ==
        "memplan: out of memory: the run needed more memory than this machine gave it\n");
}

TEST_CASE("memplan import kineto --snapshot gives sizes to a trace recorded without shapes",
          "[cli][import][snapshot]") {
  // gpt2's H200 trace as torch.profiler records it by default: no shapes, no [memory] events.
  nlohmann::json doc = memplan::sim::read_json(
      memplan::test::source_path("traces/kineto-h200/gpt2.pt.trace.json.gz"));
  auto& events = doc["traceEvents"];
  events.erase(
      std::remove_if(events.begin(), events.end(),
                     [](const nlohmann::json& e) { return e.value("name", "") == "[memory]"; }),
      events.end());
  for (auto& e : events) {
    if (e.contains("args")) {
      for (const char* key : {"Input Dims", "Input type", "Input Strides", "Concrete Inputs"})
        e["args"].erase(key);
    }
  }
  const std::string bare = write_temp("gpt2-bare.json", doc.dump());
  const std::string snapshot =
      memplan::test::source_path("traces/kineto-h200/gpt2.snapshot.pickle.gz");
  const std::string dir = memplan::test::temp_dir();
  const auto r = run_memplan(
      fmt::format("import kineto '{}' --snapshot '{}' -o '{}/t.json' --json", bare, snapshot, dir));
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  const auto j = nlohmann::json::parse(r.out);
  CHECK(j.at("time_only") == true);
  CHECK(j.at("sizes_from") == fmt::format("snapshot {} (device 0)", snapshot));
  // The replay's peak is the snapshot's own within 0.01% (kineto_allocation_sizes_test.cpp).
  const auto peak = j.at("peak_bytes_incore").get<std::int64_t>();
  const auto recorded = j.at("allocations_peak_bytes").get<std::int64_t>();
  CHECK(peak >= recorded);
  CHECK(peak - recorded <= recorded / 10000);
  const auto w = memplan::sim::read_trace(dir + "/t.json");
  CHECK(w.tensors.size() == j.at("tensors").get<std::size_t>());
  CHECK(std::all_of(w.tensors.begin(), w.tensors.end(),
                    [](const auto& t) { return t.lifetime_only; }));
  // The text report says where the sizes came from; simulate replays the step with them.
  const auto text = run_memplan(
      fmt::format("import kineto '{}' --snapshot '{}' -o '{}/t.json'", bare, snapshot, dir));
  CHECK(text.out.find("no recorded shapes: sizes from snapshot") != std::string::npos);
  const auto sim = run_memplan(fmt::format("simulate '{}/t.json' --policy in-core", dir));
  CHECK(sim.exit_status == 0);
  CHECK(sim.out.find("memory      peak 5.03 GiB live") != std::string::npos);

  // Refused, one line and exit 2, nothing written: a trace with shapes, several ranks, a device
  // the snapshot does not have, --snapshot-device alone.
  const std::string out = dir + "/never.json";
  check_one_line_error(
      run_memplan(fmt::format(
          "import kineto '{}' --snapshot '{}' -o '{}'",
          memplan::test::source_path("traces/kineto-h200/gpt2.pt.trace.json.gz"), snapshot, out)),
      "has recorded shapes: its sizes come from them");
  check_one_line_error(run_memplan(fmt::format("import kineto '{}' --snapshot '{}' "
                                               "--snapshot-device 3 -o '{}'",
                                               bare, snapshot, out)),
                       "device 3 has no allocator events (devices with events: 0)");
  check_one_line_error(
      run_memplan(fmt::format("import kineto '{}' --snapshot-device 0 -o '{}'", bare, out)),
      "names a device of --snapshot, which is not given");
  // A job takes one snapshot per rank, in rank order.
  memplan::test::SyntheticRank rank;
  const std::string r0 = write_temp("r0.json", memplan::test::synthetic_rank(rank).dump());
  rank.rank = 1;
  const std::string r1 = write_temp("r1.json", memplan::test::synthetic_rank(rank).dump());
  check_one_line_error(run_memplan(fmt::format("import kineto '{}' '{}' --snapshot '{}' -o '{}'",
                                               r0, r1, snapshot, out)),
                       "1 snapshots for 2 ranks: give one per rank, in rank order");
  CHECK_FALSE(std::filesystem::exists(out));
}

TEST_CASE("memplan import kineto says what it made of an FSDP step", "[cli][import][fsdp]") {
  // traces/fsdp-cpu (README.md there): FSDP2 over two CPU processes, two blocks and the root; 5
  // all-gathers in the trace, of which the blocks' 2 backward re-gathers become the in-core plan's
  // re-runs of the forward gathers (Note [Gathered parameters as feature maps]).
  const std::string out = write_temp("cli_fsdp_job.json", "");
  const auto r = run_memplan(fmt::format("import kineto '{}' -o '{}'",
                                         memplan::test::source_path("traces/fsdp-cpu"), out));
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  CHECK(r.out.find("FSDP2 (fully_shard): parameters sharded 2 ways") != std::string::npos);
  CHECK(r.out.find(
            "5 all-gathers in the trace, 3 gradient reductions; 3 units' gathered parameters as "
            "feature maps, the step's setting FULL_SHARD with backward prefetch 1 (its 2 "
            "backward re-gathers are the plan's re-runs)") != std::string::npos);
  const auto j = run_memplan(fmt::format("import kineto '{}' --json -o '{}'",
                                         memplan::test::source_path("traces/fsdp-cpu"), out));
  REQUIRE(j.exit_status == 0);
  const auto report = nlohmann::json::parse(j.out);
  CHECK(report.at("ranks").at(0).at("fsdp_units") == 3);
  CHECK(report.at("ranks").at(1).at("fsdp_regathers") == 2);
}
