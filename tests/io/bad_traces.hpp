#pragma once
// The catalogue of bad trace inputs, shared by the library test and the CLI test. Each case is a
// small valid trace with one thing broken, the JSON path the error must name and a phrase the
// message must contain.
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::test {

struct BadTrace {
  std::string name;
  std::string text;
  std::string where;    // must appear in the message
  std::string problem;  // must appear in the message
};

/// A valid 3-op trace: fc forward, its backward, and an SGD update.
nlohmann::json valid_small_trace();

std::vector<BadTrace> bad_traces();

}  // namespace memplan::test
