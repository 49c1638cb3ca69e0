// Golden test (issue 35): the zoo's GPT at GPT-2 XL's shape (1.56 B parameters), Adam, bf16
// autocast, FSDP over 8 H100 80 GB — each rank's simulated peak worked out by hand from the
// model's shapes before it is asserted, to the byte, under FSDP's two standard settings. As in
// tests/scenario/golden_timelines_test.cpp, every expected number is derived in the comments
// first; none is copied from the program's output.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <catch2/catch.hpp>

#include "core/basic_plans.hpp"
#include "core/interconnect.hpp"
#include "core/machine.hpp"
#include "sim/simulation.hpp"
#include "zoo/data_parallel.hpp"
#include "zoo/zoo.hpp"

using memplan::sim::Bytes;
using memplan::sim::InstrKind;
using memplan::sim::OpId;
using memplan::sim::Program;
using memplan::sim::StreamId;
using memplan::sim::TensorKind;
using memplan::sim::Workload;
using memplan::zoo::DataParallel;

namespace {

// GPT-2 XL's shape, batch 8 × 1024 per GPU (bench/fsdp-search.sh's job).
constexpr std::int64_t kBatch = 8, kSeq = 1024, kHidden = 1600, kHeads = 25, kVocab = 50257;
constexpr std::int64_t kLayers = 48, kRanks = 8;

// One rank's step of the job (`memplan zoo gpt --layers 48 --hidden 1600 --heads 25 --seq 1024
// --vocab 50257 --batch 8 --device h100-80gb --optimizer adam --precision bf16 --fsdp 8
// [--fsdp-strategy shard-grad-op]`): the fused attention (bf16's default) and the fused GELU.
Workload xl_rank(DataParallel::Strategy strategy) {
  memplan::zoo::ZooRequest request;
  request.model = "gpt";
  request.device = "h100-80gb";
  request.options.batch = kBatch;
  request.options.transformer.layers = kLayers;
  request.options.transformer.hidden = kHidden;
  request.options.transformer.heads = kHeads;
  request.options.transformer.sequence = kSeq;
  request.options.transformer.vocab = kVocab;
  request.options.optimizer = memplan::zoo::Optimizer::kAdam;
  request.options.precision = memplan::zoo::Precision::kBf16;
  DataParallel dp;
  dp.strategy = strategy;
  dp.world_size = kRanks;
  dp.prefetch = 1;
  const auto net = memplan::sim::make_interconnect("nvlink4", {}, kRanks);
  auto job = memplan::zoo::data_parallel_job(memplan::zoo::make_workload(request), dp, net);
  return std::move(job.ranks.front());
}

// The simulated peak and what is live at it. Every allocation and free is an instruction of the
// compute stream, in the one order the engine applies them (core/program.hpp), so walking that
// stream gives the engine's live bytes: the highest point is reached by an allocation for `op`.
struct PeakParts {
  Bytes total = 0;
  OpId op = memplan::sim::kNoOp;
  Bytes persistent = 0;  // parameters and optimizer state: the shards
  Bytes gathered = 0;    // the units' gathered flat parameters
  int gathered_units = 0;
  Bytes inputs = 0;
  Bytes gradients = 0;  // gradients of activations and parameters, full or sharded
  Bytes other = 0;      // activations, workspace
};

// The highest live bytes over the compute stream's instructions from the first of op `from` to
// the first of op `to` (the whole step when not given), and what is live there.
PeakParts highest(const Workload& w, const Program& program, std::string_view from = {},
                  std::string_view to = {}) {
  const auto& stream = program.streams[static_cast<std::size_t>(StreamId::kCompute)];
  const auto named = [&](const memplan::sim::Instruction& in, std::string_view name) {
    return in.op != memplan::sim::kNoOp && w.op(in.op).name == name;
  };
  std::size_t at = 0;
  Bytes live = 0, best = -1;
  bool inside = from.empty();
  for (std::size_t i = 0; i < stream.size(); ++i) {
    const auto& in = stream[i];
    inside = (inside || named(in, from)) && (to.empty() || !named(in, to));
    if (in.kind != InstrKind::kAlloc && in.kind != InstrKind::kFree) continue;
    const Bytes bytes = program.buffers[index(in.buffer)].bytes;
    live += in.kind == InstrKind::kAlloc ? bytes : -bytes;
    if (inside && live > best) {
      best = live;
      at = i;
    }
  }
  REQUIRE(best >= 0);
  std::vector<char> held(program.buffers.size(), 0);
  for (std::size_t i = 0; i <= at; ++i) {
    const auto& in = stream[i];
    if (in.kind == InstrKind::kAlloc) held[index(in.buffer)] = 1;
    if (in.kind == InstrKind::kFree) held[index(in.buffer)] = 0;
  }
  PeakParts parts;
  parts.total = best;
  parts.op = stream[at].op;
  for (std::size_t b = 0; b < held.size(); ++b) {
    if (held[b] == 0) continue;
    const auto& buffer = program.buffers[b];
    const bool tensor = buffer.tensor != memplan::sim::kNoTensor;
    const std::string name = tensor ? w.tensor(buffer.tensor).name : "";
    if (memplan::sim::is_persistent(buffer.kind)) {
      parts.persistent += buffer.bytes;
    } else if (name.ends_with("flat_param (gathered)")) {
      parts.gathered += buffer.bytes;
      ++parts.gathered_units;
    } else if (buffer.kind == TensorKind::kInput) {
      parts.inputs += buffer.bytes;
    } else if (buffer.kind == TensorKind::kGradient) {
      parts.gradients += buffer.bytes;
    } else {
      parts.other += buffer.bytes;
    }
  }
  return parts;
}

}  // namespace

