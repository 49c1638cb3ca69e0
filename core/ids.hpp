#pragma once
// Ids: the strong types that name a workload's tensors and ops (TensorId, OpId) and a program's
// buffers, events and host slots (BufferId, EventId, HostSlotId). An id is a position: tensor `t`
// is `workload.tensors[index(t)]`, op `o` is `workload.ops[index(o)]` (core/workload.hpp), buffer
// `b` is `program.buffers[index(b)]`, event `e` is `program.events[index(e)]`, host slot `s` is
// `program.host_slots[index(s)]` (core/program.hpp), and -1 (kNoTensor, kNoOp, kNoBuffer,
// kNoEvent, kNoHostSlot) means none.
//
// Why: as plain ints a tensor id could be passed where an op id was expected, and every use as an
// index was spelled `static_cast<std::size_t>(id)`. As distinct types, mixing them does not
// compile, and indexing is spelled once, index(id).
//
// How: each is an enum class over std::int32_t with no enumerators, so it costs nothing over the
// int: the same size and layout, ==, != and < compare ids of one kind (std::map, sorting), and
// std::hash works. Ints do not convert to ids nor ids to ints: code that indexes goes through
// index(), makes ids with tensor_id(), op_id(), buffer_id(), event_id() and host_slot_id(), and
// meets ints only at the boundaries (JSON files, Python, the backends, and the fields of a
// program's instruction that hold ids of different kinds: Instruction::aux, Program::operands,
// read through typed accessors) through value(). The one arithmetic is stepping through ops in
// issue order (op + 1, --op, the distance b - a); fmt formats an id as its number.
#include <concepts>
#include <cstddef>
#include <cstdint>

#include <fmt/core.h>

namespace memplan::sim {

enum class TensorId : std::int32_t {};
enum class OpId : std::int32_t {};
enum class BufferId : std::int32_t {};
enum class EventId : std::int32_t {};
enum class HostSlotId : std::int32_t {};

inline constexpr TensorId kNoTensor{-1};
inline constexpr OpId kNoOp{-1};
inline constexpr BufferId kNoBuffer{-1};
inline constexpr EventId kNoEvent{-1};
inline constexpr HostSlotId kNoHostSlot{-1};

/// The strong id types above.
template <class T>
concept Id = std::same_as<T, TensorId> || std::same_as<T, OpId> || std::same_as<T, BufferId> ||
    std::same_as<T, EventId> || std::same_as<T, HostSlotId>;

/// The id's position in its vector (Workload::tensors, Workload::ops, Program::buffers,
/// Program::events, Program::host_slots). Not for kNoTensor, kNoOp, kNoBuffer, kNoEvent or
/// kNoHostSlot.
template <Id T>
constexpr std::size_t index(T id) {
  return static_cast<std::size_t>(id);
}

/// The id as the number files and Python see (-1 for none).
template <Id T>
constexpr std::int32_t value(T id) {
  return static_cast<std::int32_t>(id);
}

/// The id of the tensor, op, buffer, event or host slot at position `i` (or -1: none).
template <std::integral I>
constexpr TensorId tensor_id(I i) {
  return static_cast<TensorId>(static_cast<std::int32_t>(i));
}
template <std::integral I>
constexpr OpId op_id(I i) {
  return static_cast<OpId>(static_cast<std::int32_t>(i));
}
template <std::integral I>
constexpr BufferId buffer_id(I i) {
  return static_cast<BufferId>(static_cast<std::int32_t>(i));
}
template <std::integral I>
constexpr EventId event_id(I i) {
  return static_cast<EventId>(static_cast<std::int32_t>(i));
}
template <std::integral I>
constexpr HostSlotId host_slot_id(I i) {
  return static_cast<HostSlotId>(static_cast<std::int32_t>(i));
}

/// Ops run in issue order, so stepping from an op to the next or previous one, or counting the ops
/// between two, is meaningful (tensors, buffers, events and host slots have no order to step
/// through: their ids have no arithmetic).
constexpr OpId operator+(OpId op, std::int32_t n) {
  return OpId{value(op) + n};
}
constexpr OpId operator-(OpId op, std::int32_t n) {
  return OpId{value(op) - n};
}
constexpr std::int32_t operator-(OpId a, OpId b) {
  return value(a) - value(b);
}
constexpr OpId& operator++(OpId& op) {
  return op = op + 1;
}
constexpr OpId& operator--(OpId& op) {
  return op = op - 1;
}

}  // namespace memplan::sim

/// fmt formats an id as its number (one explicit specialization per type: a partial
/// specialization over the concept leaves formatter<int>::format uninstantiated with shared fmt 9).
#define MEMPLAN_ID_FORMATTER(T)                                                  \
  template <>                                                                    \
  struct fmt::formatter<T> : fmt::formatter<std::int32_t> {                      \
    auto format(T id, format_context& ctx) const {                               \
      return fmt::formatter<std::int32_t>::format(memplan::sim::value(id), ctx); \
    }                                                                            \
  };
MEMPLAN_ID_FORMATTER(memplan::sim::TensorId)
MEMPLAN_ID_FORMATTER(memplan::sim::OpId)
MEMPLAN_ID_FORMATTER(memplan::sim::BufferId)
MEMPLAN_ID_FORMATTER(memplan::sim::EventId)
MEMPLAN_ID_FORMATTER(memplan::sim::HostSlotId)
#undef MEMPLAN_ID_FORMATTER
