// Today's policies (activation checkpointing per block, SAC, Megatron's selective recompute, the
// memory-budget partitioner, torchtune's offloading) on small steps whose right plans are worked
// out by hand from what each library does.
#include <fmt/core.h>
#include <fmt/ranges.h>
#include <catch2/catch.hpp>

#include "io/trace_io.hpp"
#include "search/policies/blocks.hpp"
#include "search/policies/policy.hpp"
#include "tests/search/policies/run_policy.hpp"
#include "tests/support/run_command.hpp"
#include "tests/support/sim_helpers.hpp"
#include "tests/support/workload_builder.hpp"
#include "zoo/zoo.hpp"

using namespace memplan::sim;
using namespace memplan::search;
using namespace memplan::test;

namespace {

// A one-layer GPT (zoo/transformer.cpp): embed, drop, h.0 (ln_1, c_attn, scores, softmax,
// attn_dropout, context, c_proj, resid_dropout, residual1, ln_2, c_fc, act, c_proj, dropout,
// residual2), ln_f, lm_head, loss.
Workload gpt(std::int64_t layers, std::int64_t sequence = 16) {
  memplan::zoo::ZooRequest request;
  request.model = "gpt";
  request.device = "v100-16gb";
  request.options.transformer = {layers, 64, 2, sequence, 100};
  return memplan::zoo::make_workload(request);
}

// The maps a plan acts on with `action`, by name, in tensor order.
std::string maps_with(const Workload& w, const Plan& plan, Action action) {
  std::string out;
  for (const Decision& d : plan.decisions) {
    if (d.action == action) out += w.tensor(d.tensor).name + " ";
  }
  return out;
}

PolicyDecision run(const char* name, const Workload& w) {
  return run_policy(name, w, test_machine(Bytes{1} << 40));
}

}  // namespace

TEST_CASE("blocks by module path: the zoo GPT's layers, its embedding and head in none",
          "[search][todays][blocks]") {
  CHECK(block_name("h.3.attn.c_attn") == "h.3");
  CHECK(block_name("layer1.0.downsample.0") == "layer1.0");
  CHECK(block_name("encoder.layers.encoder_layer_11.ln_1") == "encoder.layers.encoder_layer_11");
  CHECK(block_name("features.1.1.attn.fill_") == "features.1");
  CHECK(block_name("conv2d_1").empty());  // one component: no module path
  CHECK(block_name("h.3").empty());       // "3" is the layer's own name, not a path
  CHECK(block_name("ln_f").empty());
  const Workload w = gpt(2);
  const std::vector<Block> blocks = checkpoint_blocks(NetworkView(w));
  REQUIRE(blocks.size() == 2);
  CHECK(blocks[0].name == "h.0");
  CHECK(blocks[1].name == "h.1");
  // ln_1, c_attn, scores, softmax, attn_dropout, context, c_proj, resid_dropout, residual1, ln_2,
  // c_fc, act, c_proj, dropout, residual2.
  CHECK(blocks[0].ops.size() == 15);
  CHECK(w.op(blocks[1].ops.front()).name == "h.1.ln_1");
}

TEST_CASE("blocks by structure: the imported ResNet-50's 16 bottlenecks, each with its last ReLU",
          "[search][todays][blocks]") {
  // No op name has a module path ("conv2d_1"), so the forward is cut where one tensor alone is
  // live: after each bottleneck's add and after its ReLU. The stem's four ops are one op each
  // between cuts (no block); each bottleneck is 3 x (conv, bn) + 2 ReLU + add = 9 ops, 11 with
  // the projection shortcut of the first block of each stage, and its final ReLU joins it.
  const Workload w = read_trace(source_path("traces/resnet50_b32_v100.json"));
  const std::vector<Block> blocks = checkpoint_blocks(NetworkView(w));
  REQUIRE(blocks.size() == 16);
  for (std::size_t b = 0; b < blocks.size(); ++b) {
    CAPTURE(b);
    const bool projection = b == 0 || b == 3 || b == 7 || b == 13;
    CHECK(blocks[b].ops.size() == (projection ? 12U : 10U));
    CHECK(w.op(blocks[b].ops.back()).layer == Layer::kRelu);
    CHECK(w.op(blocks[b].ops[blocks[b].ops.size() - 2]).layer == Layer::kAdd);
  }
  CHECK(w.op(blocks[0].ops.front()).name == "conv2d_2");
}

