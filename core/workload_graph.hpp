#pragma once
// WorkloadGraph: the op dependency graph of a Workload as a Boost.Graph adjacency list — one
// vertex per op, an edge from each tensor's producer to each op that reads it. Used for cycle
// detection when a trace is read, for topological orders, and by analyses that need ancestors
// (recompute chains) or descendants.
#include <optional>
#include <vector>

#include <boost/graph/adjacency_list.hpp>

#include "core/workload.hpp"

namespace memplan::sim {

class WorkloadGraph {
 public:
  /// Edge property: the tensor that carries the dependency.
  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::bidirectionalS,
                                      boost::no_property, TensorId>;

  /// Builds the graph; references out of range are skipped (validate() reports them first).
  explicit WorkloadGraph(const Workload& workload);

  /// Ops on one dependency cycle, in order (the first op reads what the last one writes), or
  /// nullopt when the graph is acyclic.
  [[nodiscard]] std::optional<std::vector<OpId>> find_cycle() const;

  /// A topological order of all ops (ties broken by issue order). Requires an acyclic graph.
  [[nodiscard]] std::vector<OpId> topological_order() const;

  /// Every op that `op` depends on, transitively (not including `op`), in ascending id order.
  [[nodiscard]] std::vector<OpId> ancestors(OpId op) const;

  [[nodiscard]] const Graph& graph() const { return graph_; }

 private:
  Graph graph_;
};

}  // namespace memplan::sim
