#pragma once
// StepBuilder: the Workload of one profiler step, built from its classified units (step_units.hpp,
// unit_roles.hpp) in program order — forward ops with their parameters and activations, the
// backward ops that differentiate them, gradients, optimizer state and the optimizer step — and
// then checked against what the trace accounts for itself (the optimizer's tensor lists,
// AccumulateGrad's leaves, the allocations of each forward op) and given its host side.
//
// The profiler records no tensor identities, so the dataflow is rebuilt from program order and
// shapes: Note [Kineto dataflow] (dataflow.cpp). One file per concern: dataflow.cpp (tensors,
// the values an op may read, folding), forward_ops.cpp (one rule per layer), backward_ops.cpp
// (gradients and the update), parameters.cpp (parameters, optimizer state, leaves),
// allocation_check.cpp, step_host_side.cpp (Note [Host side]), stream_ops.cpp (collectives and the
// work of other streams), stream_waits.cpp (Note [Stream waits]).
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/workload.hpp"
#include "importers/allocation_history.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_events.hpp"
#include "importers/kineto/step_units.hpp"
#include "importers/kineto/unit_roles.hpp"

namespace memplan::importers::detail {

/// A forward value: a tensor under one shape (a view is the same tensor under another).
struct Value {
  sim::TensorId tensor = sim::kNoTensor;
  Shape shape;
  std::string dtype;
  bool overwritten = false;  // written over in place: no longer readable
  bool merged = false;       // read by an add already
  bool read = false;         // read by some op already
  bool superseded = false;   // read by a normalisation or activation: its output carries on
  bool activation = false;   // produced by a forward op
};

/// What a forward op's backward op will need.
struct ForwardInfo {
  std::vector<sim::TensorId> data_inputs;  // activations and inputs, for gradients
  std::vector<sim::TensorId> params;       // trainable
  std::vector<sim::TensorId> saved;        // read by the backward op
  /// For each of `saved`: the operands for whose gradient backward keeps it (empty: for any). An
  /// operand nothing differentiable made (dropout's noise, a mask) needs no gradient, and its
  /// product with a tensor that does keeps only itself (Note [What needs a gradient]).
  std::vector<std::vector<sim::TensorId>> saved_for;
  sim::TensorId output = sim::kNoTensor;  // the primary output
  sim::Layer layer = sim::Layer::kGeneric;
  std::string name;
  bool has_backward = false;
};

class StepBuilder {
 public:
  /// `units` are classified; the builder records in each the op it made. `streams`: the step's
  /// device streams (step_units.hpp).
  StepBuilder(const KinetoTrace& trace, const Nesting& nesting, std::vector<Unit>& units,
              const StepRoles& roles, const StepStreams& streams, bool time_only,
              ImportReport& report);

  /// Builds every unit in order (glue folded into the op before it). Throws InputError when the
  /// step has no forward op.
  void build();
  /// The report's parameter counts beside the optimizer's tensor lists and the leaves.
  void check_parameters_against_optimizer();
  /// With addressed [memory] events: each forward output against the op's allocations.
  void check_outputs_against_allocations();
  /// A step without shapes: its tensors from the allocations of `history` (Note [Sizes from
  /// allocations] in allocation_sizes.cpp); false, and nothing added, when none of them was made
  /// or freed in the step.
  bool size_from_allocations(const AllocationHistory& history);
  /// An FSDP step (Note [FSDP in a trace] in fsdp_steps.cpp): the parameters become this
  /// rank's shards, the gathered parameters and the collectives' buffers tensors of the
  /// collectives from the memory the trace recorded, the gradients read by their reduction. False,
  /// and nothing changed, when FSDP did not run the step.
  bool shard_for_fsdp();
  /// After shard_for_fsdp, the last stage: each unit's gathered parameters one feature map of its
  /// forward all-gather, the backward's re-gathers of them removed (a plan's recompute of the map
  /// runs them), and the job's FSDP setting in the report (Note [Gathered parameters as feature
  /// maps] in fsdp_plan.cpp). Nothing changes where the step's FSDP structure does not map.
  void plan_gathered_parameters();
  /// Trace format v2's host side of every op, and the step's (Note [Host side]).
  void fill_host_side(const StepWindow& step);
  /// What orders the ops of different streams beyond their inputs: each op's `after` (Note
  /// [Stream waits] in stream_waits.cpp).
  void order_streams(const StepWindow& step);
  /// The link bandwidths the trace's own copies measure, kept in the workload's device (`--link
  /// recorded` and the default machine use them); returns a sentence for the provenance note.
  std::string measure_device_link();

