#include "search/policies/gist.hpp"

#include <algorithm>
#include <vector>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "memory/device_arena.hpp"

namespace memplan::search {

EncodingOptions parse_encoding_options(std::string_view list, std::string_view where) {
  EncodingOptions options;
  auto set_precision = [&](sim::Encoding e, std::string_view item) {
    if (options.precision_reduction && *options.precision_reduction != e) {
      throw sim::InputError(std::string(where),
                            fmt::format("'{}': only one precision reduction at a time", item));
    }
    options.precision_reduction = e;
  };
  while (!list.empty()) {
    const auto comma = list.find(',');
    const std::string_view item = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (item == "binarize") {
      options.binarize = true;
    } else if (item == "sparse") {
      options.sparse = true;
    } else if (item == "dpr" || item == "fp16") {
      set_precision(sim::Encoding::kFp16, item);
    } else if (item == "fp10") {
      set_precision(sim::Encoding::kFp10, item);
    } else if (item == "fp8") {
      set_precision(sim::Encoding::kFp8, item);
    } else if (item == "all") {
      options.binarize = options.sparse = true;
      set_precision(sim::Encoding::kFp16, item);
    } else {
      throw sim::InputError(
          std::string(where),
          fmt::format("unknown encoding '{}' (binarize, sparse, dpr, fp16, fp10, fp8, all)", item));
    }
  }
  return options;
}

sim::Plan apply_encodings(const sim::Plan& plan, const NetworkView& view,
                          const EncodingOptions& options) {
  sim::Plan result = plan;
  if (!options.any()) return result;
  result.policy += "+gist";
  // Encoding kept maps does not change which ops a regeneration re-runs; a map that one of them
  // reads in forward is kept exactly, or sparse (lossless), never binarized or narrowed
  // (validate_plan's rule).
  const std::vector<bool> rerun = sim::ops_rerun_by_recompute(plan, view.workload());
  for (std::size_t m = 0; m < result.decisions.size(); ++m) {
    sim::Decision& d = result.decisions[m];
    if (d.action != sim::Action::kKeep) continue;
    const sim::FeatureMap& fm = view.feature_maps()[m];
    const bool read_by_rerun = std::any_of(fm.forward_uses.begin(), fm.forward_uses.end(),
                                           [&](sim::OpId op) { return rerun[index(op)]; });
    std::vector<sim::Encoding> tries;
    if (options.binarize) tries.push_back(sim::Encoding::kBinarize);
    if (options.sparse) tries.push_back(sim::Encoding::kSparse);
    if (options.precision_reduction) tries.push_back(*options.precision_reduction);
    const sim::Tensor& tensor = view.workload().tensor(fm.tensor);
    for (sim::Encoding e : tries) {
      if (read_by_rerun && e != sim::Encoding::kSparse) continue;
      // Gist encodes where it saves memory: an encoding that frees nothing once the arena rounds
      // both buffers to its 512-byte unit (a loss's scalar, nll_loss's total weight) would cost
      // its codec and, narrowed, its precision for nothing.
      if (sim::DeviceArena::aligned_size(sim::encoded_bytes(e, tensor)) >=
          sim::DeviceArena::aligned_size(tensor.bytes))
        continue;
      sim::Decision candidate = d;
      candidate.action = sim::Action::kEncode;
      candidate.encoding = e;
      if (sim::decision_problem(candidate, fm, view.workload()).empty()) {
        d = candidate;
        break;
      }
    }
  }
  return result;
}

}  // namespace memplan::search
