#include "core/job.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/core.h>
#include <fmt/ranges.h>

#include "core/input_error.hpp"

namespace memplan::sim {
namespace {

bool is_p2p(const Collective& c) {
  return c.kind == CollectiveKind::kSend || c.kind == CollectiveKind::kRecv;
}

std::string group_label(const std::string& group) {
  return group.empty() ? std::string("the default group") : fmt::format("group '{}'", group);
}

// "rank 1 op 57 is all_gather #3 of group '0'": where a collective call is, for messages.
std::string call_at(std::int32_t rank, const Op& op) {
  const Collective& c = *op.collective;
  return fmt::format("rank {} op {} is {} #{} of {}", rank, op.id, to_string(c.kind), c.sequence,
                     group_label(c.group));
}

// Several ranks: each names its place, in increasing order, in one world of one backend.
void validate_ranks(const Job& job, std::string_view source) {
  const Workload& first = job.ranks.front();
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    const Workload& w = job.ranks[i];
    if (!w.distributed) {
      throw InputError(fmt::format("{}: $.ranks[{}]", source, i),
                       "missing field 'distributed': each rank of a job of several names its "
                       "rank and world size");
    }
    if (i == 0) continue;
    const Distributed& d = *w.distributed;
    const Distributed& before = *job.ranks[i - 1].distributed;
    const std::string at = fmt::format("{}: $.ranks[{}].distributed", source, i);
    if (d.rank == before.rank) {
      throw InputError(at + ".rank", fmt::format("rank {} appears twice ($.ranks[{}] and [{}])",
                                                 d.rank, i - 1, i));
    }
    if (d.rank < before.rank) {
      throw InputError(at + ".rank", fmt::format("rank {} follows rank {}: a job lists its ranks "
                                                 "in increasing order",
                                                 d.rank, before.rank));
    }
    if (d.world_size != first.distributed->world_size) {
      throw InputError(at + ".world_size",
                       fmt::format("world size {}, but rank {}'s is {}", d.world_size,
                                   first.distributed->rank, first.distributed->world_size));
    }
    if (d.backend != first.distributed->backend) {
      throw InputError(at + ".backend",
                       fmt::format("'{}', but rank {} ran on '{}'", d.backend,
                                   first.distributed->rank, first.distributed->backend));
    }
  }
}

// Where each rank's collective calls are: (group, sequence) -> op, per position in the job.
using Calls = std::map<std::pair<std::string_view, std::int64_t>, OpId>;

// The position in the job of global rank `rank`, or nullopt when the job does not hold it.
std::optional<std::size_t> position_of(const std::vector<std::int32_t>& ranks, std::int32_t rank) {
  const auto it = std::lower_bound(ranks.begin(), ranks.end(), rank);
  if (it == ranks.end() || *it != rank) return std::nullopt;
  return static_cast<std::size_t>(it - ranks.begin());
}

// Sizes that every rank of a group agrees on for this kind of collective.
bool same_sizes_everywhere(CollectiveKind kind) {
  return kind == CollectiveKind::kAllReduce || kind == CollectiveKind::kBroadcast ||
         kind == CollectiveKind::kReduce || kind == CollectiveKind::kAllGather ||
         kind == CollectiveKind::kReduceScatter;
}

// The same call as `op` (rank `rank`) seen at `other_rank` is `other`: one kind, one group, and
// the sizes every rank shares.
void check_same_call(std::int32_t rank, const Op& op, std::int32_t other_rank, const Op& other,
                     std::string_view source) {
  const Collective& c = *op.collective;
  const Collective& o = *other.collective;
  if (c.kind != o.kind) {
    throw InputError(std::string(source),
                     fmt::format("{}; rank {} has {} there (op {})", call_at(rank, op), other_rank,
                                 to_string(o.kind), other.id));
  }
  if (c.ranks != o.ranks) {
    throw InputError(
        std::string(source),
        fmt::format("{} over ranks [{}]; rank {} has it over ranks [{}] (op {})", call_at(rank, op),
                    fmt::join(c.ranks, ", "), other_rank, fmt::join(o.ranks, ", "), other.id));
  }
  if (same_sizes_everywhere(c.kind) && (c.in_bytes != o.in_bytes || c.out_bytes != o.out_bytes)) {
    throw InputError(std::string(source),
                     fmt::format("{} of {} bytes in and {} out; rank {} has {} in and {} out "
                                 "there (op {})",
                                 call_at(rank, op), c.in_bytes, c.out_bytes, other_rank, o.in_bytes,
                                 o.out_bytes, other.id));
  }
}

// The positions in the job of the ranks of `c`'s group that the job holds (all, when the group
// names none); the first is the lowest.
std::vector<std::size_t> members(const Collective& c, const std::vector<std::int32_t>& ranks) {
  std::vector<std::size_t> positions;
  if (c.ranks.empty()) {
    for (std::size_t m = 0; m < ranks.size(); ++m) positions.push_back(m);
    return positions;
  }
  for (std::int32_t r : c.ranks) {
    if (auto m = position_of(ranks, r)) positions.push_back(*m);
  }
  std::sort(positions.begin(), positions.end());
  return positions;
}

// Every collective (sends and receives aside) of a group is called by each rank of the group
// that the job holds. The group's lowest rank in the job leads it: it checks that every member
// makes each of its calls, and each other member's call is compared with its own, so that the
// work stays linear in the calls and the groups' sizes.
void validate_collectives(const Job& job, const std::vector<Calls>& calls,
                          std::string_view source) {
  std::vector<std::int32_t> ranks;
  for (std::size_t i = 0; i < job.ranks.size(); ++i) ranks.push_back(job.rank_of(i));
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    for (const Op& op : job.ranks[i].ops) {
      if (!op.collective || is_p2p(*op.collective)) continue;
      const Collective& c = *op.collective;
      std::size_t lead = c.ranks.empty() ? 0 : i;  // i: this rank is in its group (validate)
      for (std::int32_t r : c.ranks) {
        if (auto m = position_of(ranks, r)) lead = std::min(lead, *m);
      }
      const std::vector<std::size_t> others = lead == i ? members(c, ranks) : std::vector{lead};
      const auto key = std::pair<std::string_view, std::int64_t>(c.group, c.sequence);
      for (std::size_t m : others) {
        if (m == i) continue;
        const auto found = calls[m].find(key);
        if (found == calls[m].end()) {
          throw InputError(std::string(source),
                           fmt::format("{}; rank {} has no call #{} of that group (a rank that "
                                       "skips a collective hangs the job)",
                                       call_at(ranks[i], op), ranks[m], c.sequence));
        }
        check_same_call(ranks[i], op, ranks[m], job.ranks[m].op(found->second), source);
      }
    }
  }
}

