#pragma once
// EventReader: reads the fields of one event of a profiler trace (`$.traceEvents[i]`), checking
// each field's presence and type, and throws InputError naming the file and the field's JSON path
// when one is wrong. Shared by the trace's parser (kineto_trace.cpp), the collectives' arguments
// (comm_args.cpp) and the split of a merged file into ranks (rank_split.cpp).
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/units.hpp"

namespace memplan::importers::detail {

class EventReader {
 public:
  EventReader(const nlohmann::json& event, std::string_view source, std::size_t index)
      : event_(event), source_(source), index_(index) {}

  /// Throws InputError at `$.traceEvents[i].field` (the event itself when `field` is empty).
  [[noreturn]] void fail(std::string_view field, const std::string& what) const;

  /// The value under `key` in `object`, nullptr when absent or null.
  [[nodiscard]] static const nlohmann::json* find(const nlohmann::json& object,
                                                  std::string_view key);
  [[nodiscard]] const nlohmann::json& event() const { return event_; }

  [[nodiscard]] std::string string_field(std::string_view key) const;
  /// A pid or tid: an integer or a string ("?" when absent).
  [[nodiscard]] std::string id_field(std::string_view key) const;
  [[nodiscard]] sim::Nanoseconds time_field(std::string_view key) const;
  [[nodiscard]] sim::Nanoseconds duration_field() const;
  /// The event's "args" object, nullptr when absent.
  [[nodiscard]] const nlohmann::json* args() const;
  /// An optional integer argument, under any of the given spellings; a numeric string is read
  /// as its number ("rank": "3", as some writers quote them).
  [[nodiscard]] std::optional<std::int64_t> int_arg(
      std::initializer_list<std::string_view> keys) const;
  /// An optional string argument.
  [[nodiscard]] std::optional<std::string> string_arg(std::string_view key) const;
  /// The recorded shapes; the shapes of tensor-list arguments go to `lists` (argument order).
  [[nodiscard]] std::vector<std::vector<std::int64_t>> dims_arg(
      std::vector<std::vector<std::vector<std::int64_t>>>* lists = nullptr) const;
  [[nodiscard]] std::vector<std::string> types_arg() const;
  /// An array of strings under `key` ("Concrete Inputs"); anything else in it reads as "".
  [[nodiscard]] std::vector<std::string> strings_arg(std::string_view key) const;

 private:
  [[nodiscard]] std::vector<std::vector<std::int64_t>> list_shapes(const nlohmann::json& list,
                                                                   const std::string& field) const;

  const nlohmann::json& event_;
  std::string_view source_;
  std::size_t index_;
};

}  // namespace memplan::importers::detail
