// run_beside (search/parallel.hpp): the side job runs only on a worker that is idle while the
// main job runs, and is skipped otherwise; what it wrote is the caller's once it ran.
#include <atomic>
#include <chrono>
#include <stdexcept>
#include <thread>

#include <oneapi/tbb/task_arena.h>
#include <catch2/catch.hpp>

#include "search/parallel.hpp"

using memplan::search::run_beside;

TEST_CASE("run_beside skips the side job when no other worker is free", "[search][parallel]") {
  tbb::task_arena one_thread(1);
  one_thread.execute([] {
    int main_ran = 0;
    int side_ran = 0;
    CHECK_FALSE(run_beside([&] { ++main_ran; }, [&] { ++side_ran; }));
    CHECK(main_ran == 1);
    CHECK(side_ran == 0);
  });
}

TEST_CASE("run_beside runs the side job on an idle worker", "[search][parallel]") {
  tbb::task_arena two_threads(2);
  two_threads.execute([] {
    std::atomic<bool> side_started{false};
    int side_result = 0;
    const bool ran = run_beside(
        [&] {
          // The main job outlasts the side job's start: the other worker is idle and takes it.
          const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
          while (!side_started.load() && std::chrono::steady_clock::now() < give_up)
            std::this_thread::yield();
        },
        [&] {
          side_started.store(true);
          side_result = 42;
        });
    REQUIRE(ran);
    CHECK(side_result == 42);
  });
}

TEST_CASE("run_beside passes an exception of the side job on", "[search][parallel]") {
  tbb::task_arena two_threads(2);
  two_threads.execute([] {
    std::atomic<bool> side_started{false};
    auto wait_for_side = [&] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!side_started.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
    };
    CHECK_THROWS_AS(run_beside(wait_for_side,
                               [&] {
                                 side_started.store(true);
                                 throw std::runtime_error("side");
                               }),
                    std::runtime_error);
  });
}

TEST_CASE("run_beside passes the main job's exception on when both throw", "[search][parallel]") {
  // As when a deadline passes: both jobs stop (memplan search's seeding under --time-limit).
  tbb::task_arena two_threads(2);
  two_threads.execute([] {
    std::atomic<bool> side_started{false};
    std::atomic<bool> main_threw{false};
    auto main_job = [&] {
      const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!side_started.load() && std::chrono::steady_clock::now() < give_up)
        std::this_thread::yield();
      main_threw.store(true);
      throw std::logic_error("main");
    };
    auto side_job = [&] {
      side_started.store(true);
      while (!main_threw.load()) std::this_thread::yield();
      throw std::runtime_error("side");
    };
    CHECK_THROWS_AS(run_beside(main_job, side_job), std::logic_error);
  });
}
