#pragma once
// Helpers shared by the zoo tests: build a model without costs, find tensors and ops by name,
// sum a step's op time.
#include <algorithm>
#include <string>
#include <string_view>

#include "core/workload.hpp"
#include "zoo/models.hpp"

namespace memplan::test {

inline zoo::BuiltModel build(std::string_view model, std::int64_t batch = 1) {
  zoo::ModelOptions options;
  options.batch = batch;
  return zoo::build_model(*zoo::find_model(model), options);
}

inline const sim::Tensor& tensor_named(const sim::Workload& w, std::string_view name) {
  const auto it = std::find_if(w.tensors.begin(), w.tensors.end(),
                               [&](const sim::Tensor& t) { return t.name == name; });
  if (it == w.tensors.end()) throw std::runtime_error("no tensor named " + std::string(name));
  return *it;
}

inline const sim::Op& op_named(const sim::Workload& w, std::string_view name) {
  const auto it =
      std::find_if(w.ops.begin(), w.ops.end(), [&](const sim::Op& op) { return op.name == name; });
  if (it == w.ops.end()) throw std::runtime_error("no op named " + std::string(name));
  return *it;
}

/// The step's op time, every op's duration summed, in milliseconds.
inline double total_ms(const sim::Workload& w) {
  sim::Nanoseconds ns = 0;
  for (const sim::Op& op : w.ops) ns += op.duration_ns;
  return static_cast<double>(ns) / 1e6;
}

inline std::size_t count_layer(const sim::Workload& w, std::string_view layer, sim::Phase phase) {
  return static_cast<std::size_t>(std::count_if(w.ops.begin(), w.ops.end(), [&](const sim::Op& op) {
    return op.layer == sim::LayerType::named(layer) && op.phase == phase;
  }));
}

}  // namespace memplan::test
