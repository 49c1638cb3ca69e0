#pragma once
// The lower bound on a plan's time: no plan that fits the device runs the step faster (Note
// [Lower bound on a plan's time] in lower_bound.cpp; docs/search.md, "How far from optimal"). A
// relaxation of memplan's own model — bytes only, each copy engine a capacity over time, every
// recomputation priced by its ops, the ideal step and the host stream as floors — solved as a
// linear program (COIN-OR CLP) with a certified value. `memplan search` states its plan's gap to
// it, `memplan compare` each policy's.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/machine.hpp"
#include "core/plan.hpp"
#include "core/workload.hpp"
#include "search/policies/gist.hpp"
#include "sim/timeline.hpp"

namespace memplan::search {

struct BoundOptions {
  /// The encodings plans may use (the search's or the comparison's).
  EncodingOptions encodings;
  /// Whether plans may place tensors that are not feature maps on the host and update there
  /// (SearchOptions::host_placement): off, the bound holds for plans that keep them on the device
  /// only, and is tighter.
  bool host_placement = true;
  /// Ops of each linear program's memory and time constraints (the pressure points), at most:
  /// half those of largest excess, half spread over the others (more rarely tighten the bound:
  /// ResNet-50 b128 at 25% of its feature maps, 16, 32 or 64 points, the same bound to 0.001%).
  std::size_t max_points = 16;
  /// Each program's columns, at most: fewer pressure points on large steps (DenseNet-121 b64 has
  /// about 1,400 columns a point; its program solves in 1 to 3 s on one core).
  std::size_t max_columns = 40000;
};

struct LowerBound {
  /// False when no plan fits the device: at some op the bytes no plan can take off it exceed it.
  bool fits = true;
  /// No plan that fits the device has a shorter step (Timeline::iteration_ns).
  sim::Nanoseconds bound_ns = 0;
  /// The ideal step: in core, fastest algorithms, unlimited memory (a floor of the bound).
  sim::Nanoseconds ideal_ns = 0;
  /// The bound is that of plans updating on the host (below the device update's).
  bool host_update = false;
  /// With host_update, where what sets the bound is the end of the op whose gradients the host's
  /// update waits for, late for what the device cannot hold, plus the update's work after it
  /// (Note [The host update waits for the gradients] in lower_bound.cpp): that op; else empty.
  std::string update_waits_for;
  /// For a step with a host side (sim::has_host_side), whose plans are ranked by their step back
  /// to back (Timeline::period_ns): no plan that fits repeats it faster (Note [A bound on the step
  /// back to back] in lower_bound.cpp). Nullopt without a host side, where the step back to back
  /// is the step alone, which bound_ns bounds.
  std::optional<sim::Nanoseconds> period_bound_ns;
  /// The ideal step back to back, with period_bound_ns: in core, fastest algorithms, no limit.
  sim::Nanoseconds ideal_period_ns = 0;
  /// What sets period_bound_ns, in the case of the update it bounds: that case's ideal run back to
  /// back (in core; updating on the host, the update ops free on the device), the host's update
  /// work each step (the host stream's, the device-to-host engine's), or the memory: each step's
  /// run on the compute stream pays for what the device cannot hold, or the host waits each step
  /// for an op (`waited_op`) that the device reaches late for it; or, updating on the host, the
  /// host runs the update each step after the gradients of an op (`waited_op`) are copied out,
  /// from the step's start or (kUpdateCycle) from the copy-in of a parameter the last run wrote.
  enum class PeriodFloor : std::uint8_t {
    kIdealRun,
    kHostWork,
    kMemory,
    kMemoryWaited,
    kUpdateWaited,
    kUpdateCycle
  };
  PeriodFloor period_floor = PeriodFloor::kIdealRun;
  std::string waited_op;
  /// The plans that update on the host, taken apart (a job's bound needs the two places of the
  /// update apart: job_bound.hpp): none that fits has a shorter step alone, or back to back where
  /// there is a host side; nullopt when no plan may update on the host or none of them fits.
  std::optional<sim::Nanoseconds> host_update_bound_ns;
  std::optional<sim::Nanoseconds> host_update_period_bound_ns;
  /// The bound of the step plans are ranked by: back to back where there is one, else alone.
  [[nodiscard]] sim::Nanoseconds ranked_bound_ns() const {
    return period_bound_ns.value_or(bound_ns);
  }
  /// The linear programs' size (both places of the update together) and whether each was solved
  /// to optimality (the bound holds either way; it is only weaker).
  std::size_t points = 0;
  std::size_t columns = 0;
  std::size_t rows = 0;
  bool optimal = true;
  double elapsed_s = 0.0;
};

/// The lower bound for plans of `workload` on `machine` (Note [Lower bound on a plan's time]).
/// Requires a validated workload of one rank (a job's collectives at fixed ready times are not
/// modelled).
LowerBound lower_bound(const sim::Workload& workload, const sim::Machine& machine,
                       const BoundOptions& options = {});

/// The bound over the plans that decide some feature maps as given (exact mode's branch and
/// bound, search/engine/exact.cpp, bounds each node's subtree with it): a map decided `keep`
/// stays on the device from its producer to its last use; `recompute` may be away by
/// recomputation only; `swap` by a copy, or by recomputation (a sibling's recomputation re-runs
/// its producer and hands it back); `encode` in its own encoding, or by recomputation. The
/// relaxation of plans that update on the device is built once; each bound() solves its program
/// restricted so. Plans that place tensors other than feature maps on the host are outside it
/// (BoundOptions::host_placement must be false).
class DecidedMapsBound {
 public:
  DecidedMapsBound(const sim::Workload& workload, const sim::Machine& machine,
                   const BoundOptions& options);
  ~DecidedMapsBound();
  DecidedMapsBound(const DecidedMapsBound&) = delete;
  DecidedMapsBound& operator=(const DecidedMapsBound&) = delete;

