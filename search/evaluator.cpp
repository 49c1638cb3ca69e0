#include "search/evaluator.hpp"

#include <algorithm>
#include <limits>

namespace memplan::search {

Evaluator::Evaluator(const sim::Workload& workload, const sim::Machine& machine)
    : workload_(&workload), machine_(machine), lowerer_(workload) {}

Evaluation summarize(const sim::Timeline& timeline) {
  Evaluation e;
  e.feasible = timeline.feasible;
  e.iteration_ns = timeline.iteration_ns;
  e.peak_bytes = timeline.peak_bytes;
  e.peak_reserved_bytes = timeline.peak_reserved_bytes;
  e.stall_ns = timeline.stall_ns();
  if (timeline.oom) {
    e.oom_op = timeline.oom->op;
    e.oom_bytes_missing = timeline.oom->bytes_missing;
  }
  return e;
}

Evaluation Evaluator::evaluate(const sim::Plan& plan) {
  if (stop_ != nullptr && stop_->due()) throw Stopped();
  ++count_;
  lowerer_.lower(plan, program_);
  sim::EngineOptions options;
  options.record_spans = false;
  options.record_memory = false;
  options.record_stalls = false;
  Evaluation e = summarize(engine_.run(program_, machine_, options));
  if (!e.feasible && measure_excess_) {
    sim::Machine unlimited = machine_;
    unlimited.memory_bytes = std::numeric_limits<sim::Bytes>::max() / 4;
    const sim::Timeline& t = engine_.run(program_, unlimited, options);
    e.excess_bytes = std::max<sim::Bytes>(1, t.peak_reserved_bytes - machine_.memory_bytes);
  }
  return e;
}

const sim::Timeline& Evaluator::simulate(const sim::Plan& plan) {
  if (stop_ != nullptr && stop_->due()) throw Stopped();
  ++count_;
  lowerer_.lower(plan, program_);
  sim::EngineOptions options;
  options.record_spans = false;
  options.record_memory = false;
  return engine_.run(program_, machine_, options);
}

}  // namespace memplan::search
