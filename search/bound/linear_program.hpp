#pragma once
// LinearProgram: a minimisation over columns with finite bounds and rows `sum >= lower`, solved by
// COIN-OR CLP (Debian's coinor-libclp-dev), answered with a value that is a lower bound on the
// program's optimum whatever the solver's tolerances (Note [A certified LP bound] in
// linear_program.cpp). The lower bound on a plan's time (lower_bound.hpp) is built on it.
#include <cstddef>
#include <span>
#include <utility>
#include <vector>

namespace memplan::search {

class LinearProgram {
 public:
  /// A column `lower <= x <= upper` (both finite) with objective coefficient `cost`; its index.
  int add_column(double lower, double upper, double cost);
  /// A row `sum(coefficient * x[column]) >= lower` over (column, coefficient) terms.
  void add_row(std::span<const std::pair<int, double>> terms, double lower);

  [[nodiscard]] std::size_t columns() const { return lower_.size(); }
  [[nodiscard]] std::size_t rows() const { return row_lower_.size(); }
  [[nodiscard]] std::size_t nonzeros() const { return values_.size(); }

  struct Answer {
    bool optimal = false;    // the solver reported an optimum (else `certified` may be weak)
    double objective = 0.0;  // the solver's objective value
    /// A lower bound on the optimum from the solver's dual values by weak duality: valid for any
    /// dual values, exact up to rounding when they are optimal.
    double certified = 0.0;
    std::vector<double> solution;  // the solver's value of each column
  };
  /// Solves the program (presolved, by CLP's choice of simplex); deterministic.
  [[nodiscard]] Answer minimize() const;

 private:
  std::vector<double> lower_, upper_, cost_;
  std::vector<std::size_t> row_start_{0};
  std::vector<int> indices_;
  std::vector<double> values_;
  std::vector<double> row_lower_;
};

}  // namespace memplan::search
