// Output files (io/output_file.hpp): "-" is standard output; a symlink is written through; a
// FIFO or device is written directly, a FIFO nobody reads refused rather than waited on; a run
// that exits 1 or 2 leaves no file and does not touch one that was there.
#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include <fmt/format.h>
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;
using memplan::test::temp_dir;

namespace {
void spit(const std::filesystem::path& p, const std::string& text) {
  std::ofstream(p) << text;
}
// Files of `dir` (temporaries included: a failed run leaves none).
std::size_t file_count(const std::string& dir) {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++n;
  return n;
}
}  // namespace

TEST_CASE("an output named - is standard output, and the report goes to standard error",
          "[cli][output]") {
  const auto r =
      run_memplan("simulate " + memplan::test::tiny_trace() + " --policy swap-all --plan-out -");
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  const auto plan = nlohmann::json::parse(r.out);  // only the plan on stdout
  CHECK(plan.contains("maps"));
  CHECK(r.err.find("plan        swap-all") != std::string::npos);
  const auto two = run_memplan("simulate " + memplan::test::tiny_trace() +
                               " --policy swap-all --plan-out - "
                               "--memory-csv -");
  CHECK(two.exit_status == 2);
  CHECK(two.err.find("only one output can be standard output") != std::string::npos);
}

TEST_CASE("an output through a symlink replaces the target and keeps the link", "[cli][output]") {
  const std::string dir = temp_dir();
  spit(dir + "/target.json", "old");
  std::filesystem::create_symlink("target.json", dir + "/link.json");
  const auto r = run_memplan("simulate " + memplan::test::tiny_trace() +
                             " --policy swap-all --plan-out '" + dir + "/link.json'");
  CAPTURE(r.err);
  REQUIRE(r.exit_status == 0);
  CHECK(std::filesystem::is_symlink(dir + "/link.json"));
  CHECK(nlohmann::json::parse(memplan::test::read_text(dir + "/target.json")).contains("maps"));
  CHECK(file_count(dir) == 2);  // no temporary left beside them
  // A dangling link creates its target.
  std::filesystem::create_symlink("new.csv", dir + "/dangling.csv");
  REQUIRE(run_memplan("simulate " + memplan::test::tiny_trace() +
                      " --policy in-core --memory-csv '" + dir + "/dangling.csv'")
              .exit_status == 0);
  CHECK(std::filesystem::is_symlink(dir + "/dangling.csv"));
  CHECK(memplan::test::read_text(dir + "/new.csv").rfind("time_ns,", 0) == 0);
}

TEST_CASE("FIFOs and devices are written directly, not replaced", "[cli][output]") {
  const std::string dir = temp_dir();
  const std::string fifo = dir + "/pipe";
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  // Nobody reads the FIFO: refused at once (not a hang), the FIFO left as it was.
  const auto unread = run_memplan("simulate " + memplan::test::tiny_trace() +
                                  " --policy in-core --plan-out '" + fifo + "'");
  CHECK(unread.exit_status == 2);
  CHECK(unread.err.find("a FIFO nobody reads") != std::string::npos);
  CHECK(std::filesystem::is_fifo(fifo));
  // With a reader, the plan goes through the FIFO. The shell holds the FIFO open read-write on
  // fd 3 before memplan starts (so a reader exists, with no race against a `cat` that has not
  // opened it yet), opens a read end on fd 4 after memplan exits, closes fd 3 so that the last
  // writer is gone, and reads what memplan left in the pipe to its end. (run_memplan's
  // redirections apply to the last command, the braced group, whose own `<&4` wins.)
  const auto read =
      run_memplan("simulate " + memplan::test::tiny_trace() + " --policy in-core --plan-out '" +
                      fifo + "' >/dev/null; exec 4<'" + fifo + "' 3<&-; { cat <&4; }",
                  "exec 3<>'" + fifo + "';");
  CHECK(read.exit_status == 0);
  CHECK(read.out.find("\"maps\"") != std::string::npos);
  CHECK(std::filesystem::is_fifo(fifo));
  const auto null = run_memplan("simulate " + memplan::test::tiny_trace() +
                                " --policy in-core --timeline /dev/null");
  CHECK(null.exit_status == 0);
  CHECK(std::filesystem::is_character_file("/dev/null"));
  const auto dir_out = run_memplan("simulate " + memplan::test::tiny_trace() +
                                   " --policy in-core --timeline '" + dir + "'");
  CHECK(dir_out.exit_status == 2);
  CHECK(dir_out.err.find("is a directory") != std::string::npos);
}