TEST_CASE("GPT-2 XL's shape with Adam in bf16 under fsdp over 8 H100s: each rank's peak by hand",
          "[zoo][data_parallel][golden]") {
  // Shapes: B = 8, S = 1024, T = B·S = 8,192 tokens, H = 1600, a = 25 heads (d = 64), V = 50,257,
  // L = 48 blocks, MLP 4H = 6,400. TH = 13,107,200; TV = 411,705,344.
  static_assert(kBatch * kSeq * kHidden == 13'107'200 && kBatch * kSeq * kVocab == 411'705'344);
  //
  // Parameters (float32 under autocast: Note [Training precision]). A block: ln_1 2H, c_attn
  // 3H² + 3H, attn.c_proj H² + H, ln_2 2H, c_fc 4H² + 4H, mlp.c_proj 4H² + H = 12H² + 13H =
  // 30,740,800, 122,963,200 B. The root unit (fsdp_unit ""): wte V·H 80,411,200 (tied to the LM
  // head), wpe S·H 1,638,400, ln_f 2H 3,200 = 82,052,800, 328,211,200 B. 48 × 30,740,800 +
  // 82,052,800 = 1,557,611,200 (docs/zoo.md's count).
  //
  // (1) The shards (Note [Data-parallel steps]): each unit's flat parameter cut in 8 (both sizes
  // divide: no padding), a block's 15,370,400 B, the root's 41,026,400 B; 48 × 15,370,400 +
  // 41,026,400 = 778,805,600 B of parameters, as much of each of Adam's exp_avg and exp_avg_sq
  // (float32, the parameters' shape): 3 × 778,805,600 = 2,336,416,800 B, held throughout. The
  // gradients' shards come from the reduce-scatters in backward: none at the peak below.
  constexpr Bytes kShards = 2'336'416'800;
  //
  // (2) Inputs: tokens, positions and labels, int64 [B, S]: 3 × 8 × 8,192 = 196,608 B (the
  // labels until the loss's backward, the others until the embeddings' backward).
  constexpr Bytes kInputs = 196'608;
  //
  // (3) Activations saved for backward (Note [Saved tensors], autocast's dtypes). Before the
  // blocks: the embedding dropout's bool mask, TH = 13,107,200 B (the lookups' outputs and
  // their sum are read by nobody in backward; the dropout's output is block 0's input).
  // A block l, per op:
  //   ln_1 (float32 op): its input h_l, float32 [T, H]        4TH = 52,428,800
  //                      mean and rstd, float32 [T] each      8T  =     65,536
  //   c_attn: its input cast to bf16 (…ln_1.to_bf16)          2TH = 26,214,400
  //           the weight's cached bf16 copy [3H, H]           6H² = 15,360,000
  //   sdpa (FlashAttention-2): the bf16 QKV buffer [T, 3H]    6TH = 78,643,200
  //           its bf16 output [T, H] (c_proj's input too)     2TH = 26,214,400
  //           the log-sum-exp, float32 [B, a, S]             4aT =    819,200
  //           the generator's seed and offset, 2 int64              16
  //   attn.c_proj: the weight's bf16 copy [H, H]              2H² =  5,120,000
  //   resid_dropout: its bool mask [T, H]                     TH  = 13,107,200
  //   residual1 (bf16 + float32 → float32): nothing
  //   ln_2: its input, residual1, float32                     4TH = 52,428,800
  //         mean and rstd                                     8T  =     65,536
  //   c_fc: its input cast to bf16                            2TH = 26,214,400
  //         the weight's bf16 copy [4H, H]                    8H² = 20,480,000
  //   GELU: its input, c_fc's bf16 output [T, 4H]             8TH =104,857,600
  //   mlp.c_proj: GELU's bf16 output [T, 4H]                  8TH =104,857,600
  //               the weight's bf16 copy [H, 4H]              8H² = 20,480,000
  //   mlp.dropout: its bool mask                              TH  = 13,107,200
  //   residual2: nothing (its output is h_{l+1}, the next ln's input)
  // = 38TH + 16T + 4aT + 16 + 24H² = 498,073,600 + 131,072 + 819,200 + 16 + 61,440,000
  // = 560,463,888 B a block (the biases' bf16 copies are read by their linear layer alone and
  // gone after it); 48 blocks: 26,902,266,624 B.
  // After the blocks: h_48 (ln_f's input) 4TH = 52,428,800, ln_f's mean and rstd 8T = 65,536,
  // its output cast to bf16 for the LM head 2TH = 26,214,400 and the tied wte's bf16 copy [V, H]
  // 2VH = 160,822,400 (the LM head's saved operands): 239,531,136 B.
  constexpr Bytes kBlock = 560'463'888;
  constexpr Bytes kSaved = 13'107'200 + kLayers * kBlock + 239'531'136;
  static_assert(kSaved == 27'154'904'960);
  //
  // (4) The loss. The LM head writes bf16 logits [T, V], 2TV = 823,410,688 B; the loss (a float32
  // op) reads them cast to float32, loss.lm_head.to_fp32, 4TV = 1,646,821,376 B (the bf16 logits,
  // read by the cast alone, are gone once it has run); the loss op writes the scalar loss (4 B)
  // and the float32 probabilities it saves, 4TV. At the loss op: 4TV + 4TV + 4 = 3,293,642,756 B.
  // No op has workspace here (the sdpa backward's FlashAttention workspace, B·a·1024·65·4 =
  // 53,248,000 B, comes in backward, far below this point).
  constexpr Bytes kLoss = 3'293'642'756;
  //
  // (5) Gathered parameters. The root's (328,211,200 B) is gathered before the embeddings and
  // never resharded (Note [FSDP's setting in a plan]): it is read again by ln_f's backward.
  // FULL_SHARD frees a block's gathered parameters after its last forward use (the bias cast of
  // its mlp.c_proj), and the backward prefetch issues block 47's gather again before the first
  // backward op of the unit before it in backward order — the root's, ln_f's backward — which
  // comes after the loss; so at the loss only the root is gathered. SHARD_GRAD_OP keeps every
  // block's: 48 × 122,963,200 = 5,902,233,600 B more.
  constexpr Bytes kRootGathered = 328'211'200;
  constexpr Bytes kBlocksGathered = kLayers * 122'963'200;
  //
  // The peak. Every later point is lower: the loss's backward frees the scalar (4 B) and holds
  // the probabilities with their float32 gradient (4TV + 4TV), 4 B below the loss op; then the
  // logits' gradients shrink (2TV at the LM head's backward) and each block's backward frees
  // 560 MB of activations against its 123 MB of float32 gradients. Every earlier point has less:
  // forward only adds saved activations, a unit's gather ahead of it (prefetch 1: 123 MB) being
  // far below the 3.3 GB of the loss.
  // FULL_SHARD: 2,336,416,800 + 196,608 + 27,154,904,960 + 3,293,642,756 + 328,211,200
  //           = 33,113,372,324 B (30.84 GiB, docs/zoo.md's figure for bench/fsdp-search.sh).
  // SHARD_GRAD_OP: + 5,902,233,600 = 39,015,605,924 B (36.34 GiB).
  // Both fit the H100's 80 GiB (85,899,345,920 B).
  const auto check = [&](DataParallel::Strategy strategy, Bytes gathered, int units) {
    const Workload w = xl_rank(strategy);
    const auto machine = memplan::sim::make_machine(w.device);
    CHECK(machine.memory_bytes == Bytes{80} << 30);
    const auto s = memplan::sim::simulate_plan(w, *memplan::sim::basic_plan("in-core", w), machine);
    REQUIRE(s.timeline.feasible);
    const PeakParts peak = highest(w, s.program);
    CHECK(w.op(peak.op).name == "loss");
    CHECK(peak.persistent == kShards);
    CHECK(peak.inputs == kInputs);
    CHECK(peak.gathered == gathered);
    CHECK(peak.gathered_units == units);
    CHECK(peak.gradients == 0);
    CHECK(peak.other == kSaved + kLoss);
    CHECK(peak.total == kShards + kInputs + kSaved + kLoss + gathered);
    CHECK(s.timeline.peak_bytes == peak.total);
    return s.timeline.peak_bytes;
  };
  CHECK(check(DataParallel::Strategy::kFullShard, kRootGathered, 1) == 33'113'372'324);
  CHECK(check(DataParallel::Strategy::kShardGradOp, kRootGathered + kBlocksGathered, 49) ==
        39'015'605'924);
}

TEST_CASE(
    "GPT-2 XL's shape under fsdp full-shard: a block's backward with its neighbours' gathers "
    "and reduce-scatter",
    "[zoo][data_parallel][golden]") {
  // The highest point of block 24's backward under FULL_SHARD, prefetch 1: how many units are
  // gathered and how many units' full gradients are held at once, worked out from the step's order
  // (shapes and names as in the test above; G = a block's flat parameter, 122,963,200 B, float32
  // like its gradients; G/8 = its shard, 15,370,400 B).
  //
  // Where the collectives go (Note [Data-parallel steps], Note [FSDP's setting in a plan]): a
  // block's backward reads its gathered parameters first at ln_2's backward (the linear layers'
  // backward read the bf16 weight copies saved in forward; the casts' backward read nothing from
  // forward), so block l is gathered again before block l+1's ln_2 backward (one unit ahead) and
  // freed after its own ln_1 backward, its last use. Block l's reduce-scatter follows ln_1's
  // backward, the last op writing one of its gradients; it reads the block's full float32
  // gradients, 4·(12H² + 13H) = G, and writes its shard G/8, kept for the update. A buffer a
  // collective read is freed once the compute stream joins the collective stream at or after it
  // (Lowerer::place_side_frees): in backward the compute stream waits for the gathers, at each
  // block's ln_2 backward, and, as FSDP2's post-backward does, the op after each reduce-scatter
  // waits for the reduce-scatter before it (Note [Data-parallel steps]). So block m's full
  // gradients go at the op after block m-1's reduce-scatter: the sum of h_m's two gradients.
  //
  // Live when block 24's backward starts (after block 25's last op, the sum of h_25's two
  // gradients):
  //   the shards of parameters and Adam's states                       2,336,416,800
  //   the gradients' shards of blocks 47…25: 23 × 15,370,400             353,519,200
  //   the root's gradients so far (its reduce-scatter comes after the embeddings' backward):
  //     g_wte from the tied LM head's weight copy, float32 [V, H] 4VH    321,644,800
  //     g_ln_f.weight and .bias, 4H each                                      12,800
  //   tokens and positions (the labels went with the loss's backward) 16T   131,072
  //   the embedding dropout's mask TH                                     13,107,200
  //   blocks 0…24's saved activations and weight copies, 25 × 560,463,888
  //                                                                   14,011,597,200
  //   h_25's gradient, float32 4TH                                        52,428,800
  //   block 25's full gradients, held by its reduce-scatter (until the op after block 24's;
  //     block 26's went at the op after block 25's, h_25's sum)                G  122,963,200
  //   block 24's gathered parameters (gathered before block 25's ln_2 backward; block 25's went
  //     after its ln_1 backward, block 23's comes before block 24's ln_2 backward)  G  122,963,200
  //   = 17,334,784,272 B.
  // Block 24's backward, op by op (+ allocated for the op's outputs, − freed after it; the root
  // and every other block untouched):
  //   cast of h_25's gradient to bf16 for the mlp.dropout branch  +2TH; h_25's gradient stays
  //     (residual1's share of it)                                            Δ = 2TH
  //   mlp.dropout backward: +2TH, −2TH (the cast) −TH (the mask)             Δ = TH (4TH during)
  //   mlp.c_proj backward: + GELU output's gradient bf16 [T, 4H] 8TH, the weight copy's gradient
  //     bf16 8H², the bias copy's 2H                          during it: Δ = 9TH + 8H² + 2H
  //     − the incoming gradient 2TH, GELU's output 8TH, the weight copy 8H²: Δ = −TH + 2H
  //   the bias's and the weight's casts backward: float32 gradients 4H, 16H² for the bf16 ones
  //     (2H, 8H²)                                    during: at most Δ = −TH + 16H² + 4H
  //   GELU backward: + 8TH                                   during: Δ = 7TH + 8H² + 4H,
  //     − 8TH (its incoming gradient) − 8TH (c_fc's output):  Δ = −9TH + 8H² + 4H
  //   c_fc backward: + its input's gradient 2TH, the copies' gradients 8H² + 8H
  //     during: Δ = −7TH + 16H² + 12H; − 8TH, the bf16 input 2TH, the copy 8H²
  //   and every later point is below where the block started (Δ < 0; TH is five times H²): the
  //   c_fc copies' casts backward (at most −17TH + 24H² + 20H), ln_2's input cast backward
  //   (−13TH + 16H² + 20H), block 23's gather before ln_2's backward (−15TH + 16H² + 20H + G),
  //   ln_2's backward
  //   (−11TH + 16H² + 28H), the attention's (sdpa's backward with FlashAttention's workspace
  //   B·a·1024·65·4 = 53,248,000: −16TH + 18H² + 32H − 8T + 53,248,000) and c_attn's, ln_1's,
  //   the reduce-scatter's shard G/8 (−34TH + 24H² + 52H − G + G/8 …).
  // The highest point: the mlp.c_proj backward, 17,334,784,272 + 9TH + 8H² + 2H
  //   = 17,334,784,272 + 117,964,800 + 20,480,000 + 3,200 = 17,473,232,272 B, with one unit
  //   gathered (block 24) and these gradients: the shards 353,519,200 + the root's 321,657,600 +
  //   block 25's 122,963,200 + h_25's 52,428,800 + mlp.dropout's backward's output 2TH
  //   26,214,400 + the op's outputs 8TH + 8H² + 2H 125,340,800 = 1,002,124,000 B; activations
  //   25 × 560,463,888 − block 24's mlp.dropout mask TH + the embedding's mask TH =
  //   14,011,597,200 B.
  const Workload w = xl_rank(DataParallel::Strategy::kFullShard);
  const auto s = memplan::sim::simulate_plan(w, *memplan::sim::basic_plan("in-core", w),
                                             memplan::sim::make_machine(w.device));
  REQUIRE(s.timeline.feasible);
  const PeakParts block = highest(w, s.program, "h.24.residual2_bwd.h.24.mlp.dropout.to_bf16",
                                  "h.23.residual2_bwd.h.23.mlp.dropout.to_bf16");
  CHECK(w.op(block.op).name == "h.24.mlp.c_proj_bwd");
  CHECK(block.persistent == 2'336'416'800);
  CHECK(block.inputs == 131'072);
  CHECK(block.gathered == 122'963'200);
  CHECK(block.gathered_units == 1);
  CHECK(block.gradients == 1'002'124'000);
  CHECK(block.other == 14'011'597'200);
  CHECK(block.total == 17'473'232'272);
}
