// Plans that place parameters, gradients, optimizer state and the input batch on the host (Note
// [Host placement] in core/plan.hpp) run for real on the host backend: the update on the host
// stream (runtime::run_host_op) or on the device after a prefetch, the weights written back. Each
// plan's gradients, updated weights and momenta (Adam's exp_avg and exp_avg_sq) are bitwise those
// of the in-core run, and its measured device peak is the simulator's to the byte.
#include <catch2/catch.hpp>

#include <algorithm>

#include "core/basic_plans.hpp"
#include "core/machine.hpp"
#include "host_backend/host_backend.hpp"
#include "runtime/validation.hpp"
#include "sim/simulation.hpp"
#include "zoo/models.hpp"

namespace mp = memplan;
using mp::sim::TensorKind;

namespace {

mp::sim::Workload resnet18(mp::zoo::Optimizer optimizer = mp::zoo::Optimizer::kSgd) {
  const mp::zoo::ModelInfo* model = mp::zoo::find_model("resnet18");
  REQUIRE(model != nullptr);
  mp::zoo::ModelOptions options;
  options.batch = 2;
  options.input = {32, 32};
  options.optimizer = optimizer;
  return mp::zoo::build_model(*model, options).workload;
}

// `plan` with every group of its host-placed tensors prefetched at the group's first use
// (`at_use`) or at the start of its window, where that is not the default.
mp::sim::Plan prefetching(mp::sim::Plan plan, const mp::sim::Workload& w, bool at_use) {
  for (mp::sim::TensorId t : plan.host_tensors) {
    for (const mp::sim::HostUseGroup& g : mp::sim::host_use_groups(t, plan.host_update, w)) {
      const mp::sim::OpId at = at_use ? g.first_use : g.earliest_prefetch;
      if (at != g.default_prefetch) plan.host_prefetches.push_back({t, g.first_use, at});
    }
  }
  REQUIRE_FALSE(plan.host_prefetches.empty());
  mp::sim::validate_plan(plan, w, "test plan");
  return plan;
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

TEST_CASE("host-placed parameters, gradients and optimizer state run bitwise at the predicted peak",
          "[host_backend][runtime][offload]") {
  // ResNet-18 trained with SGD and momentum (one state tensor per parameter) and with Adam (two:
  // exp_avg, exp_avg_sq). The CPU's update (runtime::run_host_op) and the host device's (in the
  // in-core run) are one loop per rule, so the updated values agree bitwise.
  const auto optimizer = GENERATE(mp::zoo::Optimizer::kSgd, mp::zoo::Optimizer::kAdam);
  const mp::sim::Workload w = resnet18(optimizer);
  // 62 trainable tensors; the update reads each, its gradient and its states.
  const std::size_t states = optimizer == mp::zoo::Optimizer::kAdam ? 2 : 1;
  REQUIRE(w.ops.back().layer ==
          (optimizer == mp::zoo::Optimizer::kAdam ? mp::sim::Layer::kAdam : mp::sim::Layer::kSgd));
  const std::size_t params = w.ops.back().inputs.size() / (2 + states);
  REQUIRE(params == 62);
  REQUIRE(mp::sim::host_placeable(w, TensorKind::kOptimizerState).size() == states * params);
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
    bool below_in_core = true;
  };
  const mp::sim::Plan on_device_update =
      placing(w, {TensorKind::kParameter, TensorKind::kOptimizerState, TensorKind::kInput}, false);
  const std::vector<Case> cases{
      {"fsdp-offload: parameters, gradients and optimizer state on the host, update on the host",
       placing(w, {TensorKind::kParameter, TensorKind::kGradient, TensorKind::kOptimizerState},
               true)},
      {"zero-offload: gradients and optimizer state on the host, update on the host",
       placing(w, {TensorKind::kGradient, TensorKind::kOptimizerState}, true)},
      {"parameters, optimizer state and the batch on the host, update on the device",
       on_device_update},
      // Moved prefetch points (Plan::host_prefetches): every copy issued at its use, or as early
      // as its window allows. Then the weights and momenta are back on the device from the op
      // after their previous use on, which holds as much as in core, and the arena, which frees
      // and takes the copies again in another order, needs more than the in-core device
      // (141,287,936 B against 141,053,152 with SGD): that case runs on a larger one.
      {"the same, every group prefetched at its first use", prefetching(on_device_update, w, true)},
      {"the same, every group prefetched at the start of its window",
       prefetching(on_device_update, w, false), false},
  };
  for (const Case& c : cases) {
    SECTION(c.name) {
      mp::sim::Machine device = machine;
      if (!c.below_in_core) device.memory_bytes = 2 * in_core;
      const auto r =
          mp::runtime::validate(mp::host_backend::HostBackend{}, w, c.plan, device, options);
      CHECK(r.predicted_feasible);
      CHECK(r.measured_feasible);
      CHECK(r.peaks_match());
      CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
      if (c.below_in_core) CHECK(r.peak_bytes_predicted < in_core);
      CHECK(r.tolerance.bitwise);
      CHECK(r.bitwise_equal);
      CHECK(r.gradients_match);
      // Every gradient, the updated parameters and optimizer states, and the loss.
      CHECK(r.tensors_compared >= (2 + states) * params + 1);
      CHECK(mp::runtime::validation_failures(r).empty());
    }
  }
}
