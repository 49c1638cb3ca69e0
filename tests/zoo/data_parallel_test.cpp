// Data parallelism for the zoo's steps (zoo/data_parallel.hpp, Note [Data-parallel steps]): on a
// three-op network written out by hand, every op's place and every rank's peak worked out before
// it is asserted; on the zoo's GPT, what sharding saves.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/input_error.hpp"
#include "core/interconnect.hpp"
#include "core/liveness.hpp"
#include "sim/simulation.hpp"
#include "tests/zoo/zoo_test_support.hpp"
#include "zoo/data_parallel.hpp"
#include "zoo/zoo.hpp"

using memplan::sim::Action;
using memplan::sim::Bytes;
using memplan::sim::Op;
using memplan::sim::Phase;
using memplan::sim::Plan;
using memplan::sim::TensorKind;
using memplan::sim::Workload;
using memplan::zoo::DataParallel;

namespace {

// x -> blocks.0.fc (W0, 4000 B) -> blocks.1.fc (W1, 8000 B) -> head (H, 2000 B) -> loss, its
// backward and SGD with momentum (one state per parameter), as the zoo lays out an update: the
// parameters, their gradients in the same order, the states.
Workload three_ops() {
  Workload w;
  w.provenance.source = "hand-written";
  auto tensor = [&](const char* name, TensorKind kind, Bytes bytes, int producer) {
    memplan::sim::Tensor t;
    t.id = memplan::sim::tensor_id(w.tensors.size());
    t.name = name;
    t.kind = kind;
    t.bytes = bytes;
    t.producer = producer < 0 ? memplan::sim::kNoOp : memplan::sim::op_id(producer);
    w.tensors.push_back(t);
    return t.id;
  };
  auto op = [&](const char* name, Phase phase, std::vector<memplan::sim::TensorId> in,
                std::vector<memplan::sim::TensorId> out) {
    Op o;
    o.id = memplan::sim::op_id(w.ops.size());
    o.name = name;
    o.phase = phase;
    o.inputs = std::move(in);
    o.outputs = std::move(out);
    o.duration_ns = 1000;
    w.ops.push_back(o);
  };
  const auto x = tensor("x", TensorKind::kInput, 1000, -1);
  const auto w0 = tensor("blocks.0.fc.weight", TensorKind::kParameter, 4000, -1);
  const auto w1 = tensor("blocks.1.fc.weight", TensorKind::kParameter, 8000, -1);
  const auto h = tensor("head.weight", TensorKind::kParameter, 2000, -1);
  const auto a0 = tensor("a0", TensorKind::kActivation, 1000, 0);
  const auto a1 = tensor("a1", TensorKind::kActivation, 1000, 1);
  const auto loss = tensor("loss", TensorKind::kActivation, 100, 2);
  const auto g_a1 = tensor("g_a1", TensorKind::kGradient, 1000, 3);
  const auto g_h = tensor("g_head.weight", TensorKind::kGradient, 2000, 3);
  const auto g_a0 = tensor("g_a0", TensorKind::kGradient, 1000, 4);
  const auto g_w1 = tensor("g_blocks.1.fc.weight", TensorKind::kGradient, 8000, 4);
  const auto g_w0 = tensor("g_blocks.0.fc.weight", TensorKind::kGradient, 4000, 5);
  const auto m0 = tensor("m_blocks.0.fc.weight", TensorKind::kOptimizerState, 4000, -1);
  const auto m1 = tensor("m_blocks.1.fc.weight", TensorKind::kOptimizerState, 8000, -1);
  const auto mh = tensor("m_head.weight", TensorKind::kOptimizerState, 2000, -1);
  op("blocks.0.fc", Phase::kForward, {x, w0}, {a0});
  op("blocks.1.fc", Phase::kForward, {a0, w1}, {a1});
  op("head", Phase::kForward, {a1, h}, {loss});
  op("head_bwd", Phase::kBackward, {loss, a1, h}, {g_a1, g_h});
  op("blocks.1.fc_bwd", Phase::kBackward, {g_a1, a0, w1}, {g_a0, g_w1});
  op("blocks.0.fc_bwd", Phase::kBackward, {g_a0, x, w0}, {g_w0});
  op("sgd", Phase::kUpdate, {w0, w1, h, g_w0, g_w1, g_h, m0, m1, mh}, {});
  memplan::sim::validate(w, "three ops");
  return w;
}

std::vector<std::string> op_names(const Workload& w) {
  std::vector<std::string> out;
  for (const Op& o : w.ops) out.push_back(o.name);
  return out;
}

const memplan::sim::Interconnect kNvlink = memplan::sim::make_interconnect("nvlink3", {}, 8);

// The simulated peak of `plan` on a device with room for anything.
Bytes peak_of(const Workload& w, const Plan& plan) {
  memplan::sim::Machine machine;
  machine.memory_bytes = Bytes{1} << 40;
  const auto s = memplan::sim::simulate_plan(w, plan, machine);
  REQUIRE(s.timeline.feasible);
  return s.timeline.peak_bytes;
}

}  // namespace

