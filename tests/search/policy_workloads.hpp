#pragma once
// Small layer chains for policy tests: each layer is a forward op and a backward op that names it
// in `differentiates`, saving its input and/or its output for backward as PyTorch would.
#include <array>
#include <string>
#include <vector>

#include "core/plan.hpp"
#include "core/workload.hpp"

namespace memplan::test {

struct LayerSpec {
  std::string name;
  std::string type;  // "conv2d", "relu", "max_pool2d", "linear", "softmax_cross_entropy", ...
  sim::Bytes out_bytes = 1000;
  sim::Nanoseconds forward_ns = 1000;
  sim::Nanoseconds backward_ns = 2000;
  bool saves_input = false;
  bool saves_output = false;
};

LayerSpec conv(const std::string& name, sim::Bytes bytes = 1000, sim::Nanoseconds ns = 1000);
LayerSpec relu(const std::string& name, sim::Bytes bytes = 1000, sim::Nanoseconds ns = 100);
LayerSpec pool(const std::string& name, sim::Bytes bytes = 500, sim::Nanoseconds ns = 100);
LayerSpec linear(const std::string& name, sim::Bytes bytes = 100, sim::Nanoseconds ns = 500);
LayerSpec loss(const std::string& name, sim::Bytes bytes = 100, sim::Nanoseconds ns = 100);

/// x (input) -> layers in order; backward in reverse. Forward op of layer i has id i; its backward
/// op has id 2n-1-i. Device memory is `memory_bytes`.
sim::Workload layer_chain(const std::vector<LayerSpec>& layers,
                          sim::Bytes memory_bytes = sim::Bytes{1} << 40,
                          sim::Bytes input_bytes = 1000);

/// Four maps a, b, c, d made from one input x (1024 bytes each, 512-byte gradients), so that
/// recomputing any of them needs only x, which stays resident (h4 reads it). Backward reads them
/// out of forward order: h1 reads d, h2 reads b, h3 reads a, h4 reads c (and x). Ops in issue
/// order f1..f4, h1..h4 (ids 0..7) with the given durations.
sim::Workload fan(std::array<sim::Nanoseconds, 4> forward_ns,
                  std::array<sim::Nanoseconds, 4> backward_ns,
                  sim::Bytes memory_bytes = sim::Bytes{1} << 40);

/// A plan's actions, in map order.
inline std::vector<sim::Action> actions(const sim::Plan& plan) {
  std::vector<sim::Action> out;
  for (const sim::Decision& d : plan.decisions) out.push_back(d.action);
  return out;
}

}  // namespace memplan::test
