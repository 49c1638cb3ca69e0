#pragma once
// Plan: what to do with each feature map between its forward and backward uses — keep it on the
// device, swap it to host memory and prefetch it back, free it and recompute it, or keep an encoded
// copy (Gist) — plus, for swapped maps, the op before which the prefetch may start. A plan is
// bound to one workload by a fingerprint of its structure (ops, tensors and their links, not the
// durations: a re-recorded trace of the same network keeps its plans).
//
// Which maps may take which action (validate_plan):
//   keep, swap             any feature map.
//   recompute              a feature map whose producer chain bottoms out in pre-existing tensors:
//                          the producer is a forward op, and each of its inputs is pre-existing
//                          (the lowering keeps it resident while a regeneration may need it) or
//                          written by a forward op from such inputs, recursively. In a normal trace
//                          that is every feature map; a forward op reading a gradient breaks it.
//   encode:binarize        a ReLU output that a max-pool reads in forward (Gist, lossless).
//   encode:sparse          a ReLU output that a convolution reads in forward (Gist, lossless).
//   encode:fp16|fp10|fp8   any feature map (Gist delayed precision reduction, lossy).
//   (every encode)         only a float32 map (or one whose dtype the trace does not give):
//                          Gist's encodings pack or narrow 32-bit floats, and their sizes are
//                          fractions of a 32-bit map; max-pool indices (int64), masks (int32,
//                          bool) and half-precision maps take keep, swap or recompute only.
// Across maps: a map kept lossily (binarize, fp16, fp10, fp8) may not be read in forward by an op
// that regenerating a recomputed map re-runs (ops_rerun_by_recompute): that op would compute from
// decoded values, not the forward pass's.
// per_use (recompute only): the lowering forgets the regenerated map after each backward use.
// prefetch_before (swap only) must be an op after the map's last forward use and no later than its
// first backward use.
// release_before (swap only) must be an op after the map's last forward use and no later than its
// prefetch point (prefetch_before, or the default one).
//
// Note [Release point]
// ~~~~~~~~~~~~~~~~~~~~
// A swapped map's device copy can go only once its copy-out has read it. By default the plan frees
// it right after its last forward use, and the compute stream waits there for the copy-out: vDNN's
// per-layer synchronisation, which stalls compute for every copy-out that the last forward use does
// not hide. A stream-ordered allocator (PyTorch's caching allocator with record_stream, CUDA's
// cudaFreeAsync) lets compute go on and reuses the memory once the copy has finished. A plan
// models that with release_before: the free moves to just before that op (before its allocations),
// where compute waits for the copy-out only if it has not finished yet; until then the map holds
// its memory. The point is a plan variable, not the simulator's clock, so that every backend frees
// in the same order as the simulator (one order of allocations and frees, Note in core/program.hpp)
// and fitting does not depend on timing. A prefetch of the map issued before that op (a
// recomputation reading it) releases it first.
//
// Note [Host placement]
// ~~~~~~~~~~~~~~~~~~~~~
// Beyond feature maps, a plan may place other tensors on the host (Plan::host_tensors) and run the
// update on the host (Plan::host_update): ZeRO-Offload's and FSDP's CPU offload. A host-placed
// tensor's home is a host slot; the device holds a copy only around its uses:
//   parameter, optimizer state, input (pre-existing): the host slot holds it when the step starts
//     (and, for parameters and optimizer state, when it ends); the uses are split into groups of
//     consecutive uses in one phase (forward, backward, update), and each group gets a device copy
//     prefetched before an op of its window and freed after the group's last use. An update on the
//     device writes the copy back to the slot before freeing it. So a parameter is off the device
//     between its forward and backward uses, an input batch after its last forward use until
//     backward reads it.
//   gradient (read by an update op): copied to its slot as soon as it is written, its device copy
//     freed after its last use before the update, and at the earliest one op after its producer;
//     prefetched again (one group: its update uses) for an update on the device.
// A group's prefetch window runs from the op after the previous device copy was dropped (the
// previous group's last use; a gradient's drop point; op 0 for a pre-existing tensor's first
// group) to the group's first use: before that the device still holds the previous copy, after it
// the use would find no copy. The plan names a point in it (Plan::host_prefetches); by default the
// op before the first use, so that the copy overlaps one op, or the first use itself when the op
// before is outside the window. An earlier point hides more of the copy and holds the memory
// longer; the first use itself frees the memory the ops before it need (a batch of 3.45 GiB
// prefetched one op before its backward use sits beside that op's own 13.3 GiB).
// host_update: every update-phase op runs on the host stream (kHostRun) over host slots. Each
// gradient and optimizer state it reads must be host-placed; a parameter it reads that stays on
// the device gets a host master copy (a slot holding it from the start), and the updated value is
// copied into its device buffer after the update (ZeRO-Offload's flow).
// Host-resident slots of parameters and optimizer state are not device memory: the step's device
// peak at its start and end leaves them out.
#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/feature_maps.hpp"
#include "core/workload.hpp"