TEST_CASE("fsdp units: one per repeated block, the rest the root", "[zoo][data_parallel]") {
  using memplan::zoo::fsdp_unit;
  CHECK(fsdp_unit("h.3.attn.c_attn.weight") == "h.3");
  CHECK(fsdp_unit("model.layers.12.mlp.up_proj.weight") == "model.layers.12");
  CHECK(fsdp_unit("layer1.0.conv1.weight") == "layer1.0");
  CHECK(fsdp_unit("encoder.layers.encoder_layer_3.ln_1.weight") ==
        "encoder.layers.encoder_layer_3");
  CHECK(fsdp_unit("wte").empty());
  CHECK(fsdp_unit("fc.weight").empty());
  CHECK(fsdp_unit("conv1.weight") == "conv1");  // a name that ends in a digit is a unit
}

TEST_CASE("fsdp full-shard over 4 ranks: gathers, reduce-scatters and each rank's peak",
          "[zoo][data_parallel]") {
  // Units (fsdp_unit): blocks.0 {W0: 4000 B, its shard 1000}, blocks.1 {W1: 8000, shard 2000},
  // root {H: 2000, shard 500}. Forward order blocks.0, blocks.1, root; backward order root,
  // blocks.1, blocks.0. Prefetch 1: a unit's forward gather goes before the first op of the unit
  // before it (blocks.0's and blocks.1's before blocks.0.fc, root's before blocks.1.fc). Each
  // gathered tensor is a feature map (read by its unit's forward and backward ops), and the job
  // records FULL_SHARD with prefetch 1 as its plans' default (core/fsdp_setting.hpp): blocks.1's
  // and blocks.0's recomputed — their all-gathers re-run — issued before the first backward op of
  // the unit before them in backward (blocks.1's before head_bwd, blocks.0's before
  // blocks.1.fc_bwd); the root is never resharded. A unit's reduce-scatter follows the op that
  // writes its last gradient; the compute op after a reduce-scatter waits for the one before
  // (blocks.0.fc_bwd for root's; sgd waits for every collective).
  DataParallel dp;
  dp.strategy = DataParallel::Strategy::kFullShard;
  dp.world_size = 4;
  const auto job = memplan::zoo::data_parallel_job(three_ops(), dp, kNvlink);
  REQUIRE(job.ranks.size() == 1);
  const Workload& w = job.ranks.front();
  CHECK(w.distributed->world_size == 4);
  CHECK(w.distributed->fsdp == memplan::sim::FsdpSetting{true, 1});
  CHECK(op_names(w) == std::vector<std::string>{
                           "blocks.0.all_gather", "blocks.1.all_gather", "blocks.0.fc",
                           "root.all_gather", "blocks.1.fc", "head", "head_bwd",
                           "root.reduce_scatter", "blocks.1.fc_bwd", "blocks.1.reduce_scatter",
                           "blocks.0.fc_bwd", "blocks.0.reduce_scatter", "sgd"});
  // Collectives on stream 1, numbered in issue order; the update waits for all of them and
  // reads the shards: 1000 + 2000 + 500 B of parameters, as much of gradients and of momentum.
  std::int64_t sequence = 0;
  for (const Op& o : w.ops) {
    if (!o.collective) continue;
    CHECK(o.stream == 1);
    CHECK(o.collective->sequence == sequence++);
    CHECK(o.duration_ns > 0);
  }
  CHECK(memplan::test::op_named(w, "blocks.0.fc_bwd").after ==
        std::vector<memplan::sim::OpId>{memplan::test::op_named(w, "root.reduce_scatter").id});
  CHECK(memplan::test::op_named(w, "blocks.1.fc_bwd").after.empty());
  const Op& update = w.ops.back();
  CHECK(update.after.size() == 6);
  Bytes read = 0;
  for (auto t : update.inputs) read += w.tensor(t).bytes;
  CHECK(read == 3 * 3500);
  CHECK(update.duration_ns == 1000 * 3500 / 14000);  // the shards' share of the work
  const Plan full_shard = *memplan::sim::basic_plan("in-core", w);
  const auto decision = [&](const Plan& plan, const std::string& unit) {
    for (const auto& d : plan.decisions) {
      if (w.tensor(d.tensor).name == unit + ".flat_param (gathered)") return d;
    }
    FAIL("no decision for " << unit);
    return memplan::sim::Decision{};
  };
  CHECK(decision(full_shard, "root").action == Action::kKeep);
  CHECK(decision(full_shard, "blocks.1").action == Action::kRecompute);
  CHECK(w.op(decision(full_shard, "blocks.1").prefetch_before).name == "head_bwd");
  CHECK(w.op(decision(full_shard, "blocks.0").prefetch_before).name == "blocks.1.fc_bwd");
  // Each rank's peak, op by op (allocated when the producer is issued, freed after the last
  // reader; a buffer a collective read, once the compute stream has waited for that collective):
  // at the start x 1000 and the shards of parameters and momentum, 7000: 8000. blocks.0's and
  // blocks.1's gathers 12000, 20000; blocks.0.fc a0 21000, then its gather freed 17000; root's
  // gather 19000; blocks.1.fc a1 20000, then blocks.1's gather freed 12000; head loss 12100;
  // blocks.1 gathered again 20100; head_bwd g_a1 and g_H 23100, then loss, a1 and the root's
  // gather freed 20000; the root's gradient shard 20500 (g_H, which its reduce-scatter reads,
  // stays until blocks.0.fc_bwd, the op after the next reduce-scatter, waits for that one);
  // blocks.0 gathered again 24500; blocks.1.fc_bwd g_a0 and g_W1: 33500, the peak. Without the
  // stream rule (liveness alone), g_H goes after its reduce-scatter is issued: 31500.
  CHECK(peak_of(w, full_shard) == 33500);

  // SHARD_GRAD_OP: nothing gathered again; the forward's kept: blocks.0's until blocks.0.fc_bwd,
  // blocks.1's until blocks.1.fc_bwd. At blocks.1.fc_bwd: 8000 + blocks.0's 4000 + blocks.1's
  // 8000 + a0 1000 + g_a1 1000 + g_H 2000 + the root's shard of gradient 500 + g_a0 1000 + g_W1
  // 8000 = 33500 (31500 by liveness alone).
  dp.strategy = DataParallel::Strategy::kShardGradOp;
  const Workload kept = memplan::zoo::data_parallel_job(three_ops(), dp, kNvlink).ranks.front();
  CHECK(kept.distributed->fsdp == memplan::sim::FsdpSetting{false, 1});
  const Plan shard_grad_op = *memplan::sim::basic_plan("in-core", kept);
  CHECK(decision(shard_grad_op, "blocks.0").action == Action::kKeep);
  CHECK(peak_of(kept, shard_grad_op) == 33500);
  CHECK(memplan::sim::incore_peak(kept).bytes == 31500);
  // Prefetch 0: each gather when its unit needs it. At blocks.1.fc_bwd blocks.0's backward gather
  // is not there yet (-4000), and g_H is gone: blocks.1's gather, which blocks.1.fc_bwd waits for,
  // runs on the nccl stream after the root's reduce-scatter, so that wait joins both (-2000):
  // 33500 - 4000 - 2000 = 27500.
  dp.strategy = DataParallel::Strategy::kFullShard;
  dp.prefetch = 0;
  const Workload late = memplan::zoo::data_parallel_job(three_ops(), dp, kNvlink).ranks.front();
  CHECK(peak_of(late, *memplan::sim::basic_plan("in-core", late)) == 27500);
}