  sim::Workload& workload() { return workload_; }

 private:
  struct ForwardOp;  // forward_ops.cpp

  [[noreturn]] void fail(const std::string& what) const;
  const CpuEvent& event(const Unit& u) const { return trace_.cpu_events[u.event]; }
  sim::Op& op(sim::OpId id) { return workload_.ops[index(id)]; }
  const sim::Tensor& tensor(sim::TensorId id) const { return workload_.tensors[index(id)]; }

  // dataflow.cpp
  void fold(const Unit& unit);
  std::size_t new_value(sim::TensorId tensor, const Shape& shape, const std::string& dtype,
                        bool activation);
  sim::TensorId add_tensor(std::string name, sim::TensorKind kind, const Shape& shape,
                           const std::string& dtype, sim::OpId producer,
                           sim::TensorId in_place_of = sim::kNoTensor);
  sim::OpId add_op(std::string name, sim::LayerType layer, sim::Phase phase, const Unit& unit);
  // stream_ops.cpp
  void build_collective(Unit& unit);
  void add_side_ops(const Unit& unit);
  sim::OpId add_stream_op(std::string name, sim::LayerType layer, std::int32_t stream,
                          sim::Nanoseconds duration, sim::Nanoseconds launch);
  [[nodiscard]] sim::Phase current_phase() const;
  // stream_waits.cpp
  std::size_t wait_recorded_syncs(const StepWindow& step);
  std::size_t wait_at_calls(const StepWindow& step, std::size_t& calls);
  std::size_t wait_before_update();
  bool add_after(sim::OpId consumer, sim::OpId producer);
  void add_input(sim::OpId op, sim::TensorId t);
  std::size_t resolve(const Shape& shape, const std::string& dtype, bool first,
                      std::size_t exclude = SIZE_MAX, bool for_merge = false,
                      const std::vector<std::size_t>& taken = {});
  // The most recent live activation of this shape, else resolve()'s.
  std::size_t resolve_recent(const Shape& shape, const std::string& dtype);
  // A loss's target: the latest value of its shape nothing has read yet, else a new input.
  std::size_t resolve_target(const Shape& shape, const std::string& dtype);
  // A network input of this shape that no op of the step made: its value.
  std::size_t new_input(const Shape& shape, const std::string& dtype);
  Shape lookahead(std::size_t position, std::int64_t n, std::int64_t c, std::size_t rank,
                  const Shape& fallback) const;
  Shape lookahead_view(std::size_t position, const Shape& from) const;

  // forward_ops.cpp
  void build_forward(Unit& unit, std::size_t position);
  void build_alias(const Unit& unit, std::size_t position);
  void build_timed_forward(Unit& unit);
  std::size_t forward_layer(ForwardOp& f, const Unit& unit);
  std::size_t forward_conv(ForwardOp& f);
  std::size_t forward_batch_norm(ForwardOp& f);
  std::size_t forward_layer_norm(ForwardOp& f);
  std::size_t forward_relu(ForwardOp& f);
  std::size_t forward_pool(ForwardOp& f, bool max);
  std::size_t forward_linear(ForwardOp& f);
  std::size_t forward_add(ForwardOp& f);
  std::size_t forward_cross_entropy(ForwardOp& f);
  std::size_t forward_concat(ForwardOp& f);
  std::size_t forward_dropout(ForwardOp& f);
  std::size_t forward_embedding(ForwardOp& f);
  [[nodiscard]] bool subtree_has(std::size_t event, std::string_view needle) const;
  // For each reshape or contiguous directly inside `event`, in order: whether it copied (a clone).
  [[nodiscard]] std::vector<bool> reshape_copies(std::size_t event) const;
  std::size_t forward_generic(ForwardOp& f);