TEST_CASE("full-ac recomputes what each block writes but the maps read outside it",
          "[search][todays][full-ac]") {
  const Workload w = gpt(2);
  const auto d = run("full-ac", w);
  // Kept: the embedding's dropout output and mask (in no block), each block's output (read by
  // the next block's ln_1 backward, or ln_f's), ln_f's maps and the loss's probabilities. The
  // resid_dropout and MLP dropout outputs are no maps (an add saves nothing); their masks are.
  CHECK(maps_with(w, d.plan, Action::kKeep) ==
        "drop drop.mask h.0.residual2 h.1.residual2 ln_f ln_f.mean ln_f.rstd loss.probs ");
  std::string recomputed;
  for (int l = 0; l < 2; ++l) {
    const std::string p = "h." + std::to_string(l);
    for (const char* m : {".ln_1", ".ln_1.mean", ".ln_1.rstd", ".attn.c_attn", ".attn.softmax",
                          ".attn.attn_dropout", ".attn.attn_dropout.mask", ".attn.context",
                          ".attn.resid_dropout.mask", ".residual1", ".ln_2", ".ln_2.mean",
                          ".ln_2.rstd", ".mlp.c_fc", ".mlp.act", ".mlp.dropout.mask"}) {
      recomputed += p + m + " ";
    }
  }
  CHECK(maps_with(w, d.plan, Action::kRecompute) == recomputed);
}

TEST_CASE("selective-ac-layer checkpoints the second block, torchtitan's count from 1",
          "[search][todays][full-ac]") {
  const Workload w = gpt(2);
  const Plan full = run("full-ac", w).plan;
  const Plan layer = run("selective-ac-layer", w).plan;
  for (std::size_t m = 0; m < full.decisions.size(); ++m) {
    const std::string& name = w.tensor(full.decisions[m].tensor).name;
    CAPTURE(name);
    const bool second = name.rfind("h.1.", 0) == 0;
    CHECK(layer.decisions[m].action == (second ? full.decisions[m].action : Action::kKeep));
  }
}

TEST_CASE("selective-ac keeps the first and third matmul of a block, recomputes the rest",
          "[search][todays][selective-ac]") {
  const Workload w = gpt(1);
  const auto d = run("selective-ac", w);
  // The block's linear layers in forward order: c_attn (1st, saved), attn.c_proj (2nd), c_fc
  // (3rd, saved), mlp.c_proj (4th); the c_proj outputs are no maps (dropout saves its mask). The
  // attention products are bmm, not on torchtitan's list: recomputed with everything else.
  CHECK(maps_with(w, d.plan, Action::kKeep) ==
        "drop drop.mask h.0.attn.c_attn h.0.mlp.c_fc h.0.residual2 ln_f ln_f.mean ln_f.rstd "
        "loss.probs ");
}

TEST_CASE("megatron-selective recomputes the core attention between the scores and context",
          "[search][todays][megatron]") {
  const Workload w = gpt(1);
  const auto d = run("megatron-selective", w);
  // scores -> softmax -> attn_dropout -> context: softmax's output and the dropout's output and
  // mask are maps (the scores' output is read by softmax alone, which saves its own output); the
  // context's output stays (c_proj saves it).
  CHECK(maps_with(w, d.plan, Action::kRecompute) ==
        "h.0.attn.softmax h.0.attn.attn_dropout h.0.attn.attn_dropout.mask ");
}

