#pragma once
// The collectives of a step (Note [Collectives of a step] in collective_units.cpp): which CPU
// events are communication ops, and the sim::Collective each stands for — its kind, message
// sizes, dtype and process group, from what c10d recorded (CommArgs in kineto_trace.hpp).
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/collective.hpp"
#include "importers/kineto/kineto_importer.hpp"
#include "importers/kineto/kineto_trace.hpp"
#include "importers/kineto/step_events.hpp"
#include "importers/kineto/step_units.hpp"

namespace memplan::importers::detail {

/// Whether event `i` is a communication op of c10d's (record_param_comms, nccl:*, gloo:*).
bool is_comm_event(const KinetoTrace& trace, std::size_t i);

/// The collective event `i` performs, or nullopt: a record_param_comms named by its "Collective
/// name" or by the nccl:/gloo: op nested in it, or an nccl:/gloo: op outside any
/// record_param_comms; c10d's bookkeeping (`wait`) performs none.
std::optional<sim::CollectiveKind> collective_kind(const KinetoTrace& trace, const Nesting& nesting,
                                                   std::size_t i);

/// The collective ops of the step's window on every thread, outermost only, as units of role
/// kCollective.
std::vector<Unit> collect_collectives(const KinetoTrace& trace, const Nesting& nesting,
                                      const StepWindow& step);

/// The Collective a collective unit performs, its sequence left 0. `world_size`: the job's, for
/// the output size of an all-gather or a reduce-scatter whose group size is not recorded.
sim::Collective describe_collective(const KinetoTrace& trace, const Nesting& nesting,
                                    const Unit& unit, std::int32_t world_size);

/// c10's dtype name ("Float", "BFloat16", "Long") as memplan names it; empty when unknown.
std::string c10_dtype(std::string_view name);

}  // namespace memplan::importers::detail