TEST_CASE("ddp over 4 ranks: gradient buckets all-reduced as backward fills them",
          "[zoo][data_parallel]") {
  // Buckets in the reverse order of first use (g_H, g_W1, g_W0), the first of at most 2000 B,
  // the rest of 10000: [g_H], [g_W1] (2000 + 8000 passes the first's cap), [g_W0] (8000 + 4000
  // passes 10000). Each bucket's all-reduce follows the op that writes its gradient.
  DataParallel dp;
  dp.world_size = 4;
  dp.first_bucket_bytes = 2000;
  dp.bucket_bytes = 10000;
  const Workload w = memplan::zoo::data_parallel_job(three_ops(), dp, kNvlink).ranks.front();
  CHECK(op_names(w) == std::vector<std::string>{"blocks.0.fc", "blocks.1.fc", "head", "head_bwd",
                                                "ddp.bucket0.all_reduce", "blocks.1.fc_bwd",
                                                "ddp.bucket1.all_reduce", "blocks.0.fc_bwd",
                                                "ddp.bucket2.all_reduce", "sgd"});
  CHECK(w.ops.back().after.size() == 3);
  // The buckets are held throughout, 14000 B beside the parameters' 14000 and the momentum's
  // 14000; with x: 43000 at the start. a0, a1, loss: 45100; head_bwd 48100, loss and a1 freed
  // 47000; blocks.1.fc_bwd 56000, g_a1 and a0 freed 54000; blocks.0.fc_bwd g_W0: 58000.
  CHECK(memplan::sim::incore_peak(w).bytes == 58000);
  dp.world_size = 1;
  CHECK_THROWS_AS(memplan::zoo::data_parallel_job(three_ops(), dp, kNvlink),
                  memplan::sim::InputError);
}

