#pragma once
// Bad input (a trace, a plan, a flag) is reported by throwing InputError: it carries where the
// problem is (file and JSON path, or the flag) and what it is. The CLI prints it as one line and
// exits with status 2. Expected outcomes such as "this plan does not fit" are values, not errors.
// Both parts are kept printable (core/printable.hpp): a name or a value quoted in them with a
// newline or an ESC does not split or spoof the line, and a huge literal is not echoed whole.
#include <stdexcept>
#include <string>
#include <utility>

#include "core/printable.hpp"

namespace memplan::sim {

class InputError : public std::runtime_error {
 public:
  InputError(const std::string& where, const std::string& problem)
      : InputError(Parts{printable(where), printable(problem)}) {}

  [[nodiscard]] const std::string& where() const { return where_; }
  [[nodiscard]] const std::string& problem() const { return problem_; }

 private:
  struct Parts {
    std::string where;
    std::string problem;
  };
  explicit InputError(Parts parts)
      : std::runtime_error(parts.where.empty() ? parts.problem
                                               : parts.where + ": " + parts.problem),
        where_(std::move(parts.where)),
        problem_(std::move(parts.problem)) {}

  std::string where_;
  std::string problem_;
};

}  // namespace memplan::sim
