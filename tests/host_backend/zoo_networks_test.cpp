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

#include "host_backend/host_backend.hpp"
#include "runtime/recording.hpp"
#include "runtime/validation.hpp"
#include "sim/basic_plans.hpp"
#include "sim/machine.hpp"
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
