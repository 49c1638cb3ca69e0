#pragma once
// The local search's neighbourhood (Note [Plan search] in plan_search.cpp, rounds and widening):
// the variables of a plan (each feature map's action and prefetch and release points, each op's
// algorithm, three placements, each host group's prefetch point), every single change of one of
// them, moves that combine changes, and how much an incumbent's timeline blames each variable.
// Internal to the search engine (search/engine/).
#include <array>
#include <cstddef>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/policies/gist.hpp"
#include "search/policies/network_view.hpp"
#include "sim/timeline.hpp"

namespace memplan::search::engine {

// In a prefetch window of at most this many ops, a swap may prefetch (a side-stream re-run be
// issued) before any of them.
inline constexpr std::int32_t kEveryPrefetchPoint = 32;

// The placement variables of the neighbourhood (Note [Plan search], rounds).
enum class Placement : std::int8_t { kNone = -1, kParameters, kUpdate, kInputs };
inline constexpr std::size_t kPlacementCount = 3;

// What stays on the host when the update comes back to the device (Placement::kUpdate off): the
// optimizer states (each then a variable of its own), or the gradients too (copied out when
// written, back in for the update: what a step whose gradients outgrow the device needs).
enum class Stay : std::uint8_t { kNothing, kStates, kStatesAndGradients };

// One change to one variable of a plan: a feature map's action (and prefetch point), the
// algorithm of an op with alternative algorithms (Op::algorithms), a placement, or the prefetch
// point of a group of uses of a host-placed tensor.
struct Change {
  int variable = -1;  // a map index, or the map count plus the op's index in algorithm_ops(),
                      // or after those the placement's index, or after those the host group's
                      // index in host_groups(), or after those the state's index in states_
  Placement placement = Placement::kNone;
  sim::TensorId state = sim::kNoTensor;  // one optimizer state placed (`on`) or not, the update
                                         // on the device
  bool at_use = false;         // placed with every group of its tensors prefetched at its first use
  Stay stay = Stay::kNothing;  // with the update back on the device, what stays on the host
  sim::TensorId host_tensor = sim::kNoTensor;  // a host group's tensor
  sim::OpId first_use = sim::kNoOp;            // and its first use
  bool on = false;                             // the placement's new value
  int map = -1;                                // the map it changes, or -1 for an algorithm change
  sim::Action action = sim::Action::kKeep;
  sim::Encoding encoding = sim::Encoding::kNone;
  sim::OpId prefetch_before = sim::kNoOp;  // a swap's, a re-run's or a host group's; kNoOp: the
                                           // default
  sim::OpId release_before = sim::kNoOp;   // Note [Release point] in core/plan.hpp
  sim::OpId op = sim::kNoOp;               // an algorithm change's op
  std::int32_t algorithm = -1;             // its algorithm; -1: the op's default

  friend bool operator==(const Change&, const Change&) = default;
};

using Move = std::vector<Change>;  // changes to distinct variables

class Neighbourhood {
 public:
  // `view` must outlive the Neighbourhood. `host_placement`, `release_points`: SearchOptions'.
  Neighbourhood(const NetworkView& view, const EncodingOptions& encodings, bool host_placement,
                bool release_points);

  // Sets a placement variable of `plan` (Note [Host placement] in core/plan.hpp); `at_use`: the
  // groups of the tensors it places are prefetched at their first uses, not one op ahead.
  void apply(sim::Plan& plan, Placement placement, bool on, bool at_use,
             Stay stay = Stay::kNothing) const;
  // Every single change of `plan`, grouped by variable in variable order.
  [[nodiscard]] std::vector<Change> changes(const sim::Plan& plan) const;
  // Adds to `score` (per variable) the blame of the host groups' prefetch points: the stalls
  // waiting for a group's copy (at the group's ops), and a large weight for each group whose copy
  // was resident ahead of its first use at the op where memory ran out.
  void blame_host_groups(const sim::Timeline& timeline, const sim::Plan& plan,
                         std::vector<double>& score) const;

  // The first of `prefetches` (ascending) at or after (t, first_use).
  static std::vector<sim::HostPrefetch>::const_iterator find_host_prefetch(
      const std::vector<sim::HostPrefetch>& prefetches, sim::TensorId t, sim::OpId first_use);

  [[nodiscard]] std::size_t variable_count() const {
    return first_state_variable() + states_.size();
  }
  // Adds to `score` the blame of the optimizer states' variables where memory ran out with the
  // update on the device: 1e9 among them, by their bytes.
  void blame_states(const sim::Timeline& timeline, const sim::Plan& plan,
                    std::vector<double>& score) const;
  // Note [Moves the stalls ask for] in local_search.cpp: for the `count` swapped maps of `plan`
  // whose copies stall its `timeline` the longest, the release point (a copy-out waited for) or
  // the prefetch point (a copy-in waited for) moved later or earlier by the stall's length in
  // ops' time, and by half of it; one change a move.
  [[nodiscard]] std::vector<Move> stall_moves(const sim::Plan& plan, const sim::Timeline& timeline,
                                              std::size_t count) const;
  // Note [Sibling moves] in neighbourhood.cpp: for each move of `moves` that changes the action
  // of one map whose producer writes other maps, the same action for those siblings too (those
  // `plan` gives another action), once per producer and action.
  [[nodiscard]] std::vector<Move> sibling_moves(const sim::Plan& plan,
                                                const std::vector<Move>& moves) const;
  // Note [Timed swaps] in neighbourhood.cpp: for each move of `moves` that swaps one map `plan`
  // does not swap, at its default points, the same swap released and prefetched where the ops'
  // time covers its copies on `machine`'s link.
  [[nodiscard]] std::vector<Move> timed_swaps(const sim::Plan& plan, const std::vector<Move>& moves,
                                              const sim::Machine& machine) const;
  [[nodiscard]] const std::vector<sim::OpId>& algorithm_ops() const { return algorithm_ops_; }
  [[nodiscard]] const sim::Workload& workload() const { return view_.workload(); }

