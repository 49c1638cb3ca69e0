#pragma once
// parallel_each: the one way the search folder runs a loop on oneTBB's workers. Besides running
// body(i) for every i in [begin, end), it gives the caller a happens-before edge from every body
// that a thread sanitizer can see: Debian's oneTBB is not built with TSan, so the join at the end
// of a parallel_for is invisible to it, and once a worker's access is older than TSan's history
// no suppression of TBB's frames can apply (tests/tsan.supp). Each body ends with a release
// increment of a counter, the caller acquires it after the loop, and checks that every index ran.
#include <algorithm>
#include <atomic>
#include <cstddef>
#include <exception>

#include <oneapi/tbb/blocked_range.h>
#include <oneapi/tbb/global_control.h>
#include <oneapi/tbb/parallel_for.h>
#include <oneapi/tbb/partitioner.h>
#include <oneapi/tbb/task_group.h>

#include "core/check.hpp"

namespace memplan::search {

enum class Split {
  kAuto,       // oneTBB's chunking: many cheap bodies (one simulation each)
  kOnePerTask  // one index per task: few bodies of very different cost (subtrees, grid cells)
};

/// The concurrency to give a task arena asked for `threads` (a thread count from 1, or
/// tbb::task_arena::automatic): at most what oneTBB's pool allows on this machine, since an arena
/// asked for more runs with that many anyway, after oneTBB printed a raw "TBB Warning: The number
/// of workers is currently limited" on standard error (--threads 64 on two cores). The search's
/// results do not depend on it (Same inputs, same outputs, whatever the number of threads).
inline int arena_concurrency(int threads) {
  if (threads <= 0) return threads;
  const auto most = static_cast<int>(
      tbb::global_control::active_value(tbb::global_control::max_allowed_parallelism));
  return std::clamp(threads, 1, std::max(1, most));
}

template <class Body>
void parallel_each(std::size_t begin, std::size_t end, Body&& body, Split split = Split::kAuto) {
  std::atomic<std::size_t> done{0};
  auto run = [&](const tbb::blocked_range<std::size_t>& range) {
    for (std::size_t i = range.begin(); i != range.end(); ++i) body(i);
    done.fetch_add(range.size(), std::memory_order_release);
  };
  if (split == Split::kOnePerTask) {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(begin, end, 1), run,
                      tbb::simple_partitioner());
  } else {
    tbb::parallel_for(tbb::blocked_range<std::size_t>(begin, end), run);
  }
  MEMPLAN_CHECK(done.load(std::memory_order_acquire) == end - begin,
                "every index of a parallel loop ran");
}

/// Runs main() on this thread and offers side() to an idle oneTBB worker meanwhile: side runs
/// only if a worker takes it up before main() returns, and is skipped otherwise, so on a machine
/// whose cores are all busy it costs nothing. Returns whether side ran (to its end); its writes
/// are then visible to the caller (a release/acquire flag, which a thread sanitizer sees). An
/// exception from either reaches the caller once side is over or skipped (main's, when both
/// throw).
template <class Main, class Side>
bool run_beside(Main&& main, Side&& side) {
  enum : int { kOffered, kRunning, kDone, kSkipped };
  std::atomic<int> state{kOffered};
  tbb::task_group group;
  group.run([&] {
    int offered = kOffered;
    if (!state.compare_exchange_strong(offered, kRunning, std::memory_order_acq_rel)) return;
    side();
    state.store(kDone, std::memory_order_release);
  });
  std::exception_ptr failed;
  try {
    main();
  } catch (...) {
    failed = std::current_exception();
  }
  int offered = kOffered;
  state.compare_exchange_strong(offered, kSkipped, std::memory_order_acq_rel);
  if (failed) {
    // The side job's own exception, if any, goes: the caller gets main's.
    try {
      group.wait();
    } catch (...) {
    }
    std::rethrow_exception(failed);
  }
  group.wait();
  return state.load(std::memory_order_acquire) == kDone;
}

}  // namespace memplan::search
