// What orders the ops of a step's streams beyond the data they read: each op's `after`, from what
// the trace recorded of the streams' waits, else from PyTorch's semantics.
#include <algorithm>
#include <map>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "importers/kineto/collective_units.hpp"
#include "importers/kineto/step_builder.hpp"

// Note [Stream waits]
// ~~~~~~~~~~~~~~~~~~~
// A stream waits for another's work where the host called cudaStreamWaitEvent (hipStreamWaitEvent
// on ROCm) on an event recorded there. The engine already makes a side stream's op wait for
// everything issued on the compute stream before it (Note [Device streams] in
// core/workload.hpp: c10d makes a collective's stream wait for the current stream before every
// collective, as `wait_stream` does before a side stream's work), so what an op's `after` has to
// say is where the compute stream waited for a side stream — or a side stream for another. The
// importer reads, in this order, the first rule the step's records allow:
//  1. Recorded syncs (Kineto's `cuda_sync` "Stream Wait Event", with enable_cuda_sync_events):
//     stream S waited for the event that the cudaEventRecord call of correlation R recorded on
//     stream W. The first op on S launched at or after the cudaStreamWaitEvent call waits for the
//     last op on W launched at or before the cudaEventRecord call (none is added where S is a side
//     stream and W the compute stream: the engine assumes that wait).
//  2. Recorded calls: each cudaStreamWaitEvent call in the step outside a collective's op (inside
//     one it is c10d's own wait for the current stream, or the library's, before or around the
//     launch) is work.wait(), DDP's finalize of the backward pass, or a user's wait_stream. The
//     waiting stream is the one the calling thread launches on next in the step (the current
//     stream), the compute stream when it launches nothing more; it is taken to wait for every
//     other stream's work issued so far. So where the compute stream waits, the first compute op
//     launched at or after the call waits for the last op of each side stream launched before the
//     call (unless an earlier wait covers it); a side stream's wait is for the compute stream.
//  3. Neither recorded: DDP's optimizer reads the gradients the backward's collectives reduced,
//     and PyTorch waits for them before it returns from backward(): the first update op waits for
//     every collective of the backward pass.
// The report says which rule ordered the step.

namespace memplan::importers::detail {

namespace {

using sim::Nanoseconds;
using sim::OpId;

bool is_wait_call(std::string_view name) {
  return name.find("StreamWaitEvent") != std::string_view::npos;
}

// The device stream each thread launched on, by launch time.
class LaunchesByThread {
 public:
  explicit LaunchesByThread(const KinetoTrace& trace) {
    std::unordered_map<std::int64_t, std::int64_t> stream_of;
    for (const GpuEvent& g : trace.gpu_events) {
      if (g.correlation) stream_of.emplace(*g.correlation, g.stream);
    }
    for (const RuntimeEvent& r : trace.runtime_events) {
      if (!r.correlation) continue;
      if (auto s = stream_of.find(*r.correlation); s != stream_of.end())
        by_thread_[r.thread].emplace_back(r.start_ns, s->second);
    }
    for (auto& [thread, list] : by_thread_) std::sort(list.begin(), list.end());
  }

  /// The stream of `thread`'s first launch after `at` and before `end`, if any.
  [[nodiscard]] std::optional<std::int64_t> next(const std::string& thread, Nanoseconds at,
                                                 Nanoseconds end) const {
    const auto it = by_thread_.find(thread);
    if (it == by_thread_.end()) return std::nullopt;
    const auto& list = it->second;
    auto n = std::upper_bound(list.begin(), list.end(), std::pair{at, INT64_MAX});
    if (n == list.end() || n->first >= end) return std::nullopt;
    return n->second;
  }