TEST_CASE("a run that exits 1 or 2 writes no output file and keeps an existing one",
          "[cli][output]") {
  const std::string dir = temp_dir();
  spit(dir + "/kept.json", "kept");
  // 16 KiB is below what in-core needs: exit 1, no timeline, CSV or plan.
  const auto oom = run_memplan(
      fmt::format("simulate {} --policy in-core --memory 16KiB --timeline '{}/t.json' --memory-csv "
                  "'{}/m.csv' --plan-out '{}/kept.json'",
                  memplan::test::tiny_trace(), dir, dir, dir));
  CHECK(oom.exit_status == 1);
  CHECK(oom.err.find("no output file written") != std::string::npos);
  CHECK(file_count(dir) == 1);
  CHECK(memplan::test::read_text(dir + "/kept.json") == "kept");
  // A search that finds no plan that fits (4 KiB holds no plan) writes no plan.
  const auto search =
      run_memplan(fmt::format("search {} --memory 4KiB --rounds 1 -o '{}/plan.json' --quiet",
                              memplan::test::tiny_trace(), dir));
  CHECK(search.exit_status == 1);
  CHECK(search.err.find("no plan written") != std::string::npos);
  CHECK(file_count(dir) == 1);
  // Bad input: exit 2, nothing written (a sweep's CSV, a zoo trace).
  const auto sweep = run_memplan(
      fmt::format("sweep {} --memory 4GiB,lots -o '{}/s.csv'", memplan::test::tiny_trace(), dir));
  CHECK(sweep.exit_status == 2);
  const auto zoo = run_memplan(
      fmt::format("zoo resnet18 --batch 1 --device v100-16gb --layers 4 -o '{}/kept.json'", dir));
  CHECK(zoo.exit_status == 2);
  CHECK(file_count(dir) == 1);
  CHECK(memplan::test::read_text(dir + "/kept.json") == "kept");
}

TEST_CASE("zoo -o and sweep -o say what they wrote, zoo --json", "[cli][output]") {
  const std::string dir = temp_dir();
  const auto zoo =
      run_memplan(fmt::format("zoo resnet18 --batch 2 --device v100-16gb -o '{}/r.json'", dir));
  CAPTURE(zoo.err);
  REQUIRE(zoo.exit_status == 0);
  CHECK(zoo.out.find(fmt::format("wrote {}/r.json: resnet18 on v100-16gb, 139 ops,", dir)) !=
        std::string::npos);
  const auto json = run_memplan(
      fmt::format("zoo resnet18 --batch 2 --device v100-16gb --json -o '{}/r.json'", dir));
  REQUIRE(json.exit_status == 0);
  const auto j = nlohmann::json::parse(json.out);
  CHECK(j.at("model") == "resnet18");
  CHECK(j.at("ops") == 139);  // as the text line says
  CHECK(j.at("memory_bytes") == 16LL << 30);
  const auto list = nlohmann::json::parse(run_memplan("zoo --list --json").out);
  CHECK(list.at("models").size() >= 14);
  CHECK(list.at("devices").at(0).contains("memory_bytes"));
  const auto sweep =
      run_memplan(fmt::format("sweep '{}' --policies in-core --no-search -o '{}/s.csv'",
                              source_path("traces/mlp4.json"), dir));
  REQUIRE(sweep.exit_status == 0);
  CHECK(sweep.out == fmt::format("wrote {}/s.csv (1 rows)\n", dir));
}

namespace {
// A copy of the tiny trace in `dir`, for a run whose outputs point at its input.
std::string copy_of_tiny_trace(const std::string& dir) {
  const std::string path = dir + "/t.json";
  spit(path, memplan::test::read_text(source_path("traces/resnet_tiny.json")));
  return path;
}
void check_output_refused(const memplan::test::CommandResult& r, const std::string& problem) {
  CAPTURE(r.out, r.err);
  CHECK(r.exit_status == 2);
  REQUIRE(!r.err.empty());
  CHECK(r.err.find('\n') == r.err.size() - 1);
  CHECK(r.err.find(problem) != std::string::npos);
}
}  // namespace

