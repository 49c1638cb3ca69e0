// Property on the GPU: random plans (keep, swap, recompute, and binarize where Gist allows it) of
// the shipped traces, under a cap just above the simulator's reserved peak for the plan: every one
// runs under that cap on the CUDA backend with the simulator's peaks and bitwise the GPU's in-core
// gradients, loss and updated weights. 50 cases by default; MEMPLAN_PROPERTY_CASES=N runs more.
// [cuda]: skipped without a GPU.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <random>
#include <string>

#include "core/basic_plans.hpp"
#include "core/feature_maps.hpp"
#include "core/input_error.hpp"
#include "core/machine.hpp"
#include "cuda_backend/cuda_backend.hpp"
#include "cuda_backend/cuda_environment.hpp"
#include "io/trace_io.hpp"
#include "memory/device_arena.hpp"
#include "runtime/validation.hpp"
#include "sim/engine.hpp"
#include "sim/lowering.hpp"

namespace mp = memplan;

TEST_CASE("random plans of the shipped traces run on the GPU as the simulator says",
          "[cuda][property]") {
  const mp::cuda_backend::CudaEnvironment env = mp::cuda_backend::probe_cuda();
  if (env.device_count == 0) {
    WARN("skipped: no CUDA device (" << env.unavailable_reason << ")");
    return;
  }
  int cases = 50;
  if (const char* n = std::getenv("MEMPLAN_PROPERTY_CASES")) cases = std::max(1, std::atoi(n));
  const mp::cuda_backend::CudaBackend backend;
  std::mt19937_64 rng(2026);
  for (int k = 0; k < cases; ++k) {
    const std::string trace = (k % 2 == 0) ? "mlp4" : "resnet_tiny";
    CAPTURE(k, trace);
    const mp::sim::Workload w =
        mp::sim::read_trace(std::string(MEMPLAN_SOURCE_DIR) + "/traces/" + trace + ".json");
    const auto maps = mp::sim::find_feature_maps(w);
    mp::sim::Plan plan = mp::sim::in_core_plan(w);
    plan.policy = "random";
    for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
      mp::sim::Decision d = plan.decisions[i];
      switch (std::uniform_int_distribution<int>(0, 3)(rng)) {
        case 0:
          d.action = mp::sim::Action::kKeep;
          break;
        case 1:
          d.action = mp::sim::Action::kSwap;
          break;
        case 2:
          d.action = mp::sim::Action::kRecompute;
          break;
        default:
          d.action = mp::sim::Action::kEncode;
          d.encoding = mp::sim::Encoding::kBinarize;
          break;
      }
      if (mp::sim::decision_problem(d, maps[i], w).empty()) plan.decisions[i] = d;
    }
    // A binarized map may not feed a forward op that a recompute re-runs (validate_plan says
    // so); such a draw keeps its binarized maps instead, as tests/property does.
    try {
      mp::sim::validate_plan(plan, w, "random plan");
    } catch (const mp::sim::InputError&) {
      for (mp::sim::Decision& d : plan.decisions) {
        if (d.action == mp::sim::Action::kEncode) {
          d.action = mp::sim::Action::kKeep;
          d.encoding = mp::sim::Encoding::kNone;
        }
      }
    }
    REQUIRE_NOTHROW(mp::sim::validate_plan(plan, w, "random plan"));
    mp::sim::Machine machine = mp::sim::make_machine(w.device);
    machine.memory_bytes = std::int64_t{1} << 30;
    mp::sim::Engine engine;
    // A cap just above the plan's need (one arena block of slack).
    machine.memory_bytes = engine.run(mp::sim::lower(w, plan), machine).peak_reserved_bytes +
                           mp::sim::DeviceArena::kAlignment;
    mp::runtime::ValidationOptions options;
    options.repetitions = 1;
    const auto r = mp::runtime::validate(backend, w, plan, machine, options);
    CHECK(r.predicted_feasible);
    CHECK(r.measured_feasible);
    CHECK(r.peak_bytes_measured == r.peak_bytes_predicted);
    CHECK(r.peak_reserved_measured == r.peak_reserved_predicted);
    CHECK(r.gradients_match);
  }
}