 private:
  void host_prefetch_changes(const sim::Plan& plan, std::vector<Change>& out) const;
  void state_changes(const sim::Plan& plan, std::vector<Change>& out) const;
  void issue_point_changes(std::size_t m, const sim::Decision& d, std::vector<Change>& out) const;
  [[nodiscard]] bool issued_early(std::size_t m, sim::Action action) const;
  [[nodiscard]] sim::OpId default_issue(int m, sim::Action action) const;
  void prefetch_at_first_uses(sim::Plan& plan, sim::TensorKind kind) const;
  void groups_of(const sim::Plan& plan, sim::TensorId t,
                 std::vector<sim::HostUseGroup>& groups) const;
  [[nodiscard]] std::size_t host_group_variable(sim::TensorId t, sim::OpId first_use) const;
  // The variable of states_.front() (Change::variable): after the host groups'.
  [[nodiscard]] std::size_t first_state_variable() const {
    return view_.feature_maps().size() + algorithm_ops_.size() + kPlacementCount +
           host_groups_.size();
  }
  void placement_changes(const sim::Plan& plan, std::vector<Change>& out) const;
  [[nodiscard]] bool placed(const sim::Plan& plan, Placement placement) const;
  [[nodiscard]] bool any_placed(const sim::Plan& plan, sim::TensorKind kind) const;
  [[nodiscard]] std::pair<sim::OpId, sim::OpId> prefetch_window(int m) const;
  [[nodiscard]] sim::OpId default_prefetch(int m) const;
  // Points `ns` of the ops' own time later than `from` (no later than `limit`) or earlier (no
  // earlier than the op after `after`): the stall moves' and the timed swaps' measure.
  [[nodiscard]] sim::OpId later_by(sim::OpId from, sim::OpId limit, sim::Nanoseconds ns) const;
  [[nodiscard]] sim::OpId earlier_by(sim::OpId from, sim::OpId after, sim::Nanoseconds ns) const;
  static Change map_change(std::size_t m, sim::Action action, sim::Encoding encoding,
                           sim::OpId prefetch_before);
  static std::int32_t chosen_algorithm(const sim::Plan& plan, sim::OpId op);

  const NetworkView& view_;
  std::vector<std::pair<sim::Action, sim::Encoding>> actions_;
  std::vector<sim::OpId> algorithm_ops_;  // ops with alternative algorithms, in op order
  // Per map: the other maps its producer writes (Note [Sibling moves]), ascending.
  std::vector<std::vector<int>> siblings_;
  std::vector<char> side_made_;  // per map: an op of another stream makes it (a re-run overlaps)
  std::array<bool, kPlacementCount> placeable_{};
  bool release_points_ = true;
  std::vector<std::vector<sim::OpId>> readers_;  // per tensor, ascending: with host placement
  // (tensor, first use) of every group of uses that a host-placed tensor may have, ascending.
  std::vector<std::pair<sim::TensorId, sim::OpId>> host_groups_;
  // The optimizer states one may place on the host alone, the update staying on the device
  // (Note [Plan search], placement), ascending; and their bytes in all.
  std::vector<sim::TensorId> states_;
  double state_bytes_ = 0;
};

// `plan` with the changes of `move` made.
sim::Plan with_move(const sim::Plan& plan, const Move& move, const Neighbourhood& neighbourhood);

// How much the incumbent's timeline blames each variable: a map for the stalls waiting for it,
// plus a large weight for being resident (kept) where memory ran out; an op's algorithm for
// being the op where memory ran out; a host group's prefetch point for the stalls waiting for its
// copy, plus a large weight when the copy was resident ahead of its first use where memory ran
// out.
std::vector<double> blame(const sim::Timeline& timeline, const NetworkView& view,
                          const Neighbourhood& neighbourhood, const sim::Plan& plan);

// How many moves combine `k` changes to `k` different variables: the k-th elementary symmetric
// polynomial of the maps' change counts (a double: it only meets a cap).
double combination_count(const std::vector<Change>& changes, int k);
// Every move of `k` changes to `k` different variables, in a fixed order.
std::vector<Move> combinations(const std::vector<Change>& changes, int k);
// Draws `count` moves: distinct singles (drawn without replacement) when `pairs` is false, else
// pairs; weighted by `map_blame` (per variable, blame()).
std::vector<Move> draw(const std::vector<Change>& changes, const std::vector<double>& map_blame,
                       std::size_t count, bool pairs, std::mt19937_64& rng);

}  // namespace memplan::search::engine