TEST_CASE("two outputs of one run that are one file are refused before any work", "[cli][output]") {
  // #40 item 6: --timeline x.json --memory-csv x.json exited 0 with the timeline lost.
  const std::string dir = temp_dir();
  const std::string simulate = "simulate " + memplan::test::tiny_trace() + " --policy swap-all ";
  check_output_refused(run_memplan(simulate + fmt::format("--timeline '{0}/x.json' --memory-csv "
                                                          "'{0}/x.json'",
                                                          dir)),
                       fmt::format("--memory-csv: '{}/x.json' is the file --timeline writes", dir));
  CHECK(file_count(dir) == 0);  // nothing written
  // The same file by another name: "./", a folder's "..", a symlink (dangling: the file it
  // would create), a hard link.
  std::filesystem::create_directory(dir + "/sub");
  std::filesystem::create_symlink("x.json", dir + "/link.json");
  for (const std::string& other : {dir + "/./x.json", dir + "/sub/../x.json", dir + "/link.json"}) {
    CAPTURE(other);
    check_output_refused(
        run_memplan(simulate + fmt::format("--timeline '{}/x.json' --plan-out '{}'", dir, other)),
        "is the file --timeline writes ('" + dir + "/x.json'): give each output its own file");
  }
  spit(dir + "/x.json", "kept");
  std::filesystem::create_hard_link(dir + "/x.json", dir + "/hard.json");
  check_output_refused(
      run_memplan(simulate +
                  fmt::format("--memory-csv '{0}/hard.json' --plan-out '{0}/x.json'", dir)),
      "--plan-out");
  CHECK(memplan::test::read_text(dir + "/x.json") == "kept");
  // Two devices are not one file to refuse.
  CHECK(run_memplan(simulate + "--timeline /dev/null --memory-csv /dev/null").exit_status == 0);
}

TEST_CASE("an output over the command's own input is refused before any work", "[cli][output]") {
  // #40 item 6: --plan-out t.json over the trace t.json exited 0 and replaced the trace.
  const std::string dir = temp_dir();
  const std::string trace = copy_of_tiny_trace(dir);
  const std::string text = memplan::test::read_text(trace);
  std::filesystem::create_symlink("t.json", dir + "/link.json");
  check_output_refused(
      run_memplan(fmt::format("simulate '{0}' --policy swap-all --plan-out '{0}'", trace)),
      fmt::format("--plan-out: '{}' is the TRACE this command reads: write --plan-out "
                  "to another file",
                  trace));
  check_output_refused(
      run_memplan(
          fmt::format("simulate '{0}' --policy swap-all --timeline '{1}/./t.json'", trace, dir)),
      "is the TRACE this command reads ('" + trace + "')");
  check_output_refused(
      run_memplan(fmt::format("search '{0}' --rounds 1 -o '{1}/link.json'", trace, dir)),
      "-o: '" + dir + "/link.json' is the TRACE this command reads");
  check_output_refused(
      run_memplan(fmt::format("sweep '{0}' --policies in-core --no-search -o '{0}'", trace)),
      "is the TRACE this command reads");
  CHECK(memplan::test::read_text(trace) == text);
  CHECK(file_count(dir) == 2);  // the trace and the link, no temporary
}

TEST_CASE("a second sweep on the -o file of one still running is refused, and no row is lost",
          "[cli][output][sweep]") {
  // #40 item 6: two concurrent `sweep -o same.csv` both exited 0; the second replaced the file,
  // and the first one's rows went on into the file it had unlinked.
  const std::string dir = temp_dir();
  const std::string csv = dir + "/same.csv";
  const std::string resnet = memplan::test::quoted_source_path("traces/resnet50_b32_v100.json");
  // The first: three search cells of about a second each on ResNet-50; the second starts as soon
  // as the first has written its header.
  const std::string script = fmt::format(
      "'{0}' sweep {1} --memory 2GiB,2.25GiB,2.5GiB --policies in-core --search-time-limit 1 "
      "--threads 1 -o '{2}' >'{3}/first.out' 2>&1 & "
      "i=0; while [ ! -s '{2}' ] && [ $i -lt 6000 ]; do sleep 0.01; i=$((i+1)); done; "
      "'{0}' sweep {4} --policies in-core --no-search -o '{2}' >'{3}/second.out' 2>&1; "
      "echo $? >'{3}/second.status'; wait $!; echo $? >'{3}/first.status'",
      MEMPLAN_BINARY, resnet, csv, dir, memplan::test::tiny_trace());
  REQUIRE(std::system(script.c_str()) == 0);
  CHECK(memplan::test::read_text(dir + "/first.status") == "0\n");
  CHECK(memplan::test::read_text(dir + "/second.status") == "2\n");
  const std::string second = memplan::test::read_text(dir + "/second.out");
  CHECK(second.find("memplan: -o: '" + csv + "' is being written by another memplan run") == 0);
  // Every row of the first is in the file: the header and 3 memories x (in-core, search).
  const std::string rows = memplan::test::read_text(csv);
  CHECK(std::count(rows.begin(), rows.end(), '\n') == 7);
  CHECK(rows.find("resnet_tiny") == std::string::npos);
  CHECK(memplan::test::read_text(dir + "/first.out").find("(6 rows)") != std::string::npos);
}
