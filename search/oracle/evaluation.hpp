#pragma once
// Evaluation: what the oracle (search/oracle/evaluator.hpp) answers about a plan. Which fields an
// answer fills depends on the question asked (Evaluator::fits, Evaluator::cost); a field an answer
// does not fill is zero.
#include "core/ids.hpp"
#include "core/units.hpp"

namespace memplan::search {

struct Evaluation {
  bool feasible = false;
  /// The step: what a training loop sees, the period of the step repeated back to back (Note
  /// [Step period] in sim/engine.hpp), iteration_ns for a step without a host side. What the
  /// search optimises and every command ranks plans by. Filled by cost() of a plan that fits when
  /// the Evaluator measures it (Evaluator::measure_step).
  sim::Nanoseconds step_ns = 0;
  /// The step alone: one step run from an idle device to its end (Timeline::iteration_ns).
  sim::Nanoseconds iteration_ns = 0;
  sim::Bytes peak_bytes = 0;
  sim::Bytes peak_reserved_bytes = 0;
  sim::Nanoseconds stall_ns = 0;
  sim::OpId oom_op = sim::kNoOp;  // where memory ran out, when it did
  sim::Bytes oom_bytes_missing = 0;
  /// For a plan that does not fit, when the Evaluator measures it (Evaluator::measure_excess):
  /// its peak arena end on a device without a memory limit, minus the capacity. Zero exactly
  /// when the plan fits (Note [Arena top block]), and it falls smoothly as a plan gets closer to
  /// fitting, where oom_bytes_missing is flat.
  sim::Bytes excess_bytes = 0;
  /// For a plan that does not fit, when excess_bytes is measured: its step alone on that device
  /// without a memory limit: what it would take if it fitted (memory never changes timing). The
  /// search repairs the plans it finds faster than its incumbent (Note [Repair chains] in
  /// search/engine/local_search.cpp).
  sim::Nanoseconds unlimited_ns = 0;
  /// Answered by Evaluator::cost(plan, bar) from the plan's times alone: it is not better than
  /// bar, and whether it fits was not checked (`feasible` is false).
  bool slower_than_bar = false;
};

}  // namespace memplan::search
