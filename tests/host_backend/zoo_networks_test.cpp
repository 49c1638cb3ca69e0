// The zoo's networks at small sizes run for real on the host: recorded (every op gets a measured
// duration, the link is measured), then run under in-core, swap-all and recompute-all with the
// gradients, loss, weights and momentum bitwise the in-core run's and the measured peak the
// simulator's. This exercises the executor's wiring of every layer those networks use
// (conv, batch-norm with its saved statistics, in-place ReLU, max and adaptive average pool,
// linear with PyTorch's [out, in] weights, in-place residual add, gradient accumulation, dropout,
// concat, ceil_mode max-pool, conv3d and max_pool3d, and the decoder's layer-norm, GELU,
// embedding, attention and softmax) on the trace conventions the zoo writes.
#include <catch2/catch.hpp>

#include <string>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "host_backend/host_backend.hpp"
#include "host_backend/host_device.hpp"
#include "runtime/interpreter.hpp"
#include "runtime/recording.hpp"
#include "runtime/validation.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"
#include "zoo/models.hpp"

namespace mp = memplan;

namespace {

mp::sim::Workload build(const char* name, std::int64_t batch, mp::zoo::Shape input) {
  const mp::zoo::ModelInfo* model = mp::zoo::find_model(name);
  REQUIRE(model != nullptr);
  mp::zoo::ModelOptions options;
  options.batch = batch;
  options.input = std::move(input);
  // A small decoder for gpt (the image models ignore these).
  options.transformer = {.layers = 2, .hidden = 16, .heads = 2, .sequence = 8, .vocab = 32};
  return mp::zoo::build_model(*model, options).workload;
}

}  // namespace

TEST_CASE("zoo networks record and run under basic plans with in-core gradients",
          "[host_backend][zoo]") {
  struct Case {
    const char* model;
    std::int64_t batch;
    mp::zoo::Shape input;
  };
  const Case c = GENERATE(Case{"resnet18", 2, {32, 32}}, Case{"densenet121", 1, {32, 32}},
                          Case{"mobilenet_v2", 1, {32, 32}}, Case{"googlenet", 1, {64, 64}},
                          Case{"resnext101-3d", 1, {4, 16, 16}}, Case{"gpt", 2, {}});
  CAPTURE(c.model);
  const mp::host_backend::HostBackend backend;
  mp::runtime::RecordOptions ro;
  ro.warmup = 0;
  ro.iterations = 3;  // op times: medians of three
  const mp::runtime::Recording rec =
      mp::runtime::record(backend, build(c.model, c.batch, c.input), ro);
  const mp::sim::Workload& w = rec.workload;
  CHECK(w.provenance.source == "recorded");
  CHECK(w.provenance.backend == "host");
  CHECK(w.device.link.h2d_bytes_per_s.value_or(0) > 0);
  CHECK(rec.iteration_ns > 0);
  for (const mp::sim::Op& op : w.ops) CHECK(op.duration_ns > 0);

  const mp::sim::Machine machine = mp::sim::make_machine(w.device);
  mp::runtime::ValidationOptions options;
  options.repetitions = 1;
  for (const auto& plan : {mp::sim::swap_all_plan(w), mp::sim::recompute_all_plan(w)}) {
    CAPTURE(plan.policy);
    const auto r = mp::runtime::validate(backend, w, plan, machine, options);
    CHECK(r.measured_feasible);
    CHECK(r.gradients_match);
    CHECK(r.max_abs_diff == 0.0);
    CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
    CHECK(r.tensors_compared > 0);
  }
}

TEST_CASE("under PyTorch's caching allocator the host device runs out where the simulator does",
          "[host_backend][zoo][caching]") {
  // resnet18 at batch 8 on 64x64: its maps and weights are many blocks of 1 to 8 MiB, so segments
  // of 20 MiB are split and shared, and a tighter device gives cached segments back.
  const mp::sim::Workload w = build("resnet18", 8, {64, 64});
  const mp::host_backend::HostBackend backend;
  mp::sim::MachineOverrides overrides;
  overrides.memory_bytes = mp::sim::Bytes{1} << 40;
  overrides.allocator = mp::sim::AllocatorModel::kCaching;
  mp::sim::Machine machine = mp::sim::make_machine(w.device, overrides);
  mp::runtime::ValidationOptions options;
  options.repetitions = 1;
  for (const auto& plan : {mp::sim::in_core_plan(w), mp::sim::swap_all_plan(w)}) {
    CAPTURE(plan.policy);
    const mp::sim::Program program = mp::sim::lower(w, plan);
    const mp::sim::Bytes unlimited = mp::sim::capacity_to_run(program, machine);
    machine.memory_bytes = unlimited;
    const auto r = mp::runtime::validate(backend, w, plan, machine, options);
    CHECK(r.measured_feasible);
    CHECK(r.gradients_match);
    CHECK(r.max_abs_diff == 0.0);
    CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
    CHECK(r.peak_reserved_measured == r.peak_reserved_predicted);

    // Below what the unlimited run held: the simulator gives segments back and runs out, or fits
    // in fewer; the host device does the same at the same allocation.
    for (const mp::sim::Bytes less : {mp::sim::Bytes{4} << 20, mp::sim::Bytes{24} << 20}) {
      CAPTURE(less);
      machine.memory_bytes = unlimited - less;
      mp::sim::Engine engine;
      const mp::sim::Timeline predicted = engine.run(program, machine);
      mp::host_backend::HostDevice device(machine.memory_bytes, 1, machine.allocator);
      const mp::sim::Timeline measured = mp::runtime::run_program(device, w, program);
      REQUIRE(measured.feasible == predicted.feasible);
      CHECK(measured.peak_bytes == predicted.peak_bytes);
      CHECK(device.memory_stats().peak_reserved_bytes == predicted.peak_reserved_bytes);
      if (!predicted.feasible) {
        REQUIRE(measured.oom.has_value());
        CHECK(measured.oom->buffer == predicted.oom->buffer);
        CHECK(measured.oom->live_bytes == predicted.oom->live_bytes);
        CHECK(measured.oom->largest_free_block == predicted.oom->largest_free_block);
      }
    }
  }
}
