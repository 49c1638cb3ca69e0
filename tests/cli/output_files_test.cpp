// Output files (cli/output_file.hpp): "-" is standard output; a symlink is written through; a
// FIFO or device is written directly, a FIFO nobody reads refused rather than waited on; a run
// that exits 1 or 2 leaves no file and does not touch one that was there.
#include <sys/stat.h>

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
  // With a reader, the plan goes through the FIFO.
  // (run_memplan's redirections apply to the last command: the reader's output is captured.)
  const auto read =
      run_memplan("simulate " + memplan::test::tiny_trace() + " --policy in-core --plan-out '" +
                  fifo + "' >/dev/null & cat '" + fifo + "'");
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

TEST_CASE("zoo -o and sweep -o say what they wrote; zoo --json", "[cli][output]") {
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
