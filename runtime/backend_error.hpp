#pragma once
// BackendError: a backend failed at run time — a kernel met shapes it cannot use, an encoding
// did not fit its buffer, memory could not be mapped, a CUDA call failed. Not bad input (that is
// sim::InputError, exit 2) and not a bug (a broken invariant is MEMPLAN_CHECK): the CLI prints its
// message as one line and exits with status 1.
#include <stdexcept>
#include <string>

namespace memplan::runtime {

class BackendError : public std::runtime_error {
 public:
  explicit BackendError(const std::string& what) : std::runtime_error(what) {}
};

}  // namespace memplan::runtime
