// sim_bench: how fast the simulator is on the deepest network memplan targets — a generated
// residual chain of 1517 layers (conv, in-place ReLU, and an add with the block's skip every other
// layer, forward and backward) until the zoo provides ResNet-1517. Reports simulated instructions
// per second on one core and the time to lower and to simulate one plan.
//
//   sim_bench [layers] [repetitions]
#include <chrono>
#include <cstdlib>
#include <string>

#include <fmt/core.h>

#include "sim/basic_plans.hpp"
#include "sim/engine.hpp"
#include "sim/feature_maps.hpp"
#include "sim/liveness.hpp"
#include "sim/lowering.hpp"

using namespace memplan::sim;

namespace {

Workload deep_residual_chain(int layers) {
  Workload w;
  w.device.name = "bench-16GiB";
  w.device.memory_bytes = Bytes{16} << 30;
  auto add_tensor = [&](std::string name, Bytes bytes, TensorKind kind, OpId producer) {
    Tensor t;
    t.id = static_cast<TensorId>(w.tensors.size());
    t.name = std::move(name);
    t.bytes = bytes;
    t.kind = kind;
    t.producer = producer;
    w.tensors.push_back(t);
    return t.id;
  };
  auto add_op = [&](std::string name, std::string layer, Phase phase, std::vector<TensorId> inputs,
                    Nanoseconds duration) {
    Op op;
    op.id = static_cast<OpId>(w.ops.size());
    op.name = std::move(name);
    op.layer = std::move(layer);
    op.phase = phase;
    op.inputs = std::move(inputs);
    op.duration_ns = duration;
    w.ops.push_back(op);
    return op.id;
  };
  auto output = [&](OpId op, std::string name, Bytes bytes, TensorKind kind) {
    const TensorId t = add_tensor(std::move(name), bytes, kind, op);
    w.ops[static_cast<std::size_t>(op)].outputs.push_back(t);
    return t;
  };
  constexpr Bytes kMap = Bytes{8} << 20;
  constexpr Bytes kWeight = Bytes{1} << 20;
  struct Saved {
    OpId conv, relu, add;
    TensorId in, w, relu_out, skip;
  };
  std::vector<Saved> saved;
  TensorId h = add_tensor("x", kMap, TensorKind::kInput, kNoId);
  TensorId skip = h;
  std::vector<TensorId> weights;
  for (int i = 0; i < layers; ++i) {
    Saved s{};
    s.in = h;
    s.w = add_tensor(fmt::format("w{}", i), kWeight, TensorKind::kParameter, kNoId);
    weights.push_back(s.w);
    s.conv = add_op(fmt::format("conv{}", i), "conv2d", Phase::kForward, {h, s.w}, 200'000);
    const TensorId c = output(s.conv, fmt::format("conv{}_out", i), kMap, TensorKind::kActivation);
    s.relu = add_op(fmt::format("relu{}", i), "relu", Phase::kForward, {c}, 20'000);
    s.relu_out = output(s.relu, fmt::format("relu{}_out", i), kMap, TensorKind::kActivation);
    w.tensors[static_cast<std::size_t>(s.relu_out)].in_place_of = c;
    h = s.relu_out;
    s.add = kNoId;
    if (i % 2 == 1) {
      s.skip = skip;
      s.add = add_op(fmt::format("add{}", i), "add", Phase::kForward, {h, skip}, 20'000);
      h = output(s.add, fmt::format("add{}_out", i), kMap, TensorKind::kActivation);
      skip = h;
    }
    saved.push_back(s);
  }
  const OpId loss = add_op("loss", "softmax_cross_entropy", Phase::kForward, {h}, 10'000);
  const TensorId l = output(loss, "loss", 4, TensorKind::kActivation);
  const OpId loss_bwd =
      add_op("loss_bwd", "softmax_cross_entropy", Phase::kBackward, {l, h}, 10'000);
  TensorId g = output(loss_bwd, "g_loss", kMap, TensorKind::kGradient);
  std::vector<TensorId> grads;
  for (int i = layers - 1; i >= 0; --i) {
    const Saved& s = saved[static_cast<std::size_t>(i)];
    if (s.add != kNoId) {
      const OpId add_bwd =
          add_op(fmt::format("add{}_bwd", i), "add", Phase::kBackward, {g}, 20'000);
      g = output(add_bwd, fmt::format("g_add{}", i), kMap, TensorKind::kGradient);
    }
    const OpId relu_bwd =
        add_op(fmt::format("relu{}_bwd", i), "relu", Phase::kBackward, {g, s.relu_out}, 20'000);
    g = output(relu_bwd, fmt::format("g_relu{}", i), kMap, TensorKind::kGradient);
    const OpId conv_bwd =
        add_op(fmt::format("conv{}_bwd", i), "conv2d", Phase::kBackward, {g, s.in, s.w}, 400'000);
    grads.push_back(output(conv_bwd, fmt::format("g_w{}", i), kWeight, TensorKind::kGradient));
    g = output(conv_bwd, fmt::format("g_conv{}", i), kMap, TensorKind::kGradient);
  }
  std::vector<TensorId> update_inputs = weights;
  update_inputs.insert(update_inputs.end(), grads.begin(), grads.end());
  add_op("sgd", "sgd", Phase::kUpdate, update_inputs, 100'000);
  validate(w, "deep residual chain");
  return w;
}

// Swap every third map, recompute every third, keep the rest: every instruction kind at work.
Plan mixed_plan(const Workload& w) {
  Plan plan = in_core_plan(w);
  plan.policy = "mixed";
  for (std::size_t i = 0; i < plan.decisions.size(); ++i) {
    if (i % 3 == 0) plan.decisions[i].action = Action::kSwap;
    if (i % 3 == 1) plan.decisions[i].action = Action::kRecompute;
  }
  return plan;
}

using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

int main(int argc, char** argv) {
  const int layers = argc > 1 ? std::atoi(argv[1]) : 1517;
  const int repetitions = argc > 2 ? std::atoi(argv[2]) : 200;
  const Workload w = deep_residual_chain(layers);
  const Bytes peak = incore_peak(w).bytes;
  fmt::print(
      "deep residual chain: {} layers, {} ops, {} tensors, {} feature maps, in-core peak {}\n",
      layers, w.ops.size(), w.tensors.size(), find_feature_maps(w).size(), format_bytes(peak));
  Machine machine;
  machine.memory_bytes = peak * 2;  // room for every plan, so each runs to the end
  machine.copy_latency_ns = 10'000;
  const EngineOptions full;
  EngineOptions lean;
  lean.record_spans = false;
  lean.record_memory = false;
  lean.record_stalls = false;
  Engine engine;
  fmt::print("{:<14} {:>8} {:>10} {:>12} {:>14} {:>14} {:>12}\n", "plan", "instr", "lower ms",
             "simulate ms", "Minstr/s lean", "Minstr/s full", "feasible");
  for (const Plan& plan :
       {in_core_plan(w), swap_all_plan(w), recompute_all_plan(w), mixed_plan(w)}) {
    Lowerer lowerer(w);  // once per workload, as a search would
    Program program;
    lowerer.lower(plan, program);  // warm the buffers
    auto t0 = Clock::now();
    for (int r = 0; r < repetitions; ++r) lowerer.lower(plan, program);
    const double lower_s = seconds_since(t0) / repetitions;
    engine.run(program, machine, lean);  // warm the buffers
    t0 = Clock::now();
    bool feasible = true;
    std::size_t executed = 0;
    for (int r = 0; r < repetitions; ++r) {
      const Timeline& tl = engine.run(program, machine, lean);
      feasible = tl.feasible;
      executed += tl.instructions_executed;
    }
    const double lean_s = seconds_since(t0);
    t0 = Clock::now();
    std::size_t executed_full = 0;
    for (int r = 0; r < repetitions; ++r)
      executed_full += engine.run(program, machine, full).instructions_executed;
    const double full_s = seconds_since(t0);
    fmt::print("{:<14} {:>8} {:>10.3f} {:>12.3f} {:>14.1f} {:>14.1f} {:>12}\n", plan.policy,
               program.instruction_count(), lower_s * 1e3, lean_s / repetitions * 1e3,
               static_cast<double>(executed) / lean_s / 1e6,
               static_cast<double>(executed_full) / full_s / 1e6, feasible ? "yes" : "no (oom)");
  }
  return 0;
}
