#pragma once
// Random small instances for exact mode (fixed seeds): a chain of random layers with skip
// connections and in-place ReLUs, each layer's backward op reading what its type saves as PyTorch
// would; a random link; a device between the smallest peak of a frugal plan (swap-all with late
// prefetches, recompute-all) and the in-core peak.
#include <cstdint>

#include "core/machine.hpp"
#include "core/workload.hpp"

namespace memplan::test {

struct ExactInstance {
  sim::Workload workload;
  sim::Machine machine;
};

/// An instance with between min_layers and max_layers forward layers (so at most max_layers
/// feature maps) on which some plan fits; the same seed gives the same instance.
ExactInstance exact_instance(std::uint64_t seed, int min_layers, int max_layers);

}  // namespace memplan::test
