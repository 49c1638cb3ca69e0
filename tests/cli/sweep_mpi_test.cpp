// `memplan sweep` across processes (cli/sweep_ranks.hpp) and resumed from a CSV cut short:
// both must write the very bytes of one uninterrupted run in one process.
#include <filesystem>
#include <fstream>
#include <sstream>

#include <catch2/catch.hpp>

#include "search/policies/policy.hpp"
#include "tests/support/policy_counts.hpp"

#include "tests/support/run_command.hpp"

using memplan::test::run_memplan;
using memplan::test::source_path;
using memplan::test::temp_dir;

namespace {

std::size_t count_lines(const std::string& text) {
  return static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n'));
}

// 2 traces x 2 memories x 2 links x (every policy + the search) cells, every column
// deterministic: decide_s written as 0, each search stopped by its rounds (2) long before its
// time limit on these tiny traces.
std::string small_grid() {
  return "'" + source_path("traces/mlp4.json") + "' '" + source_path("traces/resnet_tiny.json") +
         "' --memory 24KiB,1MiB --link pcie3 --bandwidth 8GB/s --search-rounds 2 "
         "--search-time-limit 60 --deterministic";
}
std::size_t cells() {
  return 8 * (memplan::test::unsharded_policy_count() + 1);
}
std::string rows() {
  return "(" + std::to_string(cells()) + " rows)";
}

// The sweep in one process with two threads, written to `path`.
void threaded_sweep(const std::string& path) {
  const auto r = run_memplan("sweep " + small_grid() + " --threads 2 -o '" + path + "'");
  REQUIRE(r.exit_status == 0);
  REQUIRE(r.out == "wrote " + path + " " + rows() + "\n");
}

}  // namespace

TEST_CASE("memplan sweep under mpirun -np 2 writes the threaded run's CSV byte for byte",
          "[cli][sweep][mpi]") {
#ifndef MEMPLAN_MPIEXEC
  WARN("memplan was built without MPI (scripts/setup installs Open MPI): not tested");
#else
  const std::string dir = temp_dir();
  threaded_sweep(dir + "/threads.csv");
  // One thread per rank; root allowed where the tests run as root. Under the asan preset the
  // ranks run without LeakSanitizer: Open MPI never frees what its plugins allocate, and it
  // unloads them before the leak check, so their frames cannot be suppressed by name.
  const std::string mpirun = std::string(
                                 "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 "
                                 "ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 '") +
                             MEMPLAN_MPIEXEC + "' -x ASAN_OPTIONS -np 2 --oversubscribe";
  const auto r = run_memplan(
      "sweep " + small_grid() + " --threads 1 --progress -o '" + dir + "/mpi.csv'", mpirun);
  REQUIRE(r.exit_status == 0);
  CHECK(r.out == "wrote " + dir + "/mpi.csv " + rows() + "\n");  // rank 0 alone reports
  CHECK(memplan::test::read_text(dir + "/mpi.csv") ==
        memplan::test::read_text(dir + "/threads.csv"));
  // Rank 0 says how many ranks share the cells (two, not two lone processes each writing the whole
  // CSV), then one progress line per cell finished on either rank.
  const std::string n = std::to_string(cells());
  CHECK(r.err.rfind("sweep: 2 MPI ranks share " + n + " cells\n", 0) == 0);
  CHECK(count_lines(r.err) == 1 + cells());
  CHECK(r.err.find("sweep: " + n + "/" + n + " cells") != std::string::npos);

  // Resumed under mpirun from its first 30 rows and 10 bytes of the 31st: both ranks skip the
  // 30 kept cells (only rank 0 reads the CSV) and the result is again the threaded run's.
  const std::string threads = memplan::test::read_text(dir + "/threads.csv");
  std::size_t cut = 0;
  for (int line = 0; line < 31; ++line) cut = threads.find('\n', cut) + 1;
  std::ofstream(dir + "/mpi.csv", std::ios::binary) << threads.substr(0, cut + 10);
  const auto resumed = run_memplan(
      "sweep " + small_grid() + " --threads 1 --resume -o '" + dir + "/mpi.csv'", mpirun);
  REQUIRE(resumed.exit_status == 0);
  // The first line; a periodic progress line may follow on a loaded machine (every 5 s).
  CHECK(resumed.err.rfind("sweep: 2 MPI ranks share " + std::to_string(cells() - 30) + " cells\n",
                          0) == 0);
  CHECK(memplan::test::read_text(dir + "/mpi.csv") == threads);
#endif
}

TEST_CASE("memplan sweep --resume keeps the rows of a CSV cut short and runs only the rest",
          "[cli][sweep]") {
  const std::string dir = temp_dir();
  threaded_sweep(dir + "/full.csv");
  const std::string full = memplan::test::read_text(dir + "/full.csv");

  // Cut after the header, 20 rows and 30 bytes of the 21st, as a killed run leaves it; the kept
  // rows' notes marked, so that a row computed again would show.
  std::size_t cut = 0;
  for (int line = 0; line < 21; ++line) cut = full.find('\n', cut) + 1;
  std::string kept = full.substr(0, cut);
  for (std::size_t at = 0; (at = kept.find("every feature map kept", at)) != std::string::npos;) {
    kept.replace(at, 22, "KEPT FROM THE PARTIAL CSV");
  }
  REQUIRE(kept != full.substr(0, cut));
  std::ofstream(dir + "/resumed.csv", std::ios::binary) << kept + full.substr(cut, 30);
  const std::string expected = kept + full.substr(cut);

  const auto r = run_memplan("sweep " + small_grid() + " --threads 2 --progress --resume -o '" +
                             dir + "/resumed.csv'");
  REQUIRE(r.exit_status == 0);
  CHECK(r.out == "wrote " + dir + "/resumed.csv " + rows() + "\n");
  const std::string left = std::to_string(cells() - 20);  // less the 20 kept rows
  CHECK(r.err.find("sweep: " + left + "/" + left + " cells") != std::string::npos);
  CHECK(count_lines(r.err) == cells() - 20);
  CHECK(memplan::test::read_text(dir + "/resumed.csv") == expected);

  // A CSV of another grid is refused, left as it was, exit 2 with one line naming it.
  const std::string other = "sweep '" + source_path("traces/mlp4.json") +
                            "' --no-search --policies in-core --resume -o '" + dir +
                            "/resumed.csv'";
  const auto bad = run_memplan(other);
  CHECK(bad.exit_status == 2);
  CHECK(bad.err == "memplan: " + dir + "/resumed.csv:2: row 1 is not cell 1 of this sweep " +
                       "(trace, memory, link or policy differ): resume with the same grid\n");
  CHECK(memplan::test::read_text(dir + "/resumed.csv") == expected);
}