TEST_CASE("the zoo's GPT under FSDP: sharding saves 7/8 of the state, less what is gathered",
          "[zoo][data_parallel]") {
  memplan::zoo::ZooRequest request;
  request.model = "gpt";
  request.device = "a100-40gb";
  request.options.batch = 2;
  request.options.transformer.layers = 4;
  request.options.transformer.sequence = 256;
  request.options.optimizer = memplan::zoo::Optimizer::kAdam;
  const Workload step = memplan::zoo::make_workload(request);
  DataParallel dp;
  dp.strategy = DataParallel::Strategy::kFullShard;
  dp.world_size = 8;
  const auto job = memplan::zoo::data_parallel_job(step, dp, kNvlink);
  memplan::sim::validate(job, "gpt fsdp");
  const Workload& w = job.ranks.front();
  Bytes persistent = 0, persistent_one = 0;
  for (const auto& t : w.tensors) persistent += memplan::sim::is_persistent(t.kind) ? t.bytes : 0;
  for (const auto& t : step.tensors)
    persistent_one += memplan::sim::is_persistent(t.kind) ? t.bytes : 0;
  // Parameters and Adam's two states: each unit's flat parameter padded to 8 shards.
  CHECK(persistent >= persistent_one / 8);
  CHECK(persistent <= persistent_one / 8 + 3 * 5);  // 5 units (4 blocks, root), 3 tensors each
  CHECK(memplan::sim::incore_peak(w).bytes < memplan::sim::incore_peak(step).bytes);
}