namespace memplan::sim {

enum class Action : std::uint8_t { kKeep, kSwap, kRecompute, kEncode };
inline constexpr int kActionCount = 4;
enum class Encoding : std::uint8_t { kNone, kBinarize, kSparse, kFp16, kFp10, kFp8 };

std::string_view to_string(Action action);
std::string_view to_string(Encoding encoding);
/// "keep", "swap", "recompute", "encode:fp16" ... as written in plan files.
std::string action_label(Action action, Encoding encoding);
/// Parses an action label; nullopt when it is not one.
std::optional<std::pair<Action, Encoding>> parse_action(std::string_view label);

/// Fraction of nonzero values assumed for sparse encoding when nothing better is known (Gist
/// reports ReLU outputs feeding convolutions are mostly above half zeros; 0.5 is conservative).
inline constexpr double kDefaultSparseDensity = 0.5;

/// The bits of one value of a narrow float (Gist's delayed precision reduction): a sign, then
/// exponent and mantissa bits. fp16 1/5/10 (IEEE half), fp10 1/5/4, fp8 1/4/3.
struct NarrowFormat {
  int exponent_bits;
  int mantissa_bits;
  [[nodiscard]] constexpr int bits() const { return 1 + exponent_bits + mantissa_bits; }
};
inline constexpr NarrowFormat kFp16Format{5, 10};
inline constexpr NarrowFormat kFp10Format{5, 4};
inline constexpr NarrowFormat kFp8Format{4, 3};
/// The format of fp16, fp10 and fp8; nullopt for binarize, sparse and none.
std::optional<NarrowFormat> narrow_format(Encoding encoding);

/// Note [Sparse format]: Gist's sparse storage as the backends write it
/// (host_backend/encodings.hpp, cuda_backend/kernels.cuh). The map's 32-bit values in blocks of
/// kSparseBlockValues, each block a 16-bit count of its stored values followed by one (8-bit index
/// in the block, 32-bit value) pair per value that is not +0.0 (-0.0 is stored, so decoding is
/// bitwise). The plan sizes the buffer for ceil(kDefaultSparseDensity * values) stored values. On
/// the host backend a map with more non-zeros than that spills the rest of its encoding to host
/// memory, not the device arena, so the device peak stays the simulator's (docs/runtime.md); the
/// CUDA backend stops with an error naming the map.
inline constexpr std::int64_t kSparseBlockValues = 256;
inline constexpr std::int64_t kSparseHeaderBytes = 2;  // per block: the 16-bit count
inline constexpr std::int64_t kSparsePairBytes = 5;    // per stored value: index byte + float32
/// Bytes of the sparse format for `values` 32-bit values of which `stored` are stored.
constexpr Bytes sparse_format_bytes(std::int64_t values, std::int64_t stored) {
  return ((values + kSparseBlockValues - 1) / kSparseBlockValues) * kSparseHeaderBytes +
         stored * kSparsePairBytes;
}
/// Stored values a plan's sparse buffer has room for: ceil(kDefaultSparseDensity * values).
std::int64_t sparse_planned_values(std::int64_t values);

/// Bytes of the encoded copy of a float32 map: binarize 1 bit, fp16 16 bits, fp10 10 bits, fp8 8
/// bits per value, each rounded up to whole bytes; sparse sparse_format_bytes(values,
/// sparse_planned_values(values)). At least 1 byte.
Bytes encoded_bytes(Encoding encoding, const Tensor& tensor);

struct Decision {
  TensorId tensor = kNoTensor;
  Action action = Action::kKeep;
  Encoding encoding = Encoding::kNone;  // set when action == kEncode
  /// Swap only: the op before which the prefetch is issued; kNoOp for the default (the op just
  /// before the first backward use, so the copy overlaps one op).
  OpId prefetch_before = kNoOp;
  /// Swap only: the op before which the map's device copy is freed, once its copy-out has read it
  /// (Note [Release point]); kNoOp: right after its last forward use.
  OpId release_before = kNoOp;
  /// Recompute only: forget the regenerated map (and what was regenerated to make it) right after
  /// each backward op that reads it, so the next use regenerates it again (SuperNeurons'
  /// memory-centric mode). false: regenerate once and keep until the last backward use.
  bool per_use = false;

