// zoo_bench: how long `memplan zoo` takes to model a network, stage by stage (build, cost model,
// validation, trace text), best of N runs. The budget: the 2500-layer residual network at
// batch 64 well under a second. Usage: zoo_bench [MODEL [DEPTH [BATCH [RUNS]]]], defaults
// resnet 2500 64 5.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/core.h>

#include "io/trace_io.hpp"
#include "zoo/cost_model.hpp"
#include "zoo/devices.hpp"
#include "zoo/zoo.hpp"

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

int main(int argc, char** argv) {
  memplan::zoo::ZooRequest request;
  request.model = argc > 1 ? argv[1] : "resnet";
  request.device = "k40c";
  if (request.model == "resnet") request.options.depth = argc > 2 ? std::atoll(argv[2]) : 2500;
  request.options.batch = argc > 3 ? std::atoll(argv[3]) : 64;
  const int runs = argc > 4 ? std::atoi(argv[4]) : 5;
  double best_build = 1e9;
  double best_cost = 1e9;
  double best_validate = 1e9;
  double best_model = 1e9;
  double best_write = 1e9;
  std::size_t ops = 0;
  std::size_t tensors = 0;
  std::size_t bytes = 0;
  for (int r = 0; r < runs; ++r) {
    auto start = std::chrono::steady_clock::now();
    memplan::zoo::BuiltModel built =
        memplan::zoo::build_model(*memplan::zoo::find_model(request.model), request.options);
    best_build = std::min(best_build, seconds_since(start));
    start = std::chrono::steady_clock::now();
    memplan::zoo::CostModel(*memplan::zoo::find_device(request.device)).apply(built.workload);
    best_cost = std::min(best_cost, seconds_since(start));
    start = std::chrono::steady_clock::now();
    memplan::sim::validate(built.workload, "bench");
    best_validate = std::min(best_validate, seconds_since(start));
    start = std::chrono::steady_clock::now();
    const memplan::sim::Workload w = memplan::zoo::make_workload(request);
    best_model = std::min(best_model, seconds_since(start));
    start = std::chrono::steady_clock::now();
    const std::string text = memplan::sim::write_trace(w);
    best_write = std::min(best_write, seconds_since(start));
    ops = w.ops.size();
    tensors = w.tensors.size();
    bytes = text.size();
  }
  fmt::print("{} depth {} batch {}: {} ops, {} tensors, trace {:.1f} MB\n", request.model,
             request.options.depth.value_or(0), request.options.batch, ops, tensors,
             static_cast<double>(bytes) / 1e6);
  fmt::print("stages, best of {}: build {:.3f} s, cost model {:.3f} s, validate {:.3f} s\n", runs,
             best_build, best_cost, best_validate);
  fmt::print("best of {}: build+cost+validate {:.3f} s, trace text {:.3f} s, total {:.3f} s\n",
             runs, best_model, best_write, best_model + best_write);
  return 0;
}
