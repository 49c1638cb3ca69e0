#pragma once
// Small hand-made PyTorch profiler traces for the importer tests: a conv net with one residual
// block (conv-bn-relu, conv-bn, add_ with the skip, relu, avg-pool, flatten, linear, cross-entropy)
// and its backward on an autograd thread, SGD with momentum, in either trace format. Every op
// launches one kernel of a known duration, so the expected device times are known exactly.
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "importers/kineto/kineto_importer.hpp"

namespace memplan::test {

struct SyntheticOptions {
  bool current_format = true;  // false: the 2021 categories and argument spellings
  int steps = 1;               // ProfilerStep#1..#steps
  bool gpu = true;             // false: no runtime calls, no kernels (a CPU-only training run)
  bool flows_only = false;  // kernels carry no correlation/external id, only ac2g flows link them
  bool memory = true;       // [memory] events
  /// Host time (us) before the ops of each step, by step (data loading): steps of different
  /// lengths. Empty: none.
  std::vector<int> step_idle_us;
};

/// The trace as a JSON document.
nlohmann::json synthetic_kineto(const SyntheticOptions& options = {});

/// `doc` imported as the file "synthetic.json" would be.
importers::ImportResult import_json(const nlohmann::json& doc,
                                    const importers::ImportOptions& options = {});

/// Device time of every kernel of one step of synthetic_kineto() (the sum of its kernels).
std::int64_t synthetic_step_kernel_ns();

/// Writes `text` to a fresh file in the test temp dir and returns its path.
std::string write_temp(const std::string& name, const std::string& text);

}  // namespace memplan::test
