// Plans that place parameters, gradients, optimizer state and the input batch on the host (Note
// [Host placement] in sim/plan.hpp) run for real on the host backend: the update on the host
// stream (runtime::run_host_op) or on the device after a prefetch, the weights written back. Each
// plan's gradients, updated weights and momenta are bitwise those of the in-core run, and its
// measured device peak is the simulator's to the byte.
#include <catch2/catch.hpp>

#include <algorithm>

#include "host_backend/host_backend.hpp"
#include "runtime/validation.hpp"
#include "sim/basic_plans.hpp"
#include "sim/machine.hpp"
#include "sim/simulation.hpp"
#include "zoo/models.hpp"

namespace mp = memplan;
using mp::sim::TensorKind;

namespace {

mp::sim::Workload resnet18() {
  const mp::zoo::ModelInfo* model = mp::zoo::find_model("resnet18");
  REQUIRE(model != nullptr);
  mp::zoo::ModelOptions options;
  options.batch = 2;
  options.input = {32, 32};
  return mp::zoo::build_model(*model, options).workload;
}

mp::sim::Plan placing(const mp::sim::Workload& w, std::initializer_list<TensorKind> kinds,
                      bool host_update) {
  mp::sim::Plan plan = mp::sim::in_core_plan(w);
  for (TensorKind kind : kinds) {
    for (mp::sim::TensorId t : mp::sim::host_placeable(w, kind)) plan.host_tensors.push_back(t);
  }
  std::sort(plan.host_tensors.begin(), plan.host_tensors.end());
  plan.host_update = host_update;
  mp::sim::validate_plan(plan, w, "test plan");
  return plan;
}

}  // namespace

TEST_CASE("host-placed parameters, gradients and momenta run bitwise at the predicted peak",
          "[host_backend][runtime][offload]") {
  const mp::sim::Workload w = resnet18();
  mp::sim::MachineOverrides overrides;
  overrides.memory_bytes = mp::sim::Bytes{1} << 30;
  mp::sim::Machine machine = mp::sim::make_machine(w.device, overrides);
  const mp::sim::Bytes in_core =
      mp::sim::simulate_plan(w, mp::sim::in_core_plan(w), machine).timeline.peak_bytes;
  machine.memory_bytes = in_core;
  mp::runtime::ValidationOptions options;
  options.repetitions = 1;
  struct Case {
    const char* name;
    mp::sim::Plan plan;
  };
  const std::vector<Case> cases{
      {"fsdp-style: everything on the host, update on the host",
       placing(w, {TensorKind::kParameter, TensorKind::kGradient, TensorKind::kOptimizerState},
               true)},
      {"zero-offload: gradients and momenta on the host, update on the host",
       placing(w, {TensorKind::kGradient, TensorKind::kOptimizerState}, true)},
      {"parameters, momenta and the batch on the host, update on the device",
       placing(w, {TensorKind::kParameter, TensorKind::kOptimizerState, TensorKind::kInput},
               false)},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      const auto r =
          mp::runtime::validate(mp::host_backend::HostBackend{}, w, c.plan, machine, options);
      CHECK(r.measured_feasible);
      CHECK(r.peaks_match());
      CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
      CHECK(r.peak_bytes_predicted < in_core);
      CHECK(r.tolerance.bitwise);
      CHECK(r.bitwise_equal);
      CHECK(r.gradients_match);
      // Every gradient (of weights and of activations), the updated parameters and momenta, and
      // the loss.
      CHECK(r.tensors_compared >=
            3 * mp::sim::host_placeable(w, TensorKind::kParameter).size() + 1);
      CHECK(mp::runtime::validation_failures(r).empty());
    }
  }
}
