#pragma once
// The arguments c10d records of a communication op (CommArgs in kineto_trace.hpp), read from a
// profiler event: `record_param_comms` ops and kernels that carry "Collective name", and `nccl:*`
// / `gloo:*` ops, whose names say the collective. A malformed value (a negative size, a rank that
// is not a number, a collective no PyTorch names) is an InputError at the field's JSON path.
#include <cstdint>
#include <memory>
#include <optional>
#include <string_view>

#include "importers/kineto/event_reader.hpp"
#include "importers/kineto/kineto_trace.hpp"

namespace memplan::importers::detail {

inline constexpr std::string_view kParamComms = "record_param_comms";

/// The most elements a message of a communication op may have (2^50, as for allocations): a
/// larger count read from a trace is refused, a larger one computed from one saturates here.
inline constexpr std::int64_t kMaxNelems = std::int64_t{1} << 50;

/// Whether `name` is an op of a communication library's own (`nccl:all_reduce`, `gloo:broadcast`).
bool is_library_comm_op(std::string_view name);

/// The CommArgs of the event `r` reads, named `name`; null for an event that is no
/// communication op.
std::shared_ptr<const CommArgs> read_comm_args(const EventReader& r, std::string_view name);

/// A "Collective name" that is c10d's bookkeeping, not a transfer: `wait` (work.wait()), the
/// coalescing brackets, `init`.
bool is_comm_bookkeeping(std::string_view collective);

}  // namespace memplan::importers::detail
