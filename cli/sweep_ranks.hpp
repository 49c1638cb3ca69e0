#pragma once
// The processes one `memplan sweep` runs on: the ranks of an MPI job when memplan was built with
// MPI and started by mpirun or srun, this process alone otherwise. Of the cells still to run, rank
// r runs the cells r, r + ranks, r + 2 ranks, ... on a worker thread (with its own threads inside)
// and sends each row to rank 0 as soon as it finished; rank 0 hands on the rows in grid order as
// soon as every cell before them finished, so that it can write the CSV as it grows and nobody
// waits at a barrier (docs/sweep.md, "Across machines"). All MPI calls are here, made from the
// main thread only (MPI_THREAD_FUNNELED); the sweep library itself knows nothing of MPI.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "search/studies/sweep.hpp"

namespace memplan::cli {

class SweepRanks {
 public:
  /// Joins the MPI job when started by mpirun or srun (MPI_Init), else stands alone.
  SweepRanks();
  /// MPI_Finalize; when leaving by an exception, MPI_Abort with exit status 2, so that the other
  /// ranks do not wait for this one forever.
  ~SweepRanks();
  SweepRanks(const SweepRanks&) = delete;
  SweepRanks& operator=(const SweepRanks&) = delete;

  [[nodiscard]] int rank() const { return rank_; }
  [[nodiscard]] int size() const { return size_; }
  [[nodiscard]] bool root() const { return rank_ == 0; }

  /// Leaves the MPI job now (MPI_Finalize); for a rank about to stop on an error the other ranks
  /// were told of, so that the destructor does not abort the job.
  void finalize();

  /// Rank 0's value, on every rank.
  [[nodiscard]] long long broadcast(long long value) const;

  /// Runs cells `first` .. sweep.size()-1 shared among the ranks. On rank 0, `on_rows` gets the
  /// rows as CSV lines in grid order, each batch as soon as every cell before it finished, and
  /// `on_progress` the number of cells finished on any rank, once per cell; neither is called on
  /// the other ranks. `options.on_progress` and `options.on_row` are not used.
  void run(const search::Sweep& sweep, std::size_t first, const search::SweepOptions& options,
           const std::function<void(const std::vector<std::string>&)>& on_rows,
           const std::function<void(std::size_t done, std::size_t total)>& on_progress) const;

 private:
  int rank_ = 0;
  int size_ = 1;
  bool joined_ = false;
};

}  // namespace memplan::cli
