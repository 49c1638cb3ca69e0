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

/// The same step as rank `rank` of a job of two (trace format v3): streams "compute" and "nccl",
/// the weight gradient all-reduced on stream 1 (op 3, all_reduce #0 of group "0") and the update
/// after it (`after`: [3]).
nlohmann::json valid_v3_trace(int rank = 0);

/// A job of ranks 0 and 1, each valid_v3_trace's step (trace format v3 `ranks`).
nlohmann::json valid_two_rank_job();

/// Bad traces of every kind, v3's fields included (bad_v3_traces).
std::vector<BadTrace> bad_traces();

}  // namespace memplan::test
