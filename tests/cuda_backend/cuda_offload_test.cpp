// Host placement on the GPU (Note [Host placement] in core/plan.hpp), as
// tests/host_backend/host_placement_test.cpp runs it on the host: parameters, gradients, momenta
// and the batch in pinned host slots, the update on the host stream (a cudaLaunchHostFunc running
// runtime::run_host_op) or on the device after a prefetch. Each plan's gradients, updated weights
// and momenta are bitwise the GPU's in-core run's (the GPU's SGD kernel rounds every operation as
// the CPU's loop does, and so does its Adam kernel), at the simulator's peak. [cuda]: skipped
// without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "core/plan.hpp"
#include "cuda_backend/cuda_backend.hpp"
#include "cuda_backend/cuda_environment.hpp"
#include "runtime/validation.hpp"
#include "sim/simulation.hpp"
#include "zoo/models.hpp"

namespace mp = memplan;
using mp::sim::TensorKind;

TEST_CASE("host-placed tensors and a host update run on the GPU bitwise at the predicted peak",
          "[cuda][offload]") {
  const mp::cuda_backend::CudaEnvironment env = mp::cuda_backend::probe_cuda();
  if (env.device_count == 0) {
    WARN("skipped: no CUDA device (" << env.unavailable_reason << ")");
    return;
  }
  const mp::zoo::ModelInfo* model = mp::zoo::find_model("resnet18");
  REQUIRE(model != nullptr);
  mp::zoo::ModelOptions zoo_options;
  zoo_options.batch = 2;
  zoo_options.input = {32, 32};
  // SGD, and Adam: the CPU's Adam (runtime::adam_update) and the GPU's kernel give the same bits.
  zoo_options.optimizer = GENERATE(mp::zoo::Optimizer::kSgd, mp::zoo::Optimizer::kAdam);
  CAPTURE(zoo_options.optimizer == mp::zoo::Optimizer::kAdam);
  const mp::sim::Workload w = mp::zoo::build_model(*model, zoo_options).workload;
  mp::sim::MachineOverrides overrides;
  overrides.memory_bytes = mp::sim::Bytes{1} << 30;
  mp::sim::Machine machine = mp::sim::make_machine(w.device, overrides);
  // Under the arena, a device of the in-core live peak; under PyTorch's caching allocator (each
  // segment a cudaMalloc of its own) a roomy one: the plan's device gets what the simulator says it
  // needs either way.
  machine.allocator = GENERATE(mp::sim::AllocatorModel::kArena, mp::sim::AllocatorModel::kCaching);
  CAPTURE(to_string(machine.allocator));
  if (machine.allocator == mp::sim::AllocatorModel::kArena) {
    machine.memory_bytes =
        mp::sim::simulate_plan(w, mp::sim::in_core_plan(w), machine).timeline.peak_bytes;
  }
  auto placing = [&](std::initializer_list<TensorKind> kinds, bool host_update) {
    mp::sim::Plan plan = mp::sim::in_core_plan(w);
    for (TensorKind kind : kinds) mp::sim::set_host_placement(plan, w, kind, true);
    plan.host_update = host_update;
    mp::sim::validate_plan(plan, w, "test plan");
    return plan;
  };
  const bool host_update = GENERATE(true, false);
  mp::sim::Plan plan =
      host_update
          ? placing({TensorKind::kParameter, TensorKind::kGradient, TensorKind::kOptimizerState},
                    true)
          : placing({TensorKind::kParameter, TensorKind::kOptimizerState, TensorKind::kInput},
                    false);
  // Every group's copy issued at its use (Plan::host_prefetches) instead of one op before.
  const bool at_use = GENERATE(false, true);
  if (at_use) {
    for (const mp::sim::TensorId t : plan.host_tensors) {
      for (const auto& g : mp::sim::host_use_groups(t, plan.host_update, w)) {
        if (g.first_use != g.default_prefetch)
          plan.host_prefetches.push_back({t, g.first_use, g.first_use});
      }
    }
    mp::sim::validate_plan(plan, w, "test plan");
  }
  CAPTURE(host_update, at_use);
  mp::runtime::ValidationOptions options;
  options.repetitions = 1;
  const auto r = mp::runtime::validate(mp::cuda_backend::CudaBackend{}, w, plan, machine, options);
  CHECK(r.measured_feasible);
  CHECK(r.peaks_match());
  CHECK(r.bitwise_equal);
  CHECK(mp::runtime::validation_failures(r).empty());
}
