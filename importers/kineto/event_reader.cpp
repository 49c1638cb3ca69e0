#include "importers/kineto/event_reader.hpp"

#include <cmath>
#include <utility>

#include <fmt/core.h>

#include "core/input_error.hpp"

namespace memplan::importers::detail {

namespace {

using nlohmann::json;

// Timestamps beyond this many microseconds (the year 2096 counted from the Unix epoch) are taken
// as corrupt; durations beyond a day likewise. These bounds keep every sum of times in the
// importer far from integer overflow.
constexpr double kMaxMicroseconds = 4e15;
constexpr double kMaxDurationMicroseconds = 86400e6;

}  // namespace

void EventReader::fail(std::string_view field, const std::string& what) const {
  throw sim::InputError(
      fmt::format("{}: $.traceEvents[{}]{}{}", source_, index_, field.empty() ? "" : ".", field),
      what);
}

const json* EventReader::find(const json& object, std::string_view key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string EventReader::string_field(std::string_view key) const {
  const json* v = find(event_, key);
  if (v == nullptr) fail(key, "missing field");
  if (!v->is_string()) fail(key, "expected a string");
  return v->get<std::string>();
}

std::string EventReader::id_field(std::string_view key) const {
  const json* v = find(event_, key);
  if (v == nullptr) return "?";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_number_integer()) return std::to_string(v->get<std::int64_t>());
  if (v->is_number_unsigned()) return std::to_string(v->get<std::uint64_t>());
  fail(key, "expected an integer or a string");
}

sim::Nanoseconds EventReader::time_field(std::string_view key) const {
  const json* v = find(event_, key);
  if (v == nullptr) fail(key, "missing field");
  if (!v->is_number()) fail(key, "expected a number of microseconds");
  const double us = v->get<double>();
  if (!std::isfinite(us) || std::abs(us) > kMaxMicroseconds) {
    fail(key, fmt::format("implausible time {} us", us));
  }
  return static_cast<sim::Nanoseconds>(std::llround(us * 1000.0));
}

sim::Nanoseconds EventReader::duration_field() const {
  const sim::Nanoseconds d = time_field("dur");
  if (d < 0) fail("dur", "negative duration");
  if (static_cast<double>(d) > kMaxDurationMicroseconds * 1000.0)
    fail("dur", "implausible duration (over a day)");
  return d;
}

const json* EventReader::args() const {
  const json* a = find(event_, "args");
  if (a != nullptr && !a->is_object()) fail("args", "expected an object");
  return a;
}

std::optional<std::int64_t> EventReader::int_arg(
    std::initializer_list<std::string_view> keys) const {
  const json* a = args();
  if (a == nullptr) return std::nullopt;
  for (std::string_view key : keys) {
    const json* v = find(*a, key);
    if (v == nullptr) continue;
    if (v->is_number_integer()) return v->get<std::int64_t>();
    if (v->is_number_unsigned() && v->get<std::uint64_t>() <= INT64_MAX) {
      return static_cast<std::int64_t>(v->get<std::uint64_t>());
    }
    if (v->is_number_float()) {
      const double d = v->get<double>();
      if (std::isfinite(d) && std::abs(d) < 9e18 && d == std::floor(d)) {
        return static_cast<std::int64_t>(d);
      }
    }
    fail(fmt::format("args.{}", key), "expected an integer");
  }
  return std::nullopt;
}

std::optional<std::string> EventReader::string_arg(std::string_view key) const {
  const json* a = args();
  if (a == nullptr) return std::nullopt;
  const json* v = find(*a, key);
  if (v == nullptr) return std::nullopt;
  if (!v->is_string()) fail(fmt::format("args.{}", key), "expected a string");
  return v->get<std::string>();
}

std::vector<std::vector<std::int64_t>> EventReader::dims_arg(
    std::vector<std::vector<std::vector<std::int64_t>>>* lists) const {
  std::vector<std::vector<std::int64_t>> out;
  const json* a = args();
  if (a == nullptr) return out;
  for (std::string_view key : {"Input Dims", "Input dims"}) {
    const json* v = find(*a, key);
    if (v == nullptr) continue;
    const std::string field = fmt::format("args.{}", key);
    if (!v->is_array()) fail(field, "expected an array of shapes");
    for (const json& shape : *v) {
      std::vector<std::int64_t> dims;
      // A tensor list argument is recorded as a list of shapes; memplan keeps none of them.
      if (shape.is_array()) {
        bool nested = false;
        for (const json& extent : shape) {
          if (extent.is_array()) {
            nested = true;
            break;
          }
          if (!extent.is_number_integer()) fail(field, "expected integer extents");
          const auto e = extent.get<std::int64_t>();
          if (e < 0) fail(field, fmt::format("negative extent {}", e));
          dims.push_back(e);
        }
        if (nested) {
          dims.clear();
          if (lists != nullptr) lists->push_back(list_shapes(shape, field));
        }
      } else if (!shape.is_null()) {
        fail(field, "expected each input's shape to be an array");
      }
      out.push_back(std::move(dims));
    }
    break;
  }
  return out;
}

std::vector<std::vector<std::int64_t>> EventReader::list_shapes(const json& list,
                                                                const std::string& field) const {
  std::vector<std::vector<std::int64_t>> shapes;
  for (const json& shape : list) {
    if (!shape.is_array()) fail(field, "expected each tensor of a list to have a shape");
    std::vector<std::int64_t> dims;
    for (const json& extent : shape) {
      if (!extent.is_number_integer()) fail(field, "expected integer extents");
      const auto e = extent.get<std::int64_t>();
      if (e < 0) fail(field, fmt::format("negative extent {}", e));
      dims.push_back(e);
    }
    shapes.push_back(std::move(dims));
  }
  return shapes;
}

std::vector<std::string> EventReader::types_arg() const {
  return strings_arg("Input type");
}

std::vector<std::string> EventReader::strings_arg(std::string_view key) const {
  std::vector<std::string> out;
  const json* a = args();
  if (a == nullptr) return out;
  const json* v = find(*a, key);
  if (v == nullptr) return out;
  if (!v->is_array()) fail(fmt::format("args.{}", key), "expected an array of strings");
  for (const json& t : *v) out.push_back(t.is_string() ? t.get<std::string>() : std::string());
  return out;
}

}  // namespace memplan::importers::detail
