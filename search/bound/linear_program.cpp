// Note [A certified LP bound]
// The bound a plan's time is compared with must hold, so the value of the linear program is not
// taken from the solver's objective, which is exact only up to its feasibility tolerances. For
// min c.x subject to A x >= b and l <= x <= u (every bound finite), any row multipliers y >= 0 give
//   c.x = y.b + (c - A^T y).x + y.(A x - b) >= y.b + sum_j min(r_j l_j, r_j u_j),   r = c - A^T y,
// for every feasible x (weak duality with the column bounds). The solver's dual values, clipped
// at 0, are such a y: at the optimum the sum is the optimum (up to rounding, which the caller's
// margin covers); anywhere else it is still a lower bound, only weaker.
#include "search/bound/linear_program.hpp"

#include <algorithm>
#include <limits>

#include <coin/ClpSimplex.hpp>
#include <coin/CoinPackedMatrix.hpp>

#include "core/check.hpp"

namespace memplan::search {

int LinearProgram::add_column(double lower, double upper, double cost) {
  MEMPLAN_CHECK(lower <= upper, "a column's bounds are ordered");
  lower_.push_back(lower);
  upper_.push_back(upper);
  cost_.push_back(cost);
  return static_cast<int>(lower_.size() - 1);
}

void LinearProgram::add_row(std::span<const std::pair<int, double>> terms, double lower) {
  for (const auto& [column, coefficient] : terms) {
    MEMPLAN_CHECK(column >= 0 && static_cast<std::size_t>(column) < columns(),
                  "a row's terms name columns of the program");
    if (coefficient == 0.0) continue;
    indices_.push_back(column);
    values_.push_back(coefficient);
  }
  row_start_.push_back(values_.size());
  row_lower_.push_back(lower);
}

LinearProgram::Answer LinearProgram::minimize() const {
  const auto n_rows = static_cast<int>(rows());
  const auto n_columns = static_cast<int>(columns());
  std::vector<CoinBigIndex> starts(row_start_.begin(), row_start_.end());
  std::vector<int> lengths(rows());
  for (std::size_t r = 0; r < rows(); ++r)
    lengths[r] = static_cast<int>(row_start_[r + 1] - row_start_[r]);
  const CoinPackedMatrix matrix(false, n_columns, n_rows, static_cast<CoinBigIndex>(nonzeros()),
                                values_.data(), indices_.data(), starts.data(), lengths.data());
  const std::vector<double> row_upper(rows(), COIN_DBL_MAX);
  ClpSimplex model;
  model.setLogLevel(0);
  model.loadProblem(matrix, lower_.data(), upper_.data(), cost_.data(), row_lower_.data(),
                    row_upper.data());
  // Presolve, then the solver's choice of simplex: on these programs (many knapsack-like points
  // sharing the step's column) 2 to 6 times faster than the dual simplex alone.
  model.initialSolve();
  Answer answer;
  answer.optimal = model.status() == 0;
  answer.objective = model.objectiveValue();
  const double* primal = model.getColSolution();
  if (primal != nullptr) answer.solution.assign(primal, primal + n_columns);

  // Note [A certified LP bound]: y >= 0 from the solver's duals, r = c - A^T y.
  const double* duals = model.dualRowSolution();
  std::vector<double> reduced(cost_);
  double value = 0.0;
  for (std::size_t r = 0; r < rows(); ++r) {
    const double y = duals != nullptr ? std::max(0.0, duals[r]) : 0.0;
    if (y == 0.0) continue;
    value += y * row_lower_[r];
    for (std::size_t k = row_start_[r]; k < row_start_[r + 1]; ++k)
      reduced[static_cast<std::size_t>(indices_[k])] -= y * values_[k];
  }
  for (std::size_t j = 0; j < columns(); ++j)
    value += reduced[j] >= 0.0 ? reduced[j] * lower_[j] : reduced[j] * upper_[j];
  answer.certified = value;
  return answer;
}

}  // namespace memplan::search
