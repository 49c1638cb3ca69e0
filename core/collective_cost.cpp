#include "core/collective_cost.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace memplan::sim {
namespace {

// The bandwidth and per-step latency a collective's data moves at.
struct Path {
  BytesPerSecond bytes_per_s = 0;
  Nanoseconds latency_ns = 0;
};

std::int64_t node_of(std::int32_t rank, std::int32_t gpus_per_node) {
  return std::max(rank, 0) / gpus_per_node;
}

// Whether the group of `n` ranks (c.ranks, or ranks 0..n-1 when empty) spans several nodes.
bool spans_nodes(const Collective& c, std::int32_t n, std::int32_t gpus_per_node) {
  if (c.ranks.empty()) return n > gpus_per_node;
  const std::int64_t first = node_of(c.ranks.front(), gpus_per_node);
  return std::any_of(c.ranks.begin(), c.ranks.end(),
                     [&](std::int32_t r) { return node_of(r, gpus_per_node) != first; });
}

Path path(bool across_nodes, const Interconnect& net) {
  if (!across_nodes) return {net.intra.bytes_per_s, net.intra.latency_ns};
  return {std::min(net.intra.bytes_per_s, net.inter.bytes_per_s), net.inter.latency_ns};
}

// steps · latency, saturating.
Nanoseconds steps_ns(std::int64_t steps, Nanoseconds latency_ns) {
  if (steps <= 0 || latency_ns <= 0) return 0;
  if (latency_ns > kMaxNanoseconds / steps) return kMaxNanoseconds;
  return steps * latency_ns;
}

// ceil(num/den · bytes / bandwidth) in nanoseconds, saturating (also for a bandwidth that is zero,
// negative or NaN). The product is formed before the one division so that whole inputs give the
// exact quotient when it is representable.
Nanoseconds wire_ns(std::int64_t num, std::int64_t den, Bytes bytes, BytesPerSecond bytes_per_s) {
  if (bytes <= 0 || num <= 0) return 0;
  if (!(bytes_per_s > 0)) return kMaxNanoseconds;
  const double ns = std::ceil(static_cast<double>(num) * static_cast<double>(bytes) * 1e9 /
                              (static_cast<double>(den) * bytes_per_s));
  if (!(ns < static_cast<double>(kMaxNanoseconds))) return kMaxNanoseconds;
  return std::max<Nanoseconds>(static_cast<Nanoseconds>(ns), 0);
}

std::int64_t ceil_log2(std::int64_t n) {
  return static_cast<std::int64_t>(std::bit_width(static_cast<std::uint64_t>(n - 1)));
}

// latency steps + num/den · S/B.
CollectiveCost cost(std::string_view algorithm, std::int64_t steps, std::int64_t num,
                    std::int64_t den, Bytes bytes, const Path& p) {
  return {add_ns(steps_ns(steps, p.latency_ns), wire_ns(num, den, bytes, p.bytes_per_s)),
          algorithm};
}

CollectiveCost all_reduce(std::int64_t n, Bytes bytes, const Path& p) {
  const CollectiveCost ring = cost("ring", 2 * (n - 1), 2 * (n - 1), n, bytes, p);
  const CollectiveCost tree = cost("tree", 2 * ceil_log2(n), 2, 1, bytes, p);
  return tree.transfer_ns < ring.transfer_ns ? tree : ring;
}

// Send and recv: the fabric between `rank` and the peer.
CollectiveCost point_to_point(const Collective& c, std::int32_t rank, std::int32_t world_size,
                              Bytes bytes, const Interconnect& net) {
  if (c.peer == rank) return {0, "local"};
  const bool across = c.peer < 0
                          ? world_size > net.gpus_per_node
                          : node_of(rank, net.gpus_per_node) != node_of(c.peer, net.gpus_per_node);
  return cost("direct", 1, 1, 1, bytes, path(across, net));
}

}  // namespace

CollectiveCost collective_cost(const Collective& c, std::int32_t rank, std::int32_t world_size,
                               const Interconnect& net) {
  Interconnect guarded = net;
  guarded.gpus_per_node = std::max(net.gpus_per_node, 1);
  const std::int32_t n =
      c.ranks.empty() ? std::max(world_size, 1) : static_cast<std::int32_t>(c.ranks.size());
  if (n <= 1) return {0, "local"};
  const Bytes bytes = std::max<Bytes>({c.in_bytes, c.out_bytes, 0});
  const Path p = path(spans_nodes(c, n, guarded.gpus_per_node), guarded);
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      return all_reduce(n, bytes, p);
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
      return cost("ring", n - 1, n - 1, n, bytes, p);
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      return cost("direct", n - 1, n - 1, n, bytes, p);
    case CollectiveKind::kBroadcast:
    case CollectiveKind::kReduce:
      return cost("ring", n - 1, 1, 1, bytes, p);
    case CollectiveKind::kSend:
    case CollectiveKind::kRecv:
      return point_to_point(c, rank, world_size, bytes, guarded);
    case CollectiveKind::kBarrier:
      return cost("tree", 2 * ceil_log2(n), 0, 1, 0, p);
  }
  return {0, "local"};
}

std::optional<BytesPerSecond> bus_bandwidth(const Collective& c, std::int32_t world_size,
                                            Nanoseconds transfer_ns) {
  const auto n = static_cast<double>(c.ranks.empty() ? world_size : std::ssize(c.ranks));
  const auto bytes = static_cast<double>(std::max(c.in_bytes, c.out_bytes));
  if (n < 2 || transfer_ns <= 0 || bytes <= 0 || c.kind == CollectiveKind::kBarrier)
    return std::nullopt;
  double factor = 1.0;
  switch (c.kind) {
    case CollectiveKind::kAllReduce:
      factor = 2.0 * (n - 1) / n;
      break;
    case CollectiveKind::kAllGather:
    case CollectiveKind::kReduceScatter:
    case CollectiveKind::kAllToAll:
    case CollectiveKind::kGather:
    case CollectiveKind::kScatter:
      factor = (n - 1) / n;
      break;
    default:
      break;
  }
  return bytes * factor / (static_cast<double>(transfer_ns) * 1e-9);
}

}  // namespace memplan::sim
