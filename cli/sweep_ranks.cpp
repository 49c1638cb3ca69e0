#include "cli/sweep_ranks.hpp"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <exception>
#include <map>
#include <mutex>
#include <thread>

#ifdef MEMPLAN_WITH_MPI
#include <mpi.h>
#endif

namespace memplan::cli {
namespace {

#ifdef MEMPLAN_WITH_MPI
// Started by a launcher: Open MPI's mpirun, or srun (PMIx or PMI-2). A plain run stands alone
// rather than starting a one-rank MPI job of its own.
bool launched_by_mpi() {
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"}) {
    if (std::getenv(name) != nullptr) return true;
  }
  return false;
}

constexpr int kRowTag = 1;

// A row from another rank, if one is waiting: "CELL:LINE".
bool receive_row(std::map<std::size_t, std::string>& pending) {
  int waiting = 0;
  MPI_Status status;
  MPI_Iprobe(MPI_ANY_SOURCE, kRowTag, MPI_COMM_WORLD, &waiting, &status);
  if (waiting == 0) return false;
  int count = 0;
  MPI_Get_count(&status, MPI_CHAR, &count);
  std::string message(static_cast<std::size_t>(count), '\0');
  MPI_Recv(message.data(), count, MPI_CHAR, status.MPI_SOURCE, kRowTag, MPI_COMM_WORLD,
           MPI_STATUS_IGNORE);
  const std::size_t colon = message.find(':');
  pending.emplace(std::stoull(message.substr(0, colon)), message.substr(colon + 1));
  return true;
}

void send_row(std::size_t cell, const std::string& line) {
  const std::string message = std::to_string(cell) + ":" + line;
  MPI_Send(message.data(), static_cast<int>(message.size()), MPI_CHAR, 0, kRowTag, MPI_COMM_WORLD);
}
#endif

// Rows finished on this rank's worker thread, for the main thread (the one that calls MPI).
struct FinishedRows {
  std::mutex mutex;
  std::vector<std::pair<std::size_t, std::string>> rows;  // cell, CSV line
  bool finished = false;
  std::exception_ptr error;
};

}  // namespace

SweepRanks::SweepRanks() {
#ifdef MEMPLAN_WITH_MPI
  if (!launched_by_mpi()) return;
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  joined_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
#endif
}

SweepRanks::~SweepRanks() {
#ifdef MEMPLAN_WITH_MPI
  if (!joined_) return;
  if (std::uncaught_exceptions() > 0 && size_ > 1) MPI_Abort(MPI_COMM_WORLD, 2);
  MPI_Finalize();
#endif
}

void SweepRanks::finalize() {
#ifdef MEMPLAN_WITH_MPI
  if (joined_) MPI_Finalize();
  joined_ = false;
#endif
}

long long SweepRanks::broadcast(long long value) const {
#ifdef MEMPLAN_WITH_MPI
  if (joined_) MPI_Bcast(&value, 1, MPI_LONG_LONG, 0, MPI_COMM_WORLD);
#endif
  return value;
}

void SweepRanks::run(const search::Sweep& sweep, std::size_t first,
                     const search::SweepOptions& options,
                     const std::function<void(const std::vector<std::string>&)>& on_rows,
                     const std::function<void(std::size_t, std::size_t)>& on_progress) const {
  std::vector<std::size_t> cells;
  for (std::size_t i = first + static_cast<std::size_t>(rank_); i < sweep.size();
       i += static_cast<std::size_t>(size_)) {
    cells.push_back(i);
  }
  FinishedRows finished;
  search::SweepOptions mine = options;
  mine.on_progress = nullptr;
  mine.on_row = [&](std::size_t position, const search::SweepRow& row) {
    const std::lock_guard lock(finished.mutex);
    finished.rows.emplace_back(cells[position], search::sweep_csv_line(row));
  };
  std::thread worker([&] {
    std::exception_ptr error;
    try {
      (void)sweep.run(cells, mine);
    } catch (...) {
      error = std::current_exception();
    }
    const std::lock_guard lock(finished.mutex);
    finished.error = error;
    finished.finished = true;
  });
  struct Joiner {
    std::thread& thread;
    ~Joiner() { thread.join(); }
  } joiner{worker};

  std::map<std::size_t, std::string> pending;  // rank 0: rows waiting for the cells before them
  std::size_t next = first;                    // rank 0: the first cell not handed on yet
  std::size_t done = 0;
  for (bool worker_done = false; root() ? next < sweep.size() : !worker_done;) {
    std::vector<std::pair<std::size_t, std::string>> rows;
    {
      const std::lock_guard lock(finished.mutex);
      if (finished.error) std::rethrow_exception(finished.error);
      rows.swap(finished.rows);
      worker_done = finished.finished;
    }
    std::size_t arrived = rows.size();
    if (!root()) {
#ifdef MEMPLAN_WITH_MPI
      for (const auto& [cell, line] : rows) send_row(cell, line);
#endif
    } else {
      for (auto& row : rows) pending.insert(std::move(row));
#ifdef MEMPLAN_WITH_MPI
      while (joined_ && receive_row(pending)) ++arrived;
#endif
      for (const std::size_t n = done + arrived; done < n;)
        on_progress(++done, sweep.size() - first);
      std::vector<std::string> ready;
      for (auto it = pending.find(next); it != pending.end(); it = pending.find(++next)) {
        ready.push_back(std::move(it->second));
        pending.erase(it);
      }
      if (!ready.empty()) on_rows(ready);
    }
    const bool idle = arrived == 0;
    if (idle) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace memplan::cli
