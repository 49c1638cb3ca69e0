// The zoo's networks at small sizes on the GPU, as tests/host_backend/zoo_networks_test.cpp runs
// them on the host: recorded on the CUDA backend (CUDA-event op durations, measured link), then
// swap-all and recompute-all with the GPU's in-core gradients bit for bit and the simulator's
// peak, and the in-core step within the tolerance of the host backend's. [cuda]: skipped without
// a GPU.
#include <catch2/catch.hpp>

#include <string>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "cuda_backend/cuda_backend.hpp"
#include "cuda_backend/cuda_environment.hpp"
#include "host_backend/host_backend.hpp"
#include "runtime/recording.hpp"
#include "runtime/validation.hpp"
#include "zoo/models.hpp"

namespace mp = memplan;

namespace {

mp::sim::Workload build(const char* name, std::int64_t batch, mp::zoo::Shape input) {
  const mp::zoo::ModelInfo* model = mp::zoo::find_model(name);
  REQUIRE(model != nullptr);
  mp::zoo::ModelOptions options;
  options.batch = batch;
  options.input = std::move(input);
  // A small decoder for gpt (the image models ignore these), as the host's test builds it.
  options.transformer = {.layers = 2, .hidden = 16, .heads = 2, .sequence = 8, .vocab = 32};
  return mp::zoo::build_model(*model, options).workload;
}

}  // namespace

TEST_CASE("zoo networks record and run on the GPU under basic plans", "[cuda][zoo]") {
  const mp::cuda_backend::CudaEnvironment env = mp::cuda_backend::probe_cuda();
  if (env.device_count == 0) {
    WARN("skipped: no CUDA device (" << env.unavailable_reason << ")");
    return;
  }
  struct Case {
    const char* model;
    std::int64_t batch;
    mp::zoo::Shape input;
  };
  // Larger than the host's zoo cases (tests/host_backend/zoo_networks_test.cpp): there the last
  // batch-norms normalise over one or two values, which amplifies the backends' rounding past
  // any useful tolerance (Note [Cross-backend tolerance]); here over 16 at least.
  const Case c = GENERATE(Case{"resnet18", 4, {64, 64}}, Case{"densenet121", 4, {64, 64}},
                          Case{"mobilenet_v2", 4, {64, 64}}, Case{"googlenet", 4, {64, 64}},
                          Case{"resnext101-3d", 4, {8, 32, 32}}, Case{"gpt", 2, {}});
  CAPTURE(c.model);
  const mp::cuda_backend::CudaBackend backend;
  const mp::runtime::Recording rec = mp::runtime::record(backend, build(c.model, c.batch, c.input));
  const mp::sim::Workload& w = rec.workload;
  CHECK(w.provenance.backend == "cuda");
  CHECK(w.device.link.h2d_bytes_per_s.value_or(0) > 0);
  for (const mp::sim::Op& op : w.ops) CHECK(op.duration_ns > 0);

  const mp::sim::Machine machine = mp::sim::make_machine(w.device);
  mp::runtime::ValidationOptions options;
  options.repetitions = 1;
  for (const auto& plan : {mp::sim::swap_all_plan(w), mp::sim::recompute_all_plan(w)}) {
    CAPTURE(plan.policy);
    const auto r = mp::runtime::validate(backend, w, plan, machine, options);
    CHECK(r.measured_feasible);
    CHECK(r.gradients_match);
    CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
  }
  const auto host = mp::runtime::compare_backends(backend, mp::host_backend::HostBackend(), w,
                                                  mp::sim::in_core_plan(w), machine);
  CAPTURE(host.max_abs_diff, host.max_rel_diff);
  CHECK(host.fits);
  CHECK(host.within_tolerance);
}