  friend bool operator==(const Decision&, const Decision&) = default;
};

/// An op run with one of its alternative algorithms (Op::algorithms) instead of its default one:
/// vDNN's per-layer choice between the fastest convolution and the memory-optimal one.
struct AlgorithmChoice {
  OpId op = kNoOp;
  std::int32_t algorithm = 0;  // index into the op's `algorithms`

  friend bool operator==(const AlgorithmChoice&, const AlgorithmChoice&) = default;
};

/// A group of uses of a host-placed tensor whose device copy the plan prefetches before another op
/// than the default (Note [Host placement]).
struct HostPrefetch {
  TensorId tensor = kNoTensor;
  OpId first_use = kNoOp;        // the group's first use: names the group
  OpId prefetch_before = kNoOp;  // in the group's window (HostUseGroup)

  friend bool operator==(const HostPrefetch&, const HostPrefetch&) = default;
};

struct Plan {
  std::string policy;               // who made it ("swap-all", "hand-written", ...)
  std::uint64_t fingerprint = 0;    // workload_fingerprint() of the workload it was made for
  std::vector<Decision> decisions;  // one per feature map, in tensor id order
  std::vector<AlgorithmChoice> algorithms;  // ops not run with their default, ascending op id
  /// Tensors other than feature maps placed on the host (Note [Host placement]), ascending.
  std::vector<TensorId> host_tensors;
  /// The update-phase ops run on the host over host copies (Note [Host placement]).
  bool host_update = false;
  /// Prefetch points of groups of host-placed tensors' uses that are not the default, ascending
  /// by (tensor, first_use); a group not listed is prefetched at its default point.
  std::vector<HostPrefetch> host_prefetches;

  [[nodiscard]] std::array<std::size_t, kActionCount> action_counts() const;