  // backward_ops.cpp
  void build_backward(Unit& unit);
  void build_update(Unit& unit);
  void contribute_gradient(sim::TensorId forward_tensor, sim::TensorId grad, sim::OpId op);
  void settle_nodes();
  [[nodiscard]] bool needs_gradient(sim::TensorId t) const;

  // fsdp_steps.cpp: Note [FSDP in a trace]
  struct CollectiveMemory;
  [[nodiscard]] std::string fsdp_kind() const;
  std::vector<CollectiveMemory> collective_memory();
  [[nodiscard]] sim::TensorId collective_output(const std::vector<CollectiveMemory>& memory,
                                                sim::OpId collective, sim::Nanoseconds t) const;
  void read_gathered(const std::vector<CollectiveMemory>& memory);
  void route_gradients(const std::vector<sim::OpId>& reductions);
  // fsdp_plan.cpp: Note [Gathered parameters as feature maps]
  struct GatheredUnit;
  [[nodiscard]] std::vector<sim::TensorId> gathered_parts(sim::OpId gather) const;
  [[nodiscard]] std::vector<GatheredUnit> match_gathers(std::string& why) const;
  [[nodiscard]] std::set<sim::OpId> users_of(const std::vector<sim::TensorId>& parts,
                                             sim::OpId gather) const;
  [[nodiscard]] std::set<sim::OpId> map_readers(const GatheredUnit& u,
                                                const std::vector<sim::TensorId>& parts) const;
  void keep_out_of_regather(sim::OpId gather, const std::vector<sim::TensorId>& parts);
  [[nodiscard]] sim::FsdpSetting recorded_setting(const std::vector<GatheredUnit>& units) const;

  // parameters.cpp
  void shard_parameters(std::int64_t ranks);
  sim::TensorId param(const std::string& name, const Shape& shape, const std::string& dtype,
                      bool trainable);
  void make_trainable(sim::TensorId p);
  void settle_parameters();

  const KinetoTrace& trace_;
  const Nesting& nesting_;
  std::vector<Unit>& units_;
  const StepRoles& roles_;
  const StepStreams& streams_;
  const bool time_only_;  // no recorded shapes in the step: ops with their times, no tensors
  ImportReport& report_;
  sim::Workload workload_;
  std::unordered_map<sim::OpId, ForwardInfo> forward_;
  std::vector<Value> values_;
  std::optional<std::size_t> last_output_;  // value index
  std::size_t merge_boundary_ = 0;          // values from here on were made since the last merge
  std::map<std::int64_t, sim::OpId> op_of_sequence_;
  std::set<sim::OpId> differentiable_;  // forward ops that made an autograd node (settle_nodes)
  std::unordered_map<sim::TensorId, sim::TensorId> grad_of_;  // forward tensor -> its gradient
  std::vector<sim::TensorId> trainable_;
  std::vector<sim::TensorId> optimizer_state_;
  std::unordered_map<sim::TensorId, std::vector<sim::TensorId>> states_of_;  // parameter -> state
  std::map<sim::OpId, sim::OpId> copy_in_;  // FSDP: a reduction -> the op copying into its input
  // FSDP: the tensors made of the memory each all-gather served (collective_memory), and the
  // shards each layer op read before read_gathered pointed it to a gather's tensors.
  std::map<sim::OpId, std::vector<sim::TensorId>> gather_memory_;
  std::map<sim::OpId, std::vector<sim::TensorId>> shard_reads_;
  std::unordered_map<sim::TensorId, sim::TensorId> param_grad_;  // parameter -> gradient or .grad
  std::set<sim::TensorId> saved_;                                // tensors a backward op reads
  sim::OpId last_op_ = sim::kNoOp;        // the last op on the compute stream, where glue folds
  std::vector<sim::Nanoseconds> launch_;  // each op's launch: the first of its device work
  std::map<std::string, std::int64_t> group_calls_;  // collectives so far, by process group
  sim::Nanoseconds pending_ns_ = 0;                  // folded time that came before the first op
  std::size_t input_count_ = 0;
  std::map<std::string, int> layer_counts_;
};

}  // namespace memplan::importers::detail
