#pragma once
// HostDevice: the runtime's Device on the CPU, running real training steps. Device memory is one
// real byte buffer of the cap's size, placed by runtime::ArenaDevice (the simulator's allocator,
// so an allocation over the cap fails exactly where the simulator says it does). Each stream is a
// worker thread executing its queue in order; events are (mutex, condition variable, flag); swapped
// maps and host-placed tensors go to a host store; the host stream runs host ops (an update on
// the CPU) over it. Streams hold their work from prepare until synchronize (the run's
// launch), so that what is timed is the streams' execution, not the enqueuing thread. Inputs and
// parameters are filled from a seed when allocated (labels in range), optimizer state starts at
// zero, so two runs of the same workload see the same data whatever the plan. Gradients (and the
// loss) written by the step's own ops are captured on the fly, and parameters and optimizer state
// can be read after the run, so that runs of different plans can be compared bit for bit. A sparse
// map with more non-zeros than its planned buffer holds spills the rest of its encoding to host
// memory (Note [Sparse format] in core/plan.hpp), counted by spilled_bytes().
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "host_backend/op_executor.hpp"
#include "runtime/arena_device.hpp"

namespace memplan::host_backend {

/// One stream: a worker thread running its queue of tasks in order.
class StreamWorker {
 public:
  StreamWorker();
  StreamWorker(const StreamWorker&) = delete;
  StreamWorker& operator=(const StreamWorker&) = delete;
  ~StreamWorker();

  void enqueue(std::function<void()> task);
  /// While held, tasks queue up but do not start (a whole program is enqueued, then launched, so
  /// that the worker never idles waiting for the enqueuing thread).
  void hold();
  void release();
  /// Blocks until the queue is empty and no task runs; rethrows the first error of a task since
  /// the last drain (tasks after an error still run, so records still happen).
  void drain();

 private:
  void loop();

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool busy_ = false;
  bool stop_ = false;
  bool held_ = false;
  std::exception_ptr error_;
  std::thread thread_;
};

class HostDevice final : public runtime::ArenaDevice {
 public:
  /// A device with `capacity_bytes` of memory handed out under `allocator`; data and weights
  /// derive from `seed`. Allocations throw runtime::BackendError when the address space for a
  /// segment cannot be mapped.
  explicit HostDevice(sim::Bytes capacity_bytes, std::uint64_t seed = 1,
                      sim::AllocatorModel allocator = sim::AllocatorModel::kArena);
  HostDevice(const HostDevice&) = delete;
  HostDevice& operator=(const HostDevice&) = delete;
  ~HostDevice() override;

  void prepare(const sim::Workload& workload, const sim::Program& program) override;
  void enqueue_kernel(std::int32_t position) override;
  void enqueue_copy(sim::StreamId stream, std::int32_t position) override;
  void enqueue_host_op(std::int32_t position) override;
  void record(sim::StreamId stream, sim::EventId event) override;
  void wait(sim::StreamId stream, sim::EventId event) override;
  void synchronize() override;
  [[nodiscard]] std::vector<sim::Span> measured_spans() const override;

  [[nodiscard]] std::vector<std::byte> tensor_bytes(sim::TensorId t) const override;
  [[nodiscard]] sim::Bytes spilled_bytes() const override { return spilled_bytes_; }

  /// Pre-existing tensor `t` (an input, a parameter, optimizer state) starts every later run with
  /// `bytes` (its size) instead of the seed's data: training continues from a previous run's
  /// parameters and momentum (tensor_bytes), or one weight is perturbed. Throws
  /// std::invalid_argument when the size is not the tensor's.
  void set_initial_bytes(const sim::Workload& workload, sim::TensorId t,
                         std::vector<std::byte> bytes);

 private:
  struct EventState {
    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
  };
  void initialise(sim::BufferId buffer, const sim::Tensor& t) override;
  /// Address space without reserved swap, so pages exist only where tensors were placed (a
  /// 16 GiB cap costs what the step touches).
  std::byte* map_segment(sim::Bytes bytes) override;
  /// On the compute stream, after the work enqueued before (whose uses of the segment's blocks
  /// are all ordered before their frees there).
  void unmap_segment(std::byte* memory, sim::Bytes bytes) override;
  void enqueue_codec(std::int32_t position, const sim::Instruction& in);
  /// Writes a resident host slot's initial data (set_initial_bytes', else the seed's).
  void fill_resident_slot(std::size_t slot);
  void add_span(sim::StreamId stream, std::int32_t index, std::int64_t start, std::int64_t end);
  [[nodiscard]] std::int64_t now_ns() const;
  StreamWorker& worker(sim::StreamId s) { return *workers_[static_cast<std::size_t>(s)]; }

  std::unique_ptr<OpExecutor> executor_;
  std::vector<std::unique_ptr<EventState>> events_;
  std::vector<std::vector<std::byte>> host_store_;  // per host slot (resident ones from prepare)
  // Per buffer: the part of a sparse encoding beyond the plan's encoded buffer (host memory).
  std::vector<std::vector<std::uint8_t>> spill_;
  std::atomic<sim::Bytes> spilled_bytes_ = 0;
  std::map<sim::TensorId, std::vector<std::byte>> captured_;
  std::map<sim::TensorId, std::vector<std::byte>> initial_bytes_;  // set_initial_bytes
  std::atomic<bool> kernel_failed_ = false;                        // a kernel threw in this run
  mutable std::mutex spans_mutex_;
  std::vector<sim::Span> spans_;
  std::int64_t t0_ = 0;
  std::vector<std::unique_ptr<StreamWorker>> workers_;
};

}  // namespace memplan::host_backend