TEST_CASE("offload-activations swaps every map of 1 KiB or more, fetched when backward reads it",
          "[search][todays][offload]") {
  const Workload w = gpt(1);
  const NetworkView view(w);
  const auto d = run("offload-activations", w);
  // Kept: the layer norms' statistics (16 floats, 64 B) and the attention dropout's mask (2 heads
  // x 16 x 16 bools, 512 B): under torchtune's 1,024-byte threshold; and the loss's
  // probabilities, still in the forward stash when backward's first node, the loss's, reads them.
  CHECK(maps_with(w, d.plan, Action::kKeep) ==
        "h.0.ln_1.mean h.0.ln_1.rstd h.0.attn.attn_dropout.mask h.0.ln_2.mean h.0.ln_2.rstd "
        "ln_f.mean ln_f.rstd loss.probs ");
  std::size_t swapped = 0;
  for (std::size_t m = 0; m < d.plan.decisions.size(); ++m) {
    const Decision& dec = d.plan.decisions[m];
    if (dec.action != Action::kSwap) continue;
    ++swapped;
    const FeatureMap& map = view.feature_maps()[m];
    CAPTURE(w.tensor(dec.tensor).name);
    CHECK(dec.prefetch_before == map.backward_uses.front());  // on demand: no prefetch ahead
    CHECK(dec.release_before > last_forward_use(map, w));
    CHECK(dec.release_before <= dec.prefetch_before);
  }
  CHECK(swapped == 15);
}

TEST_CASE("offload-activations: torchtune's stash counts every save, parameters too",
          "[search][todays][offload]") {
  // f1..f6 each read the previous map and two parameters (W_i, then U_i: a weight and a bias),
  // all three saved for backward before the op runs, in autograd's order by argument name: the
  // bias, the data, the weight; the loss saves a6. Saves in pack order:
  //   f1: U1 a0 W1 (#0-2), f2: a1 #4, f3: a2 #7, f4: a3 #10, f5: a4 #13, f6: a5 #16, loss: a6 #18.
  // Before copying save #n the stash drops saves #n-5 and older: a0 at #7 (before f3), a1 at #10
  // (before f4), a2 at #13 (before f5), a3 at #16 (before f6), a4 at #18 (before the loss). a5 and
  // a6 are stashed when forward ends; the loss's backward, the first node to read an offloaded
  // save, reads a6 from the stash (kept) and empties it when done: a5 goes before f6's backward.
  // Counting swapped maps alone, as if parameters were not saved, a0 would go only before f5.
  WorkloadBuilder b;
  std::vector<TensorId> w_params;
  std::vector<TensorId> u_params;
  for (int i = 1; i <= 6; ++i) {
    w_params.push_back(b.parameter(fmt::format("W{}", i), 4096));
    u_params.push_back(b.parameter(fmt::format("U{}", i), 4096));
  }
  const TensorId x = b.input("x", 512);
  std::vector<TensorId> a{b.forward("f0", {x}, 2048, 10)};
  std::vector<OpId> f{b.last_op()};
  for (std::size_t i = 1; i <= 6; ++i) {
    a.push_back(
        b.forward(fmt::format("f{}", i), {a[i - 1], w_params[i - 1], u_params[i - 1]}, 2048, 10));
    f.push_back(b.last_op());
  }
  b.forward("loss", {a[6]}, 4, 10);
  const OpId loss = b.last_op();
  const auto differentiates = [&](OpId forward_op) {
    b.workload().ops[index(b.last_op())].differentiates = forward_op;
  };
  TensorId g = b.backward("loss.backward", {a[6]}, 2048, 10);
  differentiates(loss);
  std::vector<OpId> backward_of(7, kNoOp);
  for (std::size_t i = 6; i >= 1; --i) {
    g = b.backward(fmt::format("f{}.backward", i), {g, a[i - 1], w_params[i - 1], u_params[i - 1]},
                   2048, 10);
    differentiates(f[i]);
    backward_of[i] = b.last_op();
  }
  const Workload w = b.build();
  const auto d = run("offload-activations", w);
  const auto decision = [&](std::size_t i) {
    for (const Decision& dec : d.plan.decisions) {
      if (dec.tensor == a[i]) return dec;
    }
    FAIL("a" << i << " is not a feature map");
    return Decision{};
  };
  const std::vector<OpId> released{f[3], f[4], f[5], f[6], loss, backward_of[6]};
  for (std::size_t i = 0; i < released.size(); ++i) {
    CAPTURE(i);
    const Decision dec = decision(i);
    CHECK(dec.action == Action::kSwap);
    CHECK(dec.release_before == released[i]);
    CHECK(dec.prefetch_before == backward_of[i + 1]);
  }
  CHECK(decision(6).action == Action::kKeep);
}

