#pragma once
// CutOdds: where exact mode's branch and bound solves the lower bound of a node's decided maps
// (DecidedMapsBound, search/bound/). That bound is a linear program, a fraction of a millisecond
// and up, where a node's simulation takes microseconds, and how often it cuts depends on the step
// and on the depth: on AlexNet b64 at 90% of its feature-map bytes it cut a third of the nodes it
// was solved at, none near the root; on a one-layer GPT at 90%, one node in 7 million, while its
// set-up and solves were a third of exact mode's time. So the odds that a solve cuts are counted
// per depth, from one in two: (cuts + 1) / (solves + 2); a node whose subtree holds at least
// kMinPlans plans is worth a solve when its plans times those odds are at least kMinPlans / 2
// (where half the solves cut, every such node; where none do, ever fewer, the largest subtrees
// last), and every kProbe-th node of a depth passed over is solved anyway, since a better
// incumbent can make the bound cut there later. Which nodes it cuts never changes exact mode's
// result (the minimum of (time, position) over the space), only the nodes it explores. One per
// worker: not thread-safe.
#include <cstddef>
#include <vector>

namespace memplan::search {

class CutOdds {
 public:
  static constexpr double kMinPlans = 256;
  static constexpr std::size_t kProbe = 64;

  /// Whether to solve the bound at a node of `depth` (variables decided) whose subtree holds
  /// `subtree_plans` plans; record() the outcome of each solve.
  [[nodiscard]] bool worth_solving(std::size_t depth, double subtree_plans) {
    if (subtree_plans < kMinPlans) return false;
    Depth& d = at(depth);
    const double odds = static_cast<double>(d.cuts + 1) / static_cast<double>(d.solves + 2);
    return subtree_plans * odds >= kMinPlans / 2 || ++d.passed % kProbe == 0;
  }
  void record(std::size_t depth, bool cut) {
    Depth& d = at(depth);
    ++d.solves;
    if (cut) ++d.cuts;
  }

 private:
  struct Depth {
    std::size_t solves = 0, cuts = 0, passed = 0;
  };
  Depth& at(std::size_t depth) {
    if (depths_.size() <= depth) depths_.resize(depth + 1);
    return depths_[depth];
  }
  std::vector<Depth> depths_;
};

}  // namespace memplan::search