  friend bool operator==(const Plan&, const Plan&) = default;
};

/// FNV-1a over the structure of a workload: tensor names, sizes, kinds, producers, in-place links;
/// op names, layers, phases, inputs, outputs, workspace sizes. Durations are left out.
std::uint64_t workload_fingerprint(const Workload& workload);

/// Whether Gist's encodings apply to the tensor's element type (float32, or not given).
bool encodable_dtype(const Tensor& tensor);

/// The op after which a map the plan does not keep leaves the device: its last forward use, or
/// its producer when forward does not read it.
OpId last_forward_use(const FeatureMap& map, const Workload& workload);
/// The op before which a swapped map is prefetched when its decision names none: the op before its
/// first backward use, so that the copy overlaps one op, or that use itself when the op before is
/// its last forward use.
OpId default_prefetch_point(const FeatureMap& map, const Workload& workload);

/// Why `decision` is not allowed for the map (empty when it is). `map` is the map it names.
std::string decision_problem(const Decision& decision, const FeatureMap& map,
                             const Workload& workload);

/// Why tensor `t` may not be placed on the host (empty when it may; Note [Host placement]).
std::string host_placement_problem(TensorId t, const Workload& workload);

/// The tensors of `kind` that may be placed on the host (host_placement_problem is empty for
/// each), ascending: what a policy places when it moves a kind off the device.
std::vector<TensorId> host_placeable(const Workload& workload, TensorKind kind);

/// Places every tensor of `kind` that may go to the host there (`on`), or back on the device;
/// plan.host_tensors stays ascending, and host prefetches of groups that no longer exist go
/// (drop_stale_host_prefetches). What the offload policies and the search's placement moves do,
/// one kind at a time.
void set_host_placement(Plan& plan, const Workload& workload, TensorKind kind, bool on);

/// Why the plan's host update is not allowed (empty when it is, or when there is none).
std::string host_update_problem(const Plan& plan, const Workload& workload);

/// A group of uses of a host-placed tensor that gets its own prefetched device copy (Note [Host
/// placement]): its uses, and the window of ops before which the prefetch may be issued.
struct HostUseGroup {
  OpId first_use = kNoOp;
  OpId last_use = kNoOp;
  OpId earliest_prefetch = kNoOp;  // the op after the previous device copy was dropped
  OpId default_prefetch = kNoOp;   // the op before first_use, or first_use when that is earlier

  friend bool operator==(const HostUseGroup&, const HostUseGroup&) = default;
};

/// The op after which the device copy of a host-placed gradient goes: its last use before the
/// update, at the earliest one op after its producer. `readers`: the ops that read it, ascending.
OpId host_gradient_drop(TensorId t, std::span<const OpId> readers, const Workload& workload);

/// The groups of uses of host-placed tensor `t` that are prefetched, ascending, into `out` (its
/// old contents replaced): a pre-existing tensor's groups of consecutive uses in one phase (not
/// the update's when `host_update`: it reads the slot); a gradient's update uses when the update
/// runs on the device and its device copy is gone before them. `readers`: the ops that read `t`,
/// ascending (repeats allowed).
void host_use_groups(TensorId t, std::span<const OpId> readers, bool host_update,
                     const Workload& workload, std::vector<HostUseGroup>& out);
/// The same, finding the readers.
std::vector<HostUseGroup> host_use_groups(TensorId t, bool host_update, const Workload& workload);

/// Why each of the plan's host prefetches is not allowed, in order (an empty string where it is):
/// each must name a host-placed tensor, the first use of one of its prefetched groups, and an op
/// in that group's window.
std::vector<std::string> host_prefetch_problems(const Plan& plan, const Workload& workload);

/// Removes the plan's host prefetches that no longer name a prefetched group of a host-placed
/// tensor (after a placement or the update's place changed).
void drop_stale_host_prefetches(Plan& plan, const Workload& workload);

/// Per tensor: can it be rebuilt by re-running forward ops of the compute stream from pre-existing
/// tensors? (Pre-existing tensors themselves count as regenerable: they stay resident.)
std::vector<bool> regenerable_tensors(const Workload& workload);

/// Per op: may regenerating one of the plan's recomputed maps re-run it? Over-approximated: the
/// producer of every recomputed map and, recursively, the producers of its inputs that are
/// dropped after forward (activations that are not feature maps, or recomputed feature maps).
std::vector<bool> ops_rerun_by_recompute(const Plan& plan, const Workload& workload);

/// A map kept lossily whose forward consumer regenerating a recomputed map re-runs ("Across maps"
/// above): the map's index in the plan and that consumer.
struct LossyConflict {
  std::size_t map = 0;
  OpId consumer = kNoOp;
};
/// The first such conflict of the plan, if any (validate_plan refuses a plan that has one; the
/// searches skip such plans). `maps` are the workload's feature maps.
std::optional<LossyConflict> lossy_map_recomputed_from(const Plan& plan,
                                                       const std::vector<FeatureMap>& maps,
                                                       const Workload& workload);

/// Checks that the plan was made for this workload, names each feature map once (in order) and
/// gives each an action it can take. Throws InputError naming `source`.
void validate_plan(const Plan& plan, const Workload& workload, std::string_view source);

}  // namespace memplan::sim