TEST_CASE("the budget partitioner's cuts and knapsack at 1, 0.7, 0.5, 0.3 and 0 on a GPT layer",
          "[search][todays][partitioner]") {
  const Workload w = gpt(1);
  const NetworkView view(w);
  // Sequence 16, hidden 64, 2 heads, vocabulary 100, batch 1, float32. The maps, by what the
  // partitioner may do with their producers (Note [The memory-budget partitioner in a plan]):
  //   random (dropout): drop 4,096, its mask 1,024, attn_dropout 2,048 and mask 512, the
  //     resid_dropout and MLP dropout masks 1,024 each: 9,728;
  //   reductions' small outputs: the three layer norms' mean and rstd, 64 each: 384;
  //   compute-intensive: c_attn 16x192x4 = 12,288, context 16x64x4 = 4,096, c_fc 16x256x4 =
  //     16,384: 32,768;
  //   others: ln_1, ln_2, ln_f 4,096 each, softmax 2x16x16x4 = 2,048, loss.probs 16x100x4 =
  //     6,400: 20,736;
  //   pointwise: residual1 and residual2 4,096 each, the GELU's 16,384: 24,576.
  // Budget 1 keeps all 88,192 bytes (eager's set); budget 0 nothing (every map regenerates from
  // the tokens and the parameters). Saved sizes count the step's inputs: the tokens, positions and
  // labels (128 each) and the parameters, 230,528 bytes in all (the least); backward reads all
  // but wpe (4,096) and the seven biases (3,072), so budget 1 saves 88,192 + 223,360 = 311,552
  // and a budget b allows b of the 81,024 between.
  const auto bytes = [&](const char* name) {
    for (std::size_t m = 0; m < view.feature_maps().size(); ++m) {
      if (w.tensor(view.feature_maps()[m].tensor).name == name) {
        return view.map_bytes(static_cast<int>(m));
      }
    }
    return Bytes{0};
  };
  REQUIRE(bytes("h.0.attn.c_attn") == 12288);
  REQUIRE(bytes("h.0.attn.context") == 4096);
  REQUIRE(bytes("h.0.mlp.c_fc") == 16384);
  REQUIRE(bytes("h.0.mlp.act") == 16384);
  REQUIRE(bytes("loss.probs") == 6400);
  REQUIRE(bytes("drop.mask") == 1024);
  REQUIRE(bytes("h.0.attn.attn_dropout.mask") == 512);
  const Plan all = partitioner_plan(view, 1.0);
  CHECK(maps_with(w, all, Action::kRecompute).empty());
  CHECK(maps_with(w, partitioner_plan(view, 0.0), Action::kKeep).empty());
  const auto kept = [&](double budget) {
    return maps_with(w, partitioner_plan(view, budget), Action::kKeep);
  };
  const std::string banned =
      "drop drop.mask h.0.ln_1.mean h.0.ln_1.rstd h.0.attn.attn_dropout "
      "h.0.attn.attn_dropout.mask h.0.attn.resid_dropout.mask h.0.ln_2.mean h.0.ln_2.rstd "
      "h.0.mlp.dropout.mask ln_f.mean ln_f.rstd ";
  const auto with_banned = [&](const std::string& items) {
    // In tensor order: the banned maps and the knapsack's saved items interleave.
    std::string out;
    for (const Decision& d : all.decisions) {
      const std::string& name = w.tensor(d.tensor).name;
      if (banned.find(name + " ") != std::string::npos ||
          items.find(name + " ") != std::string::npos) {
        out += name + " ";
      }
    }
    return out;
  };
  // Recomputing the pointwise maps leaves 63,616 bytes of maps; regenerating the residuals re-runs
  // the two c_proj (their outputs are no map), which read their biases (256 each): 63,616 +
  // 223,360 + 512 - 230,528 = 56,960, 0.703 of 81,024: not under 0.7. Recomputing the others
  // too leaves 42,880 and re-runs the layer norms, which read their biases (768 more): 36,992,
  // 0.457: under 0.7 and 0.5, so both keep the banned maps and the three compute-intensive ones.
  CHECK(kept(0.7) == with_banned("h.0.attn.c_attn h.0.attn.context h.0.mlp.c_fc "));
  CHECK(kept(0.5) == kept(0.7));
  // 0.3: the knapsack over the banned maps and the compute-intensive ones, largest first, weights
  // in 1/10,000 of 81,024: c_fc 2,022, c_attn 1,517, drop and context 506, attn_dropout 253, the
  // drop, resid_dropout and MLP dropout masks 126 each, attn_dropout's 63, the six statistics 8
  // each; capacity 3,000. Values, the FLOPs (2 per multiply-add): c_fc 2x16x64x256 = 524,288,
  // c_attn 393,216, context 2x2x16x16x32 = 32,768 (the zoo's counts, checked below); the random
  // and reduction maps 1 each. c_fc + c_attn weighs 3,539, too much; c_fc + context (2,528) is
  // worth the most, and the 472 left hold at most nine of the items worth 1: the six statistics
  // (48) and three of the 126s and the 63 (426 or 363). Backtracking from the last item, the 63
  // is not taken (the three 126s make nine without it), the 126s are. c_attn, drop,
  // attn_dropout and its mask are recomputed.
  CHECK(kept(0.3) ==
        "drop.mask h.0.ln_1.mean h.0.ln_1.rstd h.0.attn.context "
        "h.0.attn.resid_dropout.mask h.0.ln_2.mean h.0.ln_2.rstd h.0.mlp.c_fc "
        "h.0.mlp.dropout.mask ln_f.mean ln_f.rstd ");
  const auto flops = [&](const char* op_name) {
    for (const Op& op : w.ops) {
      if (op.name == op_name) return op.flops.value_or(0);
    }
    return 0.0;
  };
  CHECK(flops("h.0.mlp.c_fc") >= 524288);
  CHECK(flops("h.0.attn.c_attn") >= 393216);
  CHECK(flops("h.0.attn.c_attn") < flops("h.0.mlp.c_fc"));
  CHECK(flops("h.0.attn.context") < flops("h.0.attn.c_attn") / 4);
}

