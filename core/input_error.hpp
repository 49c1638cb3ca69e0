#pragma once
// Bad input (a trace, a plan, a flag) is reported by throwing InputError: it carries where the
// problem is (file and JSON path, or the flag) and what it is. The CLI prints it as one line and
// exits with status 2. Expected outcomes such as "this plan does not fit" are values, not errors.
#include <stdexcept>
#include <string>

namespace memplan::sim {

class InputError : public std::runtime_error {
 public:
  InputError(std::string where, std::string problem)
      : std::runtime_error(where.empty() ? problem : where + ": " + problem),
        where_(std::move(where)),
        problem_(std::move(problem)) {}

  [[nodiscard]] const std::string& where() const { return where_; }
  [[nodiscard]] const std::string& problem() const { return problem_; }

 private:
  std::string where_;
  std::string problem_;
};

}  // namespace memplan::sim
