#include "core/workload_graph.hpp"

#include <algorithm>
#include <functional>
#include <queue>

#include <boost/graph/depth_first_search.hpp>

#include "core/check.hpp"

namespace memplan::sim {
namespace {

using Graph = WorkloadGraph::Graph;
using Vertex = boost::graph_traits<Graph>::vertex_descriptor;
using Edge = boost::graph_traits<Graph>::edge_descriptor;

// Records the DFS tree and the first back edge; a back edge closes a cycle.
struct CycleFinder : boost::default_dfs_visitor {
  std::vector<Vertex>* parent;
  std::optional<Edge>* first_back_edge;
  void tree_edge(Edge e, const Graph& g) const {
    (*parent)[boost::target(e, g)] = boost::source(e, g);
  }
  void back_edge(Edge e, const Graph& /*g*/) const {
    if (!first_back_edge->has_value()) *first_back_edge = e;
  }
};

}  // namespace

WorkloadGraph::WorkloadGraph(const Workload& workload) : graph_(workload.ops.size()) {
  const std::size_t op_count = workload.ops.size();
  for (const Op& op : workload.ops) {
    for (TensorId t : op.inputs) {
      if (index(t) >= workload.tensors.size()) continue;
      const OpId producer = workload.tensor(t).producer;
      if (index(producer) >= op_count || index(op.id) >= op_count) continue;
      boost::add_edge(index(producer), index(op.id), t, graph_);
    }
  }
}

std::optional<std::vector<OpId>> WorkloadGraph::find_cycle() const {
  const auto n = boost::num_vertices(graph_);
  std::vector<Vertex> parent(n);
  for (Vertex v = 0; v < n; ++v) parent[v] = v;
  std::optional<Edge> back;
  CycleFinder visitor;
  visitor.parent = &parent;
  visitor.first_back_edge = &back;
  std::vector<boost::default_color_type> colors(n);
  boost::depth_first_search(graph_,
                            boost::visitor(visitor).color_map(boost::make_iterator_property_map(
                                colors.begin(), boost::get(boost::vertex_index, graph_))));
  if (!back) return std::nullopt;
  // The back edge u -> v closes the tree path v -> ... -> u.
  const Vertex u = boost::source(*back, graph_);
  const Vertex v = boost::target(*back, graph_);
  std::vector<OpId> cycle;
  for (Vertex w = u; w != v; w = parent[w]) {
    cycle.push_back(op_id(w));
    MEMPLAN_CHECK(parent[w] != w, "a back edge's source descends from its target in the DFS tree");
  }
  cycle.push_back(op_id(v));
  std::reverse(cycle.begin(), cycle.end());
  return cycle;
}

std::vector<OpId> WorkloadGraph::topological_order() const {
  // Kahn's algorithm with a min-heap, so that ties follow issue order and the result is stable.
  const auto n = boost::num_vertices(graph_);
  std::vector<std::size_t> indegree(n, 0);
  for (Vertex v = 0; v < n; ++v) indegree[v] = boost::in_degree(v, graph_);
  std::priority_queue<Vertex, std::vector<Vertex>, std::greater<>> ready;
  for (Vertex v = 0; v < n; ++v) {
    if (indegree[v] == 0) ready.push(v);
  }
  std::vector<OpId> order;
  order.reserve(n);
  while (!ready.empty()) {
    const Vertex v = ready.top();
    ready.pop();
    order.push_back(op_id(v));
    for (auto [e, end] = boost::out_edges(v, graph_); e != end; ++e) {
      if (--indegree[boost::target(*e, graph_)] == 0) ready.push(boost::target(*e, graph_));
    }
  }
  MEMPLAN_CHECK(order.size() == n, "topological_order() is only called on an acyclic graph");
  return order;
}

std::vector<OpId> WorkloadGraph::ancestors(OpId op) const {
  std::vector<char> seen(boost::num_vertices(graph_), 0);
  std::vector<Vertex> stack{static_cast<Vertex>(op)};
  std::vector<OpId> result;
  while (!stack.empty()) {
    const Vertex v = stack.back();
    stack.pop_back();
    for (auto [e, end] = boost::in_edges(v, graph_); e != end; ++e) {
      const Vertex s = boost::source(*e, graph_);
      if (seen[s] == 0) {
        seen[s] = 1;
        result.push_back(op_id(s));
        stack.push_back(s);
      }
    }
  }
  std::sort(result.begin(), result.end());
  return result;
}

}  // namespace memplan::sim