TEST_CASE("the budget partitioner measures saved sizes with the step's inputs, as PyTorch does",
          "[search][todays][partitioner]") {
  // An MLP head whose first weight backward never reads (no gradient for the batch): PyTorch's
  // least saved size is every input, so the inputs budget 1's cut does not save lower the ratio
  // of every cut (Note [The memory-budget partitioner in a plan]).
  WorkloadBuilder b;
  const TensorId x = b.input("x", 1000);
  const TensorId w1 = b.parameter("w1", 1500);
  const TensorId w2 = b.parameter("w2", 2000);
  const TensorId h1 = b.forward("fc1", {x, w1}, 2000, 100, "linear");
  const TensorId a1 = b.forward("act", {h1}, 2000, 10, "relu");
  const TensorId h2 = b.forward("fc2", {a1, w2}, 400, 100, "linear");
  const TensorId loss = b.forward("loss", {h2}, 4, 10, "cross_entropy");
  const TensorId g_loss = b.backward("loss.backward", {loss, h2}, 400, 10);
  const TensorId g_a1 = b.backward("fc2.backward", {g_loss, a1, w2}, 2000, 100);
  const TensorId g_h1 = b.backward("act.backward", {g_a1, h1}, 2000, 10);
  b.backward("fc1.backward", {g_h1, x}, 1500, 100);
  // FLOPs from the shapes: fc1 2 x 10x50 x 25 = 25,000, fc2 2 x 10x10 x 50 = 10,000.
  b.workload().tensors[static_cast<std::size_t>(x)].shape = {10, 25};
  b.workload().tensors[static_cast<std::size_t>(h1)].shape = {10, 50};
  b.workload().tensors[static_cast<std::size_t>(a1)].shape = {10, 50};
  b.workload().tensors[static_cast<std::size_t>(h2)].shape = {10, 10};
  const Workload w = b.build();
  const NetworkView view(w);
  const auto kept = [&](double budget) {
    return maps_with(w, partitioner_plan(view, budget), Action::kKeep);
  };
  // Maps: fc1_out 2,000 and fc2_out 400 (compute-intensive), act_out 2,000 (pointwise), loss_out
  // 4 (a reduction: 4 x 4 < 400). Inputs: x 1,000, w1 1,500, w2 2,000; the least size 4,500.
  // Budget 1 saves the maps (4,404) and the inputs backward reads (x, w2): 7,404. The range is
  // 7,404 - 4,500 = 2,904 (the maps alone would make it 4,404).
  // Recomputing act_out re-runs act, which reads no input: 2,404 + 3,000 = 5,404, a ratio of
  // 904 / 2,904 = 0.3113 (with the maps alone 2,404 / 4,404 = 0.546, not under 0.5).
  CHECK(kept(0.5) == "fc1_out fc2_out loss_out ");
  CHECK(kept(0.32) == kept(0.5));
  // At 0.31 not under: no other maps to recompute, so the knapsack. Items, largest first, in
  // 1/10,000 of 2,904: fc1_out 6,887, fc2_out 1,377, loss_out 14 (worth 25,000, 10,000, 1).
  // Capacity 3,100: fc1_out does not fit, the other two do.
  CHECK(kept(0.31) == "fc2_out loss_out ");
  // Capacity 1,000: only loss_out, a knapsack item like the matmuls (with the maps alone fc2_out
  // weighs 908 and fits, and the reduction is no item).
  CHECK(kept(0.1) == "loss_out ");
  CHECK(kept(0.0).empty());
  CHECK(kept(1.0) == "fc1_out act_out fc2_out loss_out ");
}

