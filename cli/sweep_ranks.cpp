#include "cli/sweep_ranks.hpp"

#include <algorithm>
#include <cstdlib>
#include <exception>

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

// Lines as one buffer: each its length in decimal, a colon, then its bytes.
std::string pack(const std::vector<std::string>& lines) {
  std::string out;
  for (const std::string& line : lines) out += std::to_string(line.size()) + ":" + line;
  return out;
}

std::vector<std::string> unpack(const char* data, std::size_t size) {
  std::vector<std::string> lines;
  std::size_t i = 0;
  while (i < size) {
    std::size_t length = 0;
    for (; data[i] != ':'; ++i) length = length * 10 + static_cast<std::size_t>(data[i] - '0');
    ++i;
    lines.emplace_back(data + i, length);
    i += length;
  }
  return lines;
}
#endif

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

std::vector<std::vector<std::string>> SweepRanks::gather(
    const std::vector<std::string>& lines) const {
  if (!joined_) return {lines};
#ifdef MEMPLAN_WITH_MPI
  const std::string packed = pack(lines);
  const int size = static_cast<int>(packed.size());
  std::vector<int> sizes(root() ? size_ : 0);
  MPI_Gather(&size, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, MPI_COMM_WORLD);
  std::vector<int> offsets(sizes.size());
  for (std::size_t r = 1; r < sizes.size(); ++r) offsets[r] = offsets[r - 1] + sizes[r - 1];
  std::string all(root() ? static_cast<std::size_t>(offsets.back() + sizes.back()) : 0, '\0');
  MPI_Gatherv(packed.data(), size, MPI_CHAR, all.data(), sizes.data(), offsets.data(), MPI_CHAR, 0,
              MPI_COMM_WORLD);
  std::vector<std::vector<std::string>> out;
  for (std::size_t r = 0; r < sizes.size(); ++r) {
    out.push_back(unpack(all.data() + offsets[r], static_cast<std::size_t>(sizes[r])));
  }
  return out;
#else
  return {lines};
#endif
}

void SweepRanks::run(const search::Sweep& sweep, std::size_t first, std::size_t chunk,
                     const search::SweepOptions& options,
                     const std::function<void(const std::vector<std::string>&)>& on_rows) const {
  const std::size_t ranks = static_cast<std::size_t>(size_);
  const std::size_t total = sweep.size() - std::min(first, sweep.size());
  std::size_t done = 0;  // cells of earlier chunks
  search::SweepOptions mine_options = options;
  if (options.on_progress && root()) {
    // This rank's cells as they finish, on top of the chunks already gathered.
    mine_options.on_progress = [&](const search::SweepProgress& p) {
      options.on_progress({done + p.done, total, p.elapsed_s});
    };
  } else {
    mine_options.on_progress = nullptr;
  }
  for (std::size_t begin = first; begin < sweep.size(); begin += chunk) {
    const std::size_t end = std::min(sweep.size(), begin + chunk);
    std::vector<std::size_t> cells;
    for (std::size_t i = begin + static_cast<std::size_t>(rank_); i < end; i += ranks) {
      cells.push_back(i);
    }
    std::vector<std::string> lines;
    for (const search::SweepRow& row : sweep.run(cells, mine_options)) {
      lines.push_back(search::sweep_csv_line(row));
    }
    const std::vector<std::vector<std::string>> all = gather(lines);
    if (!root()) continue;
    std::vector<std::string> ordered;
    for (std::size_t j = 0; j < end - begin; ++j) ordered.push_back(all[j % ranks][j / ranks]);
    done += end - begin;
    if (ranks > 1 && options.on_progress) options.on_progress({done, total, 0.0});
    on_rows(ordered);
  }
}

}  // namespace memplan::cli
