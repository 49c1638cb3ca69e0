// The collective cost model (Note [Collective cost model] in core/collective_cost.hpp): every
// formula against numbers worked by hand in the comment above its check, the ring/tree choice on
// both sides of its crossover, the network's bandwidth and latency once a group spans nodes, and
// the names PyTorch records a collective under (core/collective.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/collective.hpp"
#include "core/collective_cost.hpp"
#include "core/interconnect.hpp"
#include "core/machine.hpp"

using namespace memplan::sim;

namespace {

// 100 GB/s and 2 us per step inside a node; 25 GB/s and 5 us between nodes; 8 GPUs a node.
Interconnect test_net() {
  Interconnect net;
  net.name = "test";
  net.intra = {100e9, 2'000};
  net.inter = {25e9, 5'000};
  net.gpus_per_node = 8;
  return net;
}

Collective make(CollectiveKind kind, Bytes in, Bytes out, std::vector<std::int32_t> ranks = {}) {
  Collective c;
  c.kind = kind;
  c.in_bytes = in;
  c.out_bytes = out;
  c.ranks = std::move(ranks);
  return c;
}

// The cost on test_net() as called by rank 0 of a job of `world` ranks.
CollectiveCost priced(const Collective& c, std::int32_t world) {
  return collective_cost(c, 0, world, test_net());
}

}  // namespace

TEST_CASE("all-reduce: ring for large messages, tree for small ones, ring on a tie",
          "[collective]") {
  // 2 ranks, 1 GB at 100 GB/s and 2 us:
  //   ring 2·1·2 us + 2·1/2 · 1e9 / 100e9 s = 4 us + 10 ms = 10'004'000 ns
  //   tree 2·ceil(log2 2)·2 us + 2 · 1e9 / 100e9 s = 4 us + 20 ms = 20'004'000 ns
  CollectiveCost c = priced(make(CollectiveKind::kAllReduce, 1'000'000'000, 1'000'000'000), 2);
  CHECK(c.transfer_ns == 10'004'000);
  CHECK(c.algorithm == "ring");
  // 8 ranks, 8 kB:
  //   ring 2·7·2 us + 2·7/8 · 8'000 B / 100e9 B/s = 28'000 + 140 = 28'140 ns
  //   tree 2·3·2 us + 2 · 8'000 / 100e9 = 12'000 + 160 = 12'160 ns: the tree
  c = priced(make(CollectiveKind::kAllReduce, 8'000, 8'000), 8);
  CHECK(c.transfer_ns == 12'160);
  CHECK(c.algorithm == "tree");
  // The crossover for n = 8: ring - tree = 2·(7 - 3)·a - (2/8) · S/B, zero at
  // S/B = 8·4·2 us = 64 us, S = 6.4 MB. There: ring 28'000 + 1.75·64'000 = 140'000 ns,
  // tree 12'000 + 2·64'000 = 140'000 ns, a tie, which the ring takes.
  c = priced(make(CollectiveKind::kAllReduce, 6'400'000, 6'400'000), 8);
  CHECK(c.transfer_ns == 140'000);
  CHECK(c.algorithm == "ring");
  // 800 bytes less, S/B = 63'992 ns: ring 28'000 + 111'986 = 139'986, tree 12'000 + 127'984 =
  // 139'984: the tree, by 2 ns.
  c = priced(make(CollectiveKind::kAllReduce, 6'399'200, 6'399'200), 8);
  CHECK(c.transfer_ns == 139'984);
  CHECK(c.algorithm == "tree");
  // 800 bytes more, S/B = 64'008 ns: ring 28'000 + 112'014 = 140'014, tree 12'000 + 128'016 =
  // 140'016: the ring.
  c = priced(make(CollectiveKind::kAllReduce, 6'400'800, 6'400'800), 8);
  CHECK(c.transfer_ns == 140'014);
  CHECK(c.algorithm == "ring");
}

TEST_CASE("all-gather and reduce-scatter move (n-1)/n of the full message in n-1 steps",
          "[collective]") {
  // All-gather of 4 ranks, 1 MB in, 4 MB gathered out (S = 4 MB):
  //   3·2 us + 3/4 · 4e6 / 100e9 s = 6'000 + 30'000 = 36'000 ns
  CollectiveCost c = priced(make(CollectiveKind::kAllGather, 1'000'000, 4'000'000), 4);
  CHECK(c.transfer_ns == 36'000);
  CHECK(c.algorithm == "ring");
  // Reduce-scatter of 4 ranks, 4 MB in, 1 MB out: the same 36'000 ns.
  c = priced(make(CollectiveKind::kReduceScatter, 4'000'000, 1'000'000), 4);
  CHECK(c.transfer_ns == 36'000);
  CHECK(c.algorithm == "ring");
}

TEST_CASE("a group that spans nodes goes at the slower bandwidth and the network's latency",
          "[collective]") {
  // All-gather over a world of 16 (two nodes of 8), 16 MB gathered: B = min(100, 25) GB/s,
  // a = 5 us: 15·5 us + 15/16 · 16e6 / 25e9 s = 75'000 + 600'000 = 675'000 ns.
  CHECK(priced(make(CollectiveKind::kAllGather, 1'000'000, 16'000'000), 16).transfer_ns == 675'000);
  // Ranks 8..11 of that world all sit on node 1: the intra-node fabric. Reduce-scatter of 4 MB:
  //   3·2 us + 3/4 · 4e6 / 100e9 s = 6'000 + 30'000 = 36'000 ns
  CHECK(priced(make(CollectiveKind::kReduceScatter, 4'000'000, 1'000'000, {8, 9, 10, 11}), 16)
            .transfer_ns == 36'000);
  // Ranks 7 and 8 straddle nodes 0 and 1. Reduce-scatter of 2 MB:
  //   1·5 us + 1/2 · 2e6 / 25e9 s = 5'000 + 40'000 = 45'000 ns
  CHECK(
      priced(make(CollectiveKind::kReduceScatter, 2'000'000, 1'000'000, {7, 8}), 16).transfer_ns ==
      45'000);
  // A network faster than the fabric does not speed the fabric up: B = min(100, 400) GB/s.
  Interconnect fast_network = test_net();
  fast_network.inter = {400e9, 5'000};
  // Broadcast of 1 GB over 16 ranks: 15·5 us + 1e9 / 100e9 s = 75'000 + 10'000'000 ns.
  CHECK(collective_cost(make(CollectiveKind::kBroadcast, 1'000'000'000, 1'000'000'000), 0, 16,
                        fast_network)
            .transfer_ns == 10'075'000);
}

TEST_CASE("all-to-all, broadcast, reduce, gather and scatter", "[collective]") {
  // All-to-all of 4 ranks, 4 MB each way: 3·2 us + 3/4 · 4e6 / 100e9 s = 36'000 ns, direct.
  CollectiveCost c = priced(make(CollectiveKind::kAllToAll, 4'000'000, 4'000'000), 4);
  CHECK(c.transfer_ns == 36'000);
  CHECK(c.algorithm == "direct");
  // Broadcast and reduce of 4 ranks, 1 GB, a pipelined chain: 3·2 us + 1e9 / 100e9 s =
  // 6'000 + 10'000'000 = 10'006'000 ns.
  for (const CollectiveKind kind : {CollectiveKind::kBroadcast, CollectiveKind::kReduce}) {
    CAPTURE(to_string(kind));
    c = priced(make(kind, 1'000'000'000, 1'000'000'000), 4);
    CHECK(c.transfer_ns == 10'006'000);
    CHECK(c.algorithm == "ring");
  }
  // Gather of 4 ranks, 1 MB each into 4 MB at the root (S = 4 MB), and scatter of the same:
  //   3·2 us + 3/4 · 4e6 / 100e9 s = 6'000 + 30'000 = 36'000 ns, direct.
  c = priced(make(CollectiveKind::kGather, 1'000'000, 4'000'000), 4);
  CHECK(c.transfer_ns == 36'000);
  CHECK(c.algorithm == "direct");
  c = priced(make(CollectiveKind::kScatter, 4'000'000, 1'000'000), 4);
  CHECK(c.transfer_ns == 36'000);
  CHECK(c.algorithm == "direct");
  // Only one side recorded: the larger one is the full message all the same.
  CHECK(priced(make(CollectiveKind::kAllGather, 0, 4'000'000), 4).transfer_ns == 36'000);
}

TEST_CASE("send and recv take the fabric between the two ranks", "[collective]") {
  const Interconnect net = test_net();
  Collective send = make(CollectiveKind::kSend, 1'000'000, 1'000'000);
  Collective recv = make(CollectiveKind::kRecv, 1'000'000, 1'000'000);
  // Rank 0 to rank 1, one node: 2 us + 1e6 / 100e9 s = 2'000 + 10'000 = 12'000 ns.
  send.peer = 1;
  CollectiveCost c = collective_cost(send, 0, 16, net);
  CHECK(c.transfer_ns == 12'000);
  CHECK(c.algorithm == "direct");
  // Rank 0 to rank 8, the next node: 5 us + 1e6 / 25e9 s = 5'000 + 40'000 = 45'000 ns.
  send.peer = 8;
  CHECK(collective_cost(send, 0, 16, net).transfer_ns == 45'000);
  // Rank 9 from rank 8, both on node 1: 12'000 ns; rank 9 from rank 7: 45'000 ns.
  recv.peer = 8;
  CHECK(collective_cost(recv, 9, 16, net).transfer_ns == 12'000);
  recv.peer = 7;
  CHECK(collective_cost(recv, 9, 16, net).transfer_ns == 45'000);
  // An unknown peer: across nodes when the job does not fit one node, inside it when it does.
  recv.peer = -1;
  CHECK(collective_cost(recv, 0, 16, net).transfer_ns == 45'000);
  CHECK(collective_cost(recv, 0, 8, net).transfer_ns == 12'000);
  // To oneself: nothing to move.
  send.peer = 3;
  c = collective_cost(send, 3, 16, net);
  CHECK(c.transfer_ns == 0);
  CHECK(c.algorithm == "local");
}

TEST_CASE("a barrier is a tree of latencies, a group of one is free", "[collective]") {
  // 8 ranks on one node: 2·3·2 us = 12'000 ns; 5 ranks: ceil(log2 5) = 3, the same.
  CollectiveCost c = priced(make(CollectiveKind::kBarrier, 0, 0), 8);
  CHECK(c.transfer_ns == 12'000);
  CHECK(c.algorithm == "tree");
  CHECK(priced(make(CollectiveKind::kBarrier, 0, 0), 5).transfer_ns == 12'000);
  // 16 ranks over two nodes: 2·4·5 us = 40'000 ns.
  CHECK(priced(make(CollectiveKind::kBarrier, 0, 0), 16).transfer_ns == 40'000);
  // A world of one, or a group of one rank: 0 ns, local, whatever the size.
  for (const CollectiveKind kind : {CollectiveKind::kAllReduce, CollectiveKind::kAllGather,
                                    CollectiveKind::kBroadcast, CollectiveKind::kBarrier}) {
    CAPTURE(to_string(kind));
    c = priced(make(kind, 1'000'000'000, 1'000'000'000), 1);
    CHECK(c.transfer_ns == 0);
    CHECK(c.algorithm == "local");
    CHECK(priced(make(kind, 1'000'000'000, 1'000'000'000, {5}), 8).transfer_ns == 0);
  }
}

TEST_CASE("absurd inputs saturate or give nothing, never overflow", "[collective]") {
  Interconnect crawl = test_net();
  crawl.intra.bytes_per_s = 1;  // 1 B/s: 2^50 bytes take 2^50 s
  const Collective huge = make(CollectiveKind::kAllReduce, Bytes{1} << 50, Bytes{1} << 50);
  CHECK(collective_cost(huge, 0, 2, crawl).transfer_ns == kMaxNanoseconds);
  crawl.intra.bytes_per_s = 0;
  CHECK(collective_cost(huge, 0, 2, crawl).transfer_ns == kMaxNanoseconds);
  // A latency near the limit times many steps saturates too.
  Interconnect slow = test_net();
  slow.inter.latency_ns = kMaxNanoseconds / 2;
  CHECK(collective_cost(make(CollectiveKind::kAllGather, 0, 0), 0, 1'000'000, slow).transfer_ns ==
        kMaxNanoseconds);
  // Negative sizes move nothing: 2 ranks, ring 2·1·2 us = 4'000 ns (tree ties at 4'000).
  CHECK(priced(make(CollectiveKind::kAllReduce, -5, -5), 2).transfer_ns == 4'000);
  // A world of zero or less is one rank; a node of zero GPUs is taken as one.
  CHECK(priced(make(CollectiveKind::kAllReduce, 1'000, 1'000), 0).transfer_ns == 0);
  Interconnect no_nodes = test_net();
  no_nodes.gpus_per_node = 0;
  // 2 ranks on 2 nodes of one GPU: 1·5 us + 1/2 · 2e6 / 25e9 s = 45'000 ns.
  CHECK(collective_cost(make(CollectiveKind::kAllGather, 1'000'000, 2'000'000), 0, 2, no_nodes)
            .transfer_ns == 45'000);
}

TEST_CASE("the machine prices collectives only when it has an interconnect", "[collective]") {
  Machine m;
  const Collective c = make(CollectiveKind::kAllReduce, 1'000'000'000, 1'000'000'000);
  CHECK(m.collective_ns(c, 123'456, 0, 2) == 123'456);
  m.interconnect = test_net();
  CHECK(m.collective_ns(c, 123'456, 0, 2) == 10'004'000);  // the first case's ring
}

TEST_CASE("collective names: trace format v3's and PyTorch's", "[collective]") {
  for (int k = 0; k < kCollectiveKindCount; ++k) {
    const auto kind = static_cast<CollectiveKind>(k);
    CAPTURE(to_string(kind));
    CHECK(parse_collective_kind(to_string(kind)) == kind);
  }
  const struct {
    const char* name;
    CollectiveKind kind;
  } pytorch[] = {
      // record_param_comms's "Collective name".
      {"allreduce", CollectiveKind::kAllReduce},
      {"allreduce_coalesced", CollectiveKind::kAllReduce},
      {"all_reduce", CollectiveKind::kAllReduce},
      {"_allgather_base", CollectiveKind::kAllGather},
      {"allgather", CollectiveKind::kAllGather},
      {"all_gather", CollectiveKind::kAllGather},
      {"all_gather_into_tensor", CollectiveKind::kAllGather},
      {"allgather_into_tensor_coalesced", CollectiveKind::kAllGather},
      {"_reduce_scatter_base", CollectiveKind::kReduceScatter},
      {"reduce_scatter", CollectiveKind::kReduceScatter},
      {"reduce_scatter_tensor", CollectiveKind::kReduceScatter},
      {"reduce_scatter_tensor_coalesced", CollectiveKind::kReduceScatter},
      {"alltoall", CollectiveKind::kAllToAll},
      {"alltoall_base", CollectiveKind::kAllToAll},
      {"all_to_all", CollectiveKind::kAllToAll},
      {"all_to_all_single", CollectiveKind::kAllToAll},
      {"all_to_allv", CollectiveKind::kAllToAll},
      {"broadcast", CollectiveKind::kBroadcast},
      {"_broadcast_oop", CollectiveKind::kBroadcast},
      {"reduce", CollectiveKind::kReduce},
      {"_reduce_oop", CollectiveKind::kReduce},
      {"gather", CollectiveKind::kGather},
      {"scatter", CollectiveKind::kScatter},
      {"send", CollectiveKind::kSend},
      {"recv", CollectiveKind::kRecv},
      {"recvAnysource", CollectiveKind::kRecv},
      {"recvAnySource", CollectiveKind::kRecv},
      {"barrier", CollectiveKind::kBarrier},
      // Backends' profiling titles and the flight recorder's names.
      {"nccl:all_reduce", CollectiveKind::kAllReduce},
      {"nccl:_all_gather_base", CollectiveKind::kAllGather},
      {"nccl:reduce_scatter_tensor_coalesced", CollectiveKind::kReduceScatter},
      {"nccl:all_reduce_barrier", CollectiveKind::kBarrier},
      {"nccl:send 0->1", CollectiveKind::kSend},
      {"nccl:recv 1<-0", CollectiveKind::kRecv},
      {"gloo:broadcast", CollectiveKind::kBroadcast},
      {"gloo:all_gather", CollectiveKind::kAllGather},
      {"ALLGATHER_coalesced", CollectiveKind::kAllGather},
      {"REDUCE_SCATTER_coalesced", CollectiveKind::kReduceScatter},
      // Dispatcher ops: in-place ones end in "_".
      {"c10d::allreduce_", CollectiveKind::kAllReduce},
      {"c10d::_allgather_base_", CollectiveKind::kAllGather},
      {"c10d::_reduce_scatter_base_", CollectiveKind::kReduceScatter},
      {"c10d::alltoall_base_", CollectiveKind::kAllToAll},
      {"c10d::broadcast_", CollectiveKind::kBroadcast},
      {"c10d::recv_any_source_", CollectiveKind::kRecv},
      {"c10d::send", CollectiveKind::kSend},
      {"c10d::barrier", CollectiveKind::kBarrier},
      {"_c10d_functional::all_gather_into_tensor", CollectiveKind::kAllGather},
      {"_c10d_functional::reduce_scatter_tensor", CollectiveKind::kReduceScatter},
      {"_c10d_functional::all_to_all_single", CollectiveKind::kAllToAll},
  };
  for (const auto& p : pytorch) {
    CAPTURE(p.name);
    CHECK(parse_collective_kind(p.name) == p.kind);
  }
  for (const char* name : {"", "_", "nccl:", "c10d::", "coalesced", "nccl:coalesced", "wait",
                           "_c10d_functional::wait_tensor", "split", "allreduce2", "all reduce",
                           "aten::add", "ncclKernel_AllReduce_RING_LL_Sum"}) {
    CAPTURE(name);
    CHECK_FALSE(parse_collective_kind(name));
  }
}
