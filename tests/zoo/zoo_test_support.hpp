#pragma once
// Helpers shared by the zoo tests: build a model without costs, find tensors and ops by name.
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

inline std::size_t count_layer(const sim::Workload& w, std::string_view layer, sim::Phase phase) {
  return static_cast<std::size_t>(std::count_if(w.ops.begin(), w.ops.end(), [&](const sim::Op& op) {
    return op.layer == sim::LayerType::named(layer) && op.phase == phase;
  }));
}

}  // namespace memplan::test
