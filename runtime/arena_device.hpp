#pragma once
// ArenaDevice: the part of a Device that does not depend on where the bytes live, shared by
// host_backend::HostDevice and cuda_backend::CudaDevice. Every buffer lives where sim::DeviceMemory
// — the simulator's allocator, under the machine's allocator model — places it, so an allocation
// over the cap fails exactly where the simulator says it does and the peaks are the simulator's.
// The backend maps the memory of each segment DeviceMemory takes (map_segment) and unmaps each it
// gives back (unmap_segment): under the arena model one segment of the cap's size for the device's
// life, under the caching model segments come and go as PyTorch's cudaMalloc and cudaFree do. It
// keeps the offsets, live and peak bytes and memory_stats, asks the backend to write the initial
// data of tensors that exist before the step (runtime/initial_data.hpp) when their buffer is
// allocated (Buffer::initial), finds a tensor's resident buffer for tensor_bytes, says which kRun
// outputs are captured, and checks an encode/decode instruction against its buffer before a backend
// runs it.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "memory/device_memory.hpp"
#include "runtime/device.hpp"

namespace memplan::runtime {

class ArenaDevice : public Device {
 public:
  [[nodiscard]] bool allocate(sim::BufferId buffer) final;
  void free(sim::BufferId buffer) final;
  [[nodiscard]] MemoryStats memory_stats() const final;
  [[nodiscard]] std::vector<sim::AllocatorEvent> allocator_events() const final { return events_; }
  [[nodiscard]] sim::DeviceMemory::Shortfall shortfall(sim::Bytes bytes) const final {
    return memory_.shortfall(bytes);
  }
  void set_capture(bool capture) final { capture_ = capture; }

 protected:
  /// A device of `capacity_bytes` under `allocator` whose data and weights derive from `seed`;
  /// no memory yet.
  ArenaDevice(sim::Bytes capacity_bytes, std::uint64_t seed, sim::AllocatorModel allocator);

  /// Memory for a segment of `bytes`, at least 256-byte aligned. Throws BackendError when there
  /// is none.
  [[nodiscard]] virtual std::byte* map_segment(sim::Bytes bytes) = 0;
  /// Gives back a segment map_segment returned, once the work already enqueued is done with it.
  virtual void unmap_segment(std::byte* memory, sim::Bytes bytes) = 0;
  /// Unmaps every segment still mapped; the derived device calls it before it goes (after its
  /// streams are idle).
  void unmap_all();

  /// Starts the bookkeeping of a run of `program`: an empty allocator, no buffer placed. The
  /// device's streams must be idle (segments of the previous run are unmapped).
  void begin_run(const sim::Workload& workload, const sim::Program& program);
  /// Where `buffer` lives; it must be allocated.
  [[nodiscard]] std::byte* data(sim::BufferId buffer) const;
  /// The allocated buffer that holds tensor `t` itself (not an encoded copy), if any.
  [[nodiscard]] std::optional<sim::BufferId> resident_buffer(sim::TensorId t) const;
  /// The resident host slot of tensor `t` (a host-placed tensor's home or a parameter's master
  /// copy, Note [Host placement] in core/plan.hpp), if any. Backends fill it with the tensor's
  /// initial data at prepare.
  [[nodiscard]] std::optional<sim::HostSlotId> resident_slot(sim::TensorId t) const;
  /// Whether a kRun of `op` keeps a copy of its output `o` for tensor_bytes: gradients and the
  /// loss, while capture is on.
  [[nodiscard]] bool captures(const sim::Op& op, std::size_t o) const;

  /// An encode or decode instruction as a backend runs it: `values` float32 values of `tensor`
  /// (in `in.buffer`) to or from `capacity` bytes in `encoding` (in `in.encoded()`).
  struct Codec {
    const sim::Tensor& tensor;
    std::int64_t values;
    sim::Encoding encoding;
    sim::Bytes capacity;
    bool encode;
  };
  /// The codec of `in`; throws BackendError when the tensor is not float32 or the encoding does
  /// not fit its buffer (sparse is checked while encoding).
  [[nodiscard]] Codec codec(const sim::Instruction& in) const;

  /// Writes the initial data of pre-existing tensor `t` into `buffer` (just allocated), in
  /// compute-stream order.
  virtual void initialise(sim::BufferId buffer, const sim::Tensor& t) = 0;

  const sim::Workload* workload_ = nullptr;
  const sim::Program* program_ = nullptr;
  sim::Bytes capacity_;
  sim::AllocatorModel allocator_;
  std::uint64_t seed_;
  bool capture_ = true;

 private:
  struct Place {
    sim::DeviceMemory::Segment segment = -1;  // -1: not allocated
    sim::DeviceMemory::Offset offset = 0;
    sim::DeviceMemory::Handle handle = 0;
    sim::Bytes bytes = 0;  // the block as the allocator handed it out
  };
  /// Maps and unmaps what the last allocate took and gave back.
  void follow_segments();
  void log_event(sim::AllocatorEvent event);

  sim::DeviceMemory memory_;
  std::vector<std::byte*> segment_base_;  // per segment, nullptr while not mapped
  std::vector<Place> place_;              // per buffer
  sim::Bytes live_ = 0;
  sim::Bytes peak_ = 0;
  std::vector<sim::AllocatorEvent> events_;  // since begin_run
  std::chrono::steady_clock::time_point run_start_;
};

}  // namespace memplan::runtime