TEST_CASE("the budget partitioner counts budget 1's size as PyTorch's decomposed graph holds it",
          "[search][todays][partitioner]") {
  // conv -> relu -> max-pool -> linear -> loss. Eager saves the ReLU's output (the max-pool's and
  // the ReLU's backward read it) and the max-pool's int64 indices; AOTAutograd's max-pool saves
  // int8 offsets and its backward does not read its input, so PyTorch's cut holds the ReLU's
  // output as a bool mask: one byte an element for both (Note [The memory-budget partitioner in
  // a plan]). That size normalises the ladder's ratios.
  WorkloadBuilder b;
  const TensorId x = b.input("x", 4096);
  const TensorId wc = b.parameter("wc", 1000);
  const TensorId wf = b.parameter("wf", 2000);
  const TensorId c = b.forward("conv", {x, wc}, 8192, 100, "conv2d");
  const OpId conv = b.last_op();
  const TensorId r = b.forward("relu", {c}, 8192, 10, "relu");
  const OpId relu = b.last_op();
  const OpId pool =
      b.op("pool", "max_pool2d", Phase::kForward, {r}, {{"p", 2048}, {"idx", 4096}}, 10);
  const TensorId p = b.workload().ops[static_cast<std::size_t>(pool)].outputs[0];
  const TensorId idx = b.workload().ops[static_cast<std::size_t>(pool)].outputs[1];
  const TensorId h = b.forward("fc", {p, wf}, 400, 100, "linear");
  const OpId fc = b.last_op();
  const TensorId loss = b.forward("loss", {h}, 4, 10, "cross_entropy");
  const OpId loss_op = b.last_op();
  const auto differentiates = [&](OpId forward) {
    b.workload().ops.back().differentiates = forward;
  };
  const TensorId g_h = b.backward("loss.backward", {loss, h}, 400, 10);
  differentiates(loss_op);
  const TensorId g_p = b.backward("fc.backward", {g_h, p, wf}, 2048, 100);
  differentiates(fc);
  const TensorId g_r = b.backward("pool.backward", {g_p, r, idx}, 8192, 10);
  differentiates(pool);
  const TensorId g_c = b.backward("relu.backward", {g_r, r}, 8192, 10);
  differentiates(relu);
  b.backward("conv.backward", {g_c, x, wc}, 1000, 100);
  differentiates(conv);
  auto& tensors = b.workload().tensors;
  tensors[static_cast<std::size_t>(c)].shape = {1, 8, 16, 16};  // 2,048 elements
  tensors[static_cast<std::size_t>(r)].shape = {1, 8, 16, 16};
  tensors[static_cast<std::size_t>(p)].shape = {1, 8, 8, 8};  // 512 elements
  tensors[static_cast<std::size_t>(idx)].shape = {1, 8, 8, 8};
  b.workload().ops[static_cast<std::size_t>(conv)].flops = 1000;
  b.workload().ops[static_cast<std::size_t>(fc)].flops = 500;
  const Workload w = b.build();
  const NetworkView view(w);
  const auto kept = [&](double budget) {
    return maps_with(w, partitioner_plan(view, budget), Action::kKeep);
  };
  // Maps: relu_out 8,192 (pointwise), p 2,048 and idx 4,096 (the max-pool's: neither is 4x
  // smaller than its input, so others), fc_out 400 (compute-intensive), loss_out 4 (a
  // reduction). The inputs (x, wc, wf: 7,096) are all read by backward, so they cancel out.
  // Counted as PyTorch's graph holds them: relu_out 2,048 (a mask), idx 512 (offsets), the
  // others whole: budget 1's range is 5,012 bytes (eager's would be 14,740). Recomputing the
  // pointwise relu_out leaves 2,048 + 512 + 400 + 4 = 2,964, a ratio of 0.591 (eager's bytes:
  // 6,548 / 14,740 = 0.444, under 0.5). Recomputing the others too leaves 404, 0.081.
  CHECK(kept(1.0) == "relu_out p idx fc_out loss_out ");
  CHECK(kept(0.6) == "p idx fc_out loss_out ");
  CHECK(kept(0.5) == "fc_out loss_out ");
  CHECK(kept(0.1) == "fc_out loss_out ");
}