// Sends and receives pair up: between two ranks the job holds, in one group, the k-th send from
// one to the other is the other's k-th receive from it (in issue order).
void validate_sends(const Job& job, std::string_view source) {
  // (group, sender, receiver) -> the sender's sends and the receiver's receives, in issue order.
  using Ends = std::pair<std::vector<OpId>, std::vector<OpId>>;
  std::map<std::tuple<std::string_view, std::int32_t, std::int32_t>, Ends> pairs;
  std::vector<std::int32_t> ranks;
  for (std::size_t i = 0; i < job.ranks.size(); ++i) ranks.push_back(job.rank_of(i));
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    for (const Op& op : job.ranks[i].ops) {
      if (!op.collective || !is_p2p(*op.collective)) continue;
      const Collective& c = *op.collective;
      if (!position_of(ranks, c.peer)) continue;
      if (c.kind == CollectiveKind::kSend) {
        pairs[{c.group, ranks[i], c.peer}].first.push_back(op.id);
      } else {
        pairs[{c.group, c.peer, ranks[i]}].second.push_back(op.id);
      }
    }
  }
  for (const auto& [key, ends] : pairs) {
    const auto& [sends, receives] = ends;
    if (sends.size() == receives.size()) continue;
    const std::size_t matched = std::min(sends.size(), receives.size());
    const auto& [group, from, to] = key;
    const std::string where = group_label(std::string(group));
    if (sends.size() > matched) {
      throw InputError(
          std::string(source),
          fmt::format("rank {} op {} is send no. {} of {} to rank {}; rank {} has "
                      "only {} recv from rank {} there",
                      from, sends[matched], matched + 1, where, to, to, matched, from));
    }
    throw InputError(
        std::string(source),
        fmt::format("rank {} op {} is recv no. {} of {} from rank {}; rank {} has "
                    "only {} send to rank {} there",
                    to, receives[matched], matched + 1, where, from, from, matched, to));
  }
}

}  // namespace

std::int32_t Job::world_size() const {
  if (ranks.empty() || !ranks.front().distributed) return 1;
  return ranks.front().distributed->world_size;
}

std::int32_t Job::rank_of(std::size_t i) const {
  const auto& d = ranks[i].distributed;
  return d ? d->rank : static_cast<std::int32_t>(i);
}

void validate(const Job& job, std::string_view source) {
  if (job.ranks.empty()) throw InputError(std::string(source), "a job of no ranks");
  if (job.ranks.size() > 1) validate_ranks(job, source);
  for (const Workload& w : job.ranks) {
    validate(w, w.distributed ? fmt::format("{}: rank {}", source, w.distributed->rank)
                              : std::string(source));
  }
  if (job.ranks.size() == 1) return;
  std::vector<Calls> calls(job.ranks.size());
  for (std::size_t i = 0; i < job.ranks.size(); ++i) {
    for (const Op& op : job.ranks[i].ops) {
      if (op.collective && !is_p2p(*op.collective))
        calls[i].emplace(std::pair{std::string_view(op.collective->group), op.collective->sequence},
                         op.id);
    }
  }
  validate_collectives(job, calls, source);
  validate_sends(job, source);
}

}  // namespace memplan::sim
