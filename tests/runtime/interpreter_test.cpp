// The interpreter against a recording Device (no backend): it hands every instruction to the
// device exactly once, enqueues each record before any wait on its event (CUDA's rule), makes the
// arena calls in the Program's order (so the peak is the simulator's), and stops at an allocation
// over the cap with the simulator's out-of-memory report.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "io/trace_io.hpp"
#include "memory/device_arena.hpp"
#include "runtime/interpreter.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace mp = memplan;

namespace {

/// Records the calls; memory through a real DeviceArena; no execution (nothing is asynchronous).
class RecordingDevice final : public mp::runtime::Device {
 public:
  explicit RecordingDevice(mp::sim::Bytes capacity) : capacity_(capacity) {}

  void prepare(const mp::sim::Workload&, const mp::sim::Program& program) override {
    program_ = &program;
    arena_.reset(capacity_);
    offset_.assign(program.buffers.size(), -1);
    recorded_.assign(program.events.size(), 0);
    memory_calls.clear();
    handed.clear();
  }
  bool allocate(mp::sim::BufferId b) override {
    memory_calls.push_back(mp::sim::value(b));
    const auto off = arena_.allocate(program_->buffers[static_cast<std::size_t>(b)].bytes);
    if (!off) return false;
    offset_[static_cast<std::size_t>(b)] = *off;
    live_ += program_->buffers[static_cast<std::size_t>(b)].bytes;
    peak_ = std::max(peak_, live_);
    return true;
  }
  void free(mp::sim::BufferId b) override {
    memory_calls.push_back(-1 - mp::sim::value(b));
    arena_.release(offset_[static_cast<std::size_t>(b)]);
    live_ -= program_->buffers[static_cast<std::size_t>(b)].bytes;
  }
  void enqueue_kernel(std::int32_t index) override { handed.emplace_back(0, index); }
  void enqueue_copy(mp::sim::StreamId s, std::int32_t index) override {
    handed.emplace_back(static_cast<int>(s), index);
  }
  void enqueue_host_op(std::int32_t index) override {
    handed.emplace_back(static_cast<int>(mp::sim::StreamId::kHost), index);
  }
  void record(mp::sim::StreamId, mp::sim::EventId e) override {
    recorded_[static_cast<std::size_t>(e)] = 1;
  }
  void wait(mp::sim::StreamId, mp::sim::EventId e) override {
    if (recorded_[static_cast<std::size_t>(e)] == 0) wait_before_record = true;
  }
  void synchronize() override {}
  std::vector<mp::sim::Span> measured_spans() const override { return {}; }
  mp::runtime::MemoryStats memory_stats() const override {
    return {peak_, arena_.peak_reserved_bytes(), capacity_, live_, arena_.largest_free_block()};
  }
  // It runs no kernels, so it holds no tensor data to hand back.
  std::vector<std::byte> tensor_bytes(mp::sim::TensorId) const override { return {}; }
  void set_capture(bool) override {}

  std::vector<std::int32_t> memory_calls;  // b for alloc, -1-b for free
  std::vector<std::pair<int, std::int32_t>> handed;
  bool wait_before_record = false;

 private:
  mp::sim::Bytes capacity_;
  const mp::sim::Program* program_ = nullptr;
  mp::sim::DeviceArena arena_;
  std::vector<mp::sim::DeviceArena::Offset> offset_;
  std::vector<std::uint8_t> recorded_;
  mp::sim::Bytes live_ = 0, peak_ = 0;
};

}  // namespace

TEST_CASE("the interpreter hands the whole program to the device in a CUDA-valid order",
          "[runtime]") {
  const std::string trace = GENERATE(std::string("mlp4"), std::string("resnet_tiny"));
  const std::string plan_name =
      GENERATE(std::string("in-core"), std::string("swap-all"), std::string("recompute-all"));
  CAPTURE(trace, plan_name);
  const auto w =
      mp::sim::read_trace(std::string(MEMPLAN_SOURCE_DIR) + "/traces/" + trace + ".json");
  const mp::sim::Program program = mp::sim::lower(w, *mp::sim::basic_plan(plan_name, w));
  const mp::sim::Machine machine = mp::sim::make_machine(w.device);

  RecordingDevice device(machine.memory_bytes);
  const mp::sim::Timeline tl = mp::runtime::run_program(device, w, program);
  REQUIRE(tl.feasible);
  CHECK_FALSE(device.wait_before_record);
  CHECK(tl.instructions_executed == program.instruction_count());

  std::vector<std::int32_t> expected_memory;
  std::size_t timed = 0;
  for (const auto& in : program.stream(mp::sim::StreamId::kCompute)) {
    if (in.kind == mp::sim::InstrKind::kAlloc) expected_memory.push_back(mp::sim::value(in.buffer));
    if (in.kind == mp::sim::InstrKind::kFree)
      expected_memory.push_back(-1 - mp::sim::value(in.buffer));
  }
  for (const auto& stream : program.streams) {
    for (const auto& in : stream) {
      const bool takes_time =
          in.kind != mp::sim::InstrKind::kAlloc && in.kind != mp::sim::InstrKind::kFree &&
          in.kind != mp::sim::InstrKind::kRecord && in.kind != mp::sim::InstrKind::kWait;
      timed += takes_time ? 1 : 0;
    }
  }
  CHECK(device.memory_calls == expected_memory);
  CHECK(device.handed.size() == timed);

  mp::sim::Engine engine;
  const mp::sim::Timeline& predicted = engine.run(program, machine);
  CHECK(tl.peak_bytes == predicted.peak_bytes);
  CHECK(tl.peak_reserved_bytes == predicted.peak_reserved_bytes);
}

TEST_CASE("the interpreter stops at an allocation over the cap with an out-of-memory report",
          "[runtime]") {
  const auto w = mp::sim::read_trace(std::string(MEMPLAN_SOURCE_DIR) + "/traces/mlp4.json");
  const mp::sim::Program program = mp::sim::lower(w, mp::sim::swap_all_plan(w));
  mp::sim::Machine machine = mp::sim::make_machine(w.device);
  machine.memory_bytes = 200 * 1024;  // the weights alone need more
  mp::sim::Engine engine;
  const mp::sim::Timeline& predicted = engine.run(program, machine);
  REQUIRE(predicted.oom.has_value());

  RecordingDevice device(machine.memory_bytes);
  const mp::sim::Timeline tl = mp::runtime::run_program(device, w, program);
  CHECK_FALSE(tl.feasible);
  REQUIRE(tl.oom.has_value());
  CHECK(tl.oom->buffer == predicted.oom->buffer);
  CHECK(tl.oom->bytes_missing == predicted.oom->bytes_missing);
  CHECK(tl.oom->live_by_kind == predicted.oom->live_by_kind);
  CHECK(tl.instructions_executed < program.instruction_count());
}