TEST_CASE("the budget partitioner's knapsack values matmuls by FLOPs worked out from shapes",
          "[search][todays][partitioner]") {
  // Two matmuls of one size: the longer one does fewer FLOPs. PyTorch's estimate is
  // FlopCounterMode's count, not a time.
  WorkloadBuilder b;
  const TensorId x = b.input("x", 512);
  const TensorId w1 = b.parameter("w1", 1024);
  const TensorId w2 = b.parameter("w2", 1024);
  const TensorId a = b.forward("fa", {x, w1}, 2048, 900, "linear");
  const TensorId c = b.forward("fb", {a, w2}, 2048, 100, "linear");
  const TensorId r = b.forward("act", {c}, 2048, 10, "relu");
  b.forward("loss", {r}, 4, 10, "cross_entropy");
  const TensorId g_r = b.backward("loss.backward", {r}, 2048, 10);
  const TensorId g_c = b.backward("act.backward", {g_r, c}, 2048, 10);
  const TensorId g_a = b.backward("fb.backward", {g_c, a, w2}, 2048, 100);
  b.backward("fa.backward", {g_a, x, w1}, 1024, 100);
  b.workload().tensors[static_cast<std::size_t>(x)].shape = {8, 16};
  b.workload().tensors[static_cast<std::size_t>(a)].shape = {8, 64};
  b.workload().tensors[static_cast<std::size_t>(c)].shape = {8, 64};
  const Workload w = b.build();
  const NetworkView view(w);
  // Every input is read by backward: the range is the maps' 6,144 bytes. Recomputing act_out
  // leaves 4,096, 0.667: not under 0.5; nothing else to recompute; the knapsack over fa_out and
  // fb_out, 3,333 each, capacity 5,000: one fits. fa: 2 x 8x64 x 16 = 16,384 FLOPs (x's rows
  // are the output's, 16 long); fb: 2 x 8x64 x 64 = 65,536. fb_out is saved, though fa runs 9x
  // longer (by duration, fa_out would be).
  CHECK(maps_with(w, partitioner_plan(view, 0.5), Action::kKeep) == "fb_out ");
  // The trace's own count wins over the shapes'.
  Workload counted = w;
  for (Op& op : counted.ops) {
    if (op.name == "fa") op.flops = 1e6;
  }
  CHECK(maps_with(counted, partitioner_plan(NetworkView(counted), 0.5), Action::kKeep) ==
        "fa_out ");
  // With a matmul's FLOPs unknown (no shapes), durations value every matmul.
  Workload timed = w;
  for (Tensor& t : timed.tensors) t.shape.clear();
  CHECK(maps_with(timed, partitioner_plan(NetworkView(timed), 0.5), Action::kKeep) == "fa_out ");
}