  /// `decided`: per tensor id, the map's decision, or nullopt for a map not decided (every
  /// way); shorter than the tensors: the rest are not decided. `bound_ns` is kMaxNanoseconds
  /// when no such plan fits.
  [[nodiscard]] LowerBound bound(const std::vector<std::optional<sim::Decision>>& decided) const;

 private:
  struct Model;
  std::unique_ptr<Model> model_;
};

/// A plan's step as the bound measures it: run alone (Timeline::iteration_ns) and back to back
/// (Timeline::period_ns, which only a step with a host side needs).
struct BoundedStep {
  bool feasible = false;
  sim::Nanoseconds alone_ns = 0;
  sim::Nanoseconds period_ns = 0;
};
BoundedStep bounded_step(const sim::Timeline& timeline);

/// A plan's distance to the bound, step / bound - 1, of the step its plans are ranked by: back to
/// back against period_bound_ns where there is one, else alone against bound_ns; nullopt when the
/// plan does not fit or no plan does.
std::optional<double> bound_gap(const LowerBound& bound, const BoundedStep& step);

/// `lower_bound_s` (the step alone's; null when no plan fits) and `period_lower_bound_s` (the
/// step back to back's; null without a host side) into `j`.
void add_bound_fields(nlohmann::json& j, const LowerBound& bound);
/// add_bound_fields and `gap` (bound_gap's; null when the plan does not fit) into `j`.
void add_bound_json(nlohmann::json& j, const LowerBound& bound, const BoundedStep& step);

/// One line: the bound against the ideal step, both of the step run alone, then for a step with a
/// host side those back to back, and, for a plan that fits, how far it is from the best possible
/// ("lower bound 412.345 ms on the step alone (+3.1% over the ideal step alone, 400.000 ms):
/// within 0.8% of the best possible").
std::string bound_text(const LowerBound& bound, const BoundedStep& step);

}  // namespace memplan::search