 private:
  std::unordered_map<std::string, std::vector<std::pair<Nanoseconds, std::int64_t>>> by_thread_;
};

}  // namespace

bool StepBuilder::add_after(OpId consumer, OpId producer) {
  if (consumer == sim::kNoOp || producer == sim::kNoOp || !(producer < consumer)) return false;
  auto& after = op(consumer).after;
  if (std::find(after.begin(), after.end(), producer) != after.end()) return false;
  after.push_back(producer);
  std::sort(after.begin(), after.end());
  return true;
}

std::size_t StepBuilder::wait_recorded_syncs(const StepWindow& step) {
  std::unordered_map<std::int64_t, Nanoseconds> call_at;
  for (const RuntimeEvent& r : trace_.runtime_events) {
    if (r.correlation) call_at.emplace(*r.correlation, r.start_ns);
  }
  auto stream_index = [&](std::int64_t raw) -> std::optional<std::int32_t> {
    const auto it = std::find(streams_.raw.begin(), streams_.raw.end(), raw);
    if (it == streams_.raw.end()) return std::nullopt;
    return static_cast<std::int32_t>(it - streams_.raw.begin());
  };
  std::size_t edges = 0;
  for (const SyncEvent& s : trace_.sync_events) {
    if (s.name != "Stream Wait Event" || !s.wait_on_stream || !s.correlation) continue;
    const auto call = call_at.find(*s.correlation);
    if (call == call_at.end() || call->second < step.start_ns || call->second >= step.end_ns)
      continue;
    ++report_.stream_waits;
    const auto waiting = stream_index(s.stream);
    const auto source = stream_index(*s.wait_on_stream);
    if (!waiting || !source || *waiting == *source || (*waiting != 0 && *source == 0)) continue;
    Nanoseconds recorded_at = call->second;
    if (s.record_correlation) {
      if (auto r = call_at.find(*s.record_correlation); r != call_at.end()) recorded_at = r->second;
    }
    OpId consumer = sim::kNoOp;
    OpId producer = sim::kNoOp;
    for (const sim::Op& o : workload_.ops) {
      const Nanoseconds at = launch_[index(o.id)];
      if (o.stream == *source && at <= recorded_at) producer = o.id;
      if (o.stream == *waiting && at >= call->second && consumer == sim::kNoOp) consumer = o.id;
    }
    edges += add_after(consumer, producer) ? 1 : 0;
  }
  return edges;
}

std::size_t StepBuilder::wait_at_calls(const StepWindow& step, std::size_t& calls) {
  // The windows of the step's communication ops, by thread: waits inside them are c10d's own.
  std::unordered_map<std::string, std::vector<std::pair<Nanoseconds, Nanoseconds>>> comm;
  for (std::size_t i = 0; i < trace_.cpu_events.size(); ++i) {
    const CpuEvent& e = trace_.cpu_events[i];
    if (is_comm_event(trace_, i) && collective_kind(trace_, nesting_, i))
      comm[e.thread].emplace_back(e.start_ns, e.end_ns());
  }
  auto inside_comm = [&](const RuntimeEvent& r) {
    const auto it = comm.find(r.thread);
    if (it == comm.end()) return false;
    return std::any_of(it->second.begin(), it->second.end(), [&](const auto& w) {
      return r.start_ns >= w.first && r.start_ns < w.second;
    });
  };
  std::vector<const RuntimeEvent*> waits;
  for (const RuntimeEvent& r : trace_.runtime_events) {
    if (is_wait_call(r.name) && r.start_ns >= step.start_ns && r.start_ns < step.end_ns &&
        !inside_comm(r))
      waits.push_back(&r);
  }
  std::stable_sort(waits.begin(), waits.end(), [](const RuntimeEvent* a, const RuntimeEvent* b) {
    return a->start_ns < b->start_ns;
  });
  calls = waits.size();
  const LaunchesByThread launches(trace_);
  std::vector<OpId> waited(streams_.raw.size(), sim::kNoOp);  // per side stream
  std::size_t edges = 0;
  for (const RuntimeEvent* call : waits) {
    const RuntimeEvent& r = *call;
    const auto next = launches.next(r.thread, r.start_ns, step.end_ns);
    if (next && *next != streams_.raw.front()) continue;  // a side stream waits for compute
    OpId consumer = sim::kNoOp;
    std::vector<OpId> last(streams_.raw.size(), sim::kNoOp);
    for (const sim::Op& o : workload_.ops) {
      const Nanoseconds at = launch_[index(o.id)];
      if (o.stream != 0 && at < r.start_ns) last[o.stream] = o.id;
      if (o.stream == 0 && at >= r.start_ns && consumer == sim::kNoOp) consumer = o.id;
    }
    for (std::size_t s = 1; s < last.size(); ++s) {
      if (last[s] == sim::kNoOp || (waited[s] != sim::kNoOp && !(waited[s] < last[s]))) continue;
      if (add_after(consumer, last[s])) {
        waited[s] = last[s];
        ++edges;
      }
    }
  }
  report_.stream_waits += calls;
  return edges;
}

std::size_t StepBuilder::wait_before_update() {
  const auto update =
      std::find_if(workload_.ops.begin(), workload_.ops.end(), [](const sim::Op& o) {
        return o.phase == sim::Phase::kUpdate && o.stream == 0 && !o.collective;
      });
  if (update == workload_.ops.end()) return 0;
  const OpId consumer = update->id;
  std::size_t edges = 0;
  for (const sim::Op& o : workload_.ops) {
    if (!(o.id < consumer)) break;
    if (o.collective && o.phase == sim::Phase::kBackward)
      edges += add_after(consumer, o.id) ? 1 : 0;
  }
  return edges;
}

void StepBuilder::order_streams(const StepWindow& step) {
  if (streams_.raw.size() < 2) return;
  std::size_t edges = wait_recorded_syncs(step);
  if (report_.stream_waits > 0) {
    report_.wait_rule = "the recorded stream waits (cuda_sync)";
  } else {
    std::size_t calls = 0;
    edges = wait_at_calls(step, calls);
    if (calls > 0) {
      report_.wait_rule = "the recorded cudaStreamWaitEvent calls";
    } else {
      edges = wait_before_update();
      report_.wait_rule = "none recorded: the update waits for the backward's collectives";
    }
  }
  report_.after_edges = edges;
}

}  // namespace memplan::importers::detail