TEST_CASE("budget-partitioner in compare takes the largest budget in tenths whose plan fits",
          "[search][todays][partitioner]") {
  const Workload w = gpt(2, 256);  // activations weigh more than the parameters and state
  const NetworkView view(w);
  const Machine roomy = test_machine(Bytes{1} << 40);
  Evaluator evaluator(w, roomy);
  CHECK(decide_budget_partitioner(evaluator, view).note == "activation_memory_budget 1.0");
  // A device between the peak of the largest budget below 1 whose plan needs less than budget
  // 1's and budget 1's (the peak is not monotone in the budget: recomputing everything makes long
  // regeneration chains in backward).
  std::vector<Bytes> peak;
  for (int t = 0; t <= 10; ++t) {
    peak.push_back(
        simulate(w, partitioner_plan(view, t / 10.0), roomy).timeline.peak_reserved_bytes);
  }
  INFO(fmt::format("peaks {}", fmt::join(peak, " ")));
  int below = 9;
  while (below >= 0 && peak[static_cast<std::size_t>(below)] >= peak[10]) --below;
  REQUIRE(below >= 0);
  // Halfway between that peak and budget 1's, so that the arena's fragmentation has room.
  const Machine tight = test_machine((peak[static_cast<std::size_t>(below)] + peak[10]) / 2);
  Evaluator evaluator_tight(w, tight);
  const auto d = decide_budget_partitioner(evaluator_tight, view);
  // The policy's answer fits, and every larger budget in tenths does not.
  int chosen = -1;
  for (int t = 0; t <= 10; ++t) {
    if (d.note == fmt::format("activation_memory_budget {:.1f}", t / 10.0)) chosen = t;
  }
  REQUIRE(chosen >= 0);
  REQUIRE(chosen < 10);
  CHECK(d.plan.decisions == partitioner_plan(view, chosen / 10.0).decisions);
  INFO(d.note);
  CHECK(simulate(w, d.plan, tight).timeline.feasible);
  for (int t = chosen + 1; t <= 10; ++t) {
    CAPTURE(t);
    CHECK_FALSE(simulate(w, partitioner_plan(view, t / 10.0), tight).timeline.feasible);
  }
}
