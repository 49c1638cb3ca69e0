#pragma once
// The time a collective (core/collective.hpp) takes on an interconnect (core/interconnect.hpp) once
// every rank of its group has arrived, priced as NCCL's own tuning model prices it: a latency per
// step of the algorithm plus the bytes each GPU puts on the wire over its bandwidth. This is what
// lets a step recorded on one cluster be replayed on another (`--interconnect nvlink4 --network
// ib-ndr`): the Machine (core/machine.hpp) asks here for every collective when it has an
// interconnect, and keeps the recorded time when it has none.
//
// Note [Collective cost model]
// n is the group's size (c.ranks.size(), or the job's world size when ranks is empty: every rank);
// a rank r sits on node r / gpus_per_node. When the group's ranks all sit on one node, the
// bandwidth B and the per-step latency a are the intra-node fabric's; when they span nodes,
// B = min(intra, inter) bandwidth (a ring or a tree that crosses the network goes at its slowest
// link) and a = the network's latency. S is the larger of the collective's input and output
// bytes: the full message, which is the gathered output of an all-gather or a gather and the
// unreduced input of a reduce-scatter or a scatter (PyTorch records both sides; the larger one
// is right even where a trace gives only one). Times are whole nanoseconds, rounded up, summed
// with saturation (core/units.hpp):
//   all_reduce      ring  2(n-1)·a + 2(n-1)/n · S/B      (reduce-scatter then all-gather)
//                   tree  2·ceil(log2 n)·a + 2 · S/B      (reduce up a tree, broadcast down)
//                   the faster of the two, ring on a tie: the tree wins at small S and large n
//   all_gather,     ring  (n-1)·a + (n-1)/n · S/B         (each GPU passes on n-1 of n chunks)
//   reduce_scatter
//   all_to_all      direct (n-1)·a + (n-1)/n · S/B       (n-1 chunks of S/n to as many peers)
//   broadcast,      ring  (n-1)·a + S/B                  (a pipelined chain: the message is
//   reduce                                                 sent once, after n-1 steps to fill)
//   gather, scatter direct (n-1)·a + (n-1)/n · S/B       (the root exchanges S/n with each peer)
//   send, recv      direct a + S/B over the intra-node fabric when `rank` and c.peer share a
//                   node, else over B = min(intra, inter) with the network's latency; a peer of
//                   -1 (unknown) is taken across nodes when the job does not fit one node
//   barrier         tree  2·ceil(log2 n)·a                (no payload)
//   n == 1 (or a send to oneself): 0 ns, "local".
// The model leaves out NCCL's protocol choice (LL, LL128, Simple), its channel count and the
// NVLS/CollNet algorithms: its bandwidth is the bus bandwidth nccl-tests reports, which already
// folds them in.
#include <cstdint>
#include <optional>
#include <string_view>

#include "core/collective.hpp"
#include "core/interconnect.hpp"
#include "core/units.hpp"

namespace memplan::sim {

struct CollectiveCost {
  Nanoseconds transfer_ns = 0;
  std::string_view algorithm;  // "ring", "tree", "direct", "local"
};

/// The time `c`, called by global rank `rank` of a job of `world_size` ranks, takes on `net` once
/// every rank of its group has arrived (Note [Collective cost model]). Never throws: absurd inputs
/// (negative sizes, a zero bandwidth, sizes near 2^62) give 0 or saturate at kMaxNanoseconds.
CollectiveCost collective_cost(const Collective& c, std::int32_t rank, std::int32_t world_size,
                               const Interconnect& net);

/// The bus bandwidth a recorded transfer of `c` achieved, as nccl-tests reports it — the bytes one
/// GPU put on the wire over the time, S/t times 2(n-1)/n for an all-reduce, (n-1)/n for an
/// all-gather, reduce-scatter, all-to-all, gather or scatter, 1 for the others — so that it reads
/// against a fabric preset's bandwidth. nullopt for a barrier, a group of one, or no time or bytes.
std::optional<BytesPerSecond> bus_bandwidth(const Collective& c, std::int32_t world_size,
                                            Nanoseconds transfer_ns);

}  // namespace memplan::sim
