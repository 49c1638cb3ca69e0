#pragma once
// Ids: the strong types that name a workload's tensors and ops (TensorId, OpId). An id is a
// position: tensor `t` is `workload.tensors[index(t)]`, op `o` is `workload.ops[index(o)]`
// (sim/workload.hpp), and -1 (kNoTensor, kNoOp) means none.
//
// Why: as plain ints a tensor id could be passed where an op id was expected, and every use as an
// index was spelled `static_cast<std::size_t>(id)`. As distinct types, mixing them does not
// compile, and indexing is spelled once, index(id).
//
// How: each is an enum class over std::int32_t with no enumerators, so it costs nothing over the
// int: the same size and layout, ==, != and < compare ids of one kind (std::map, sorting), and
// std::hash works. Ints do not convert to ids nor ids to ints: code that indexes goes through
// index(), makes ids with tensor_id() / op_id(), and meets ints only at the boundaries (JSON files,
// Python, the backends) through value(). The one arithmetic is stepping through ops in issue order
// (op + 1, --op, the distance b - a); fmt formats an id as its number.
#include <concepts>
#include <cstddef>
#include <cstdint>

#include <fmt/core.h>

namespace memplan::sim {

enum class TensorId : std::int32_t {};
enum class OpId : std::int32_t {};

inline constexpr TensorId kNoTensor{-1};
inline constexpr OpId kNoOp{-1};

/// The id's position in its vector (Workload::tensors, Workload::ops). Not for kNoTensor/kNoOp.
constexpr std::size_t index(TensorId id) {
  return static_cast<std::size_t>(id);
}
constexpr std::size_t index(OpId id) {
  return static_cast<std::size_t>(id);
}

/// The id as the number files and Python see (-1 for none).
constexpr std::int32_t value(TensorId id) {
  return static_cast<std::int32_t>(id);
}
constexpr std::int32_t value(OpId id) {
  return static_cast<std::int32_t>(id);
}

/// The id of the tensor or op at position `i` (or -1: none).
template <std::integral I>
constexpr TensorId tensor_id(I i) {
  return static_cast<TensorId>(static_cast<std::int32_t>(i));
}
template <std::integral I>
constexpr OpId op_id(I i) {
  return static_cast<OpId>(static_cast<std::int32_t>(i));
}

/// Ops run in issue order, so stepping from an op to the next or previous one, or counting the ops
/// between two, is meaningful (tensors have no order to step through: TensorId has no arithmetic).
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

template <>
struct fmt::formatter<memplan::sim::TensorId> : fmt::formatter<std::int32_t> {
  auto format(memplan::sim::TensorId id, format_context& ctx) const {
    return fmt::formatter<std::int32_t>::format(memplan::sim::value(id), ctx);
  }
};
template <>
struct fmt::formatter<memplan::sim::OpId> : fmt::formatter<std::int32_t> {
  auto format(memplan::sim::OpId id, format_context& ctx) const {
    return fmt::formatter<std::int32_t>::format(memplan::sim::value(id), ctx);
  }
};
