// Each forward op's output, sized from the recorded shapes, against the allocations the op made on
// its thread while it ran (as the allocator rounds them): where the trace's [memory] events carry
// addresses (memory_timeline.hpp), a check of the shapes, the dtypes and the dataflow's choice of
// output. The import reports how many outputs an allocation confirms; sizes stay the shapes'.
#include <algorithm>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "importers/kineto/memory_timeline.hpp"
#include "importers/kineto/step_builder.hpp"

namespace memplan::importers::detail {

void StepBuilder::check_outputs_against_allocations() {
  const std::int64_t device = report_.gpu ? 1 : 0;
  const auto allocations = pair_allocations(trace_.memory_events, device);
  if (!allocations) return;
  report_.allocations = allocations->size();
  std::unordered_map<std::string, std::vector<std::pair<sim::Nanoseconds, sim::Bytes>>> by_thread;
  for (const Allocation& a : *allocations) {
    if (a.alloc_ns) {
      by_thread[a.thread].emplace_back(*a.alloc_ns, a.bytes);  // in time order
    } else {
      ++report_.allocations_before_trace;
    }
  }
  for (const Unit& u : units_) {
    if (u.role != Unit::Role::kForward || u.op == sim::kNoOp) continue;
    const auto info = forward_.find(u.op);
    if (info == forward_.end() || info->second.output == sim::kNoTensor) continue;
    const sim::Bytes bytes = tensor(info->second.output).bytes;
    if (bytes == 0) continue;
    ++report_.outputs_checked;
    const auto list = by_thread.find(event(u).thread);
    if (list == by_thread.end()) continue;
    const auto& made = list->second;
    auto it =
        std::lower_bound(made.begin(), made.end(), std::pair{event(u).start_ns, sim::Bytes{0}});
    const sim::Bytes expected = allocator_bytes(bytes, device);
    for (; it != made.end() && it->first < event(u).end_ns(); ++it) {
      if (it->second == expected) {
        ++report_.outputs_confirmed;
        break;
      }
    }
  }
}

}  // namespace memplan::importers::detail
