#pragma once
// The processes one `memplan sweep` runs on: the ranks of an MPI job when memplan was built with
// MPI and started by mpirun or srun, this process alone otherwise. The cells still to run are
// shared out in chunks: in each chunk rank r runs the cells r, r + ranks, r + 2 ranks, ... (with
// its own threads), and rank 0 gathers the chunk's rows and gets them in grid order, so it can
// write the CSV as it grows (docs/sweep.md, "Across machines"). All MPI calls are here, made
// from the main thread only; the sweep library itself knows nothing of MPI.
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "search/sweep.hpp"

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

  /// Runs cells `first` .. sweep.size()-1 shared among the ranks, in chunks of `chunk` cells.
  /// On rank 0, `on_rows` gets each chunk's rows as CSV lines, in grid order; it is never called
  /// on the other ranks.
  void run(const search::Sweep& sweep, std::size_t first, std::size_t chunk,
           const search::SweepOptions& options,
           const std::function<void(const std::vector<std::string>&)>& on_rows) const;

 private:
  /// Every rank's lines to rank 0, in rank order (empty on the other ranks).
  [[nodiscard]] std::vector<std::vector<std::string>> gather(
      const std::vector<std::string>& lines) const;

  int rank_ = 0;
  int size_ = 1;
  bool joined_ = false;
};

}  // namespace memplan::cli
