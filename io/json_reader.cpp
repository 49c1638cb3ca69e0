#include "io/json_reader.hpp"

#include <cmath>
#include <istream>
#include <limits>
#include <string>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "io/input_stream.hpp"

namespace memplan::sim {
namespace {

std::string_view type_name(const nlohmann::json& v) {
  switch (v.type()) {
    case nlohmann::json::value_t::null:
      return "null";
    case nlohmann::json::value_t::object:
      return "an object";
    case nlohmann::json::value_t::array:
      return "an array";
    case nlohmann::json::value_t::string:
      return "a string";
    case nlohmann::json::value_t::boolean:
      return "a boolean";
    case nlohmann::json::value_t::number_integer:
    case nlohmann::json::value_t::number_unsigned:
      return "an integer";
    case nlohmann::json::value_t::number_float:
      return "a number with a fraction";
    default:
      return "something else";
  }
}

// Appends to `path` the steps from `at` down to `target` and returns true when `target` is
// `at` or inside it; `path` is unchanged otherwise.
bool path_to(const nlohmann::json& at, const nlohmann::json* target, std::string& path) {
  if (&at == target) return true;
  const std::size_t length = path.size();
  if (at.is_object()) {
    for (const auto& [key, value] : at.items()) {
      path += fmt::format(".{}", key);
      if (path_to(value, target, path)) return true;
      path.resize(length);
    }
  } else if (at.is_array()) {
    for (std::size_t i = 0; i < at.size(); ++i) {
      path += fmt::format("[{}]", i);
      if (path_to(at[i], target, path)) return true;
      path.resize(length);
    }
  }
  return false;
}

}  // namespace

nlohmann::json parse_json(InputStream& input, const JsonFilter& filter) {
  const std::uint64_t limit = input.limits().values;
  std::uint64_t values = 0;
  // Every value is counted as it starts (an object, an array) or completes (anything else).
  const nlohmann::json::parser_callback_t count =
      [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        if (event == nlohmann::json::parse_event_t::object_start ||
            event == nlohmann::json::parse_event_t::array_start ||
            event == nlohmann::json::parse_event_t::value) {
          if (++values > limit) refuse_values(input.source(), limit, "JSON values");
        }
        return filter == nullptr || filter(depth, event, parsed);
      };
  std::istream stream(&input);
  try {
    return nlohmann::json::parse(stream, count);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message names the line and column; strip its "[json.exception...] " prefix.
    std::string message = e.what();
    if (auto pos = message.find("] "); pos != std::string::npos) message = message.substr(pos + 2);
    throw InputError(input.source(), fmt::format("not valid JSON ({})", message));
  }
}

nlohmann::json read_json(const std::filesystem::path& path, const JsonFilter& filter) {
  InputStream input(path, Content::kJson);
  return parse_json(input, filter);
}

nlohmann::json parse_json(std::string_view text, std::string_view source,
                          const JsonFilter& filter) {
  InputStream input(text, std::string(source), Content::kJson);
  return parse_json(input, filter);
}

std::string JsonReader::path() const {
  std::string path = "$";
  path_to(*root_, value_, path);
  return path;
}

void JsonReader::fail(const std::string& problem) const {
  throw InputError(fmt::format("{}: {}", source_, path()), problem);
}

JsonReader JsonReader::inside(const nlohmann::json& value) const {
  return {value, *root_, source_};
}

JsonReader JsonReader::at(std::string_view key) const {
  if (!value_->is_object()) fail(fmt::format("expected an object, found {}", type_name(*value_)));
  auto it = value_->find(key);
  if (it == value_->end()) fail(fmt::format("missing field '{}'", key));
  return inside(*it);
}

std::optional<JsonReader> JsonReader::find(std::string_view key) const {
  if (!value_->is_object()) fail(fmt::format("expected an object, found {}", type_name(*value_)));
  auto it = value_->find(key);
  if (it == value_->end() || it->is_null()) return std::nullopt;
  return inside(*it);
}

std::vector<JsonReader> JsonReader::elements() const {
  if (!value_->is_array()) fail(fmt::format("expected an array, found {}", type_name(*value_)));
  std::vector<JsonReader> result;
  result.reserve(value_->size());
  for (const auto& element : *value_) result.push_back(inside(element));
  return result;
}

void JsonReader::reject_unknown_keys(std::initializer_list<std::string_view> known) const {
  if (!value_->is_object()) fail(fmt::format("expected an object, found {}", type_name(*value_)));
  for (const auto& [key, _] : value_->items()) {
    bool found = false;
    for (auto k : known) found = found || k == key;
    if (!found) fail(fmt::format("unknown field '{}'", key));
  }
}

std::string JsonReader::as_string() const {
  if (!value_->is_string()) fail(fmt::format("expected a string, found {}", type_name(*value_)));
  return value_->get<std::string>();
}

namespace {
// The range of an integer field as a message says it: "[0, 3]", or for the whole 64-bit range,
// which a field that checks its value later asks for, words rather than two 19-digit numbers.
std::string range_text(std::int64_t min, std::int64_t max) {
  if (min == std::numeric_limits<std::int64_t>::min() &&
      max == std::numeric_limits<std::int64_t>::max()) {
    return "a 64-bit integer's range";
  }
  return fmt::format("[{}, {}]", min, max);
}
}  // namespace

std::int64_t JsonReader::as_int(std::int64_t min, std::int64_t max) const {
  std::int64_t v = 0;
  if (value_->is_number_unsigned()) {
    const auto u = value_->get<std::uint64_t>();
    if (u > static_cast<std::uint64_t>(max))
      fail(fmt::format("{} is out of range ({})", u, range_text(min, max)));
    v = static_cast<std::int64_t>(u);
  } else if (value_->is_number_integer()) {
    v = value_->get<std::int64_t>();
  } else if (value_->is_number_float() &&
             std::trunc(value_->get<double>()) == value_->get<double>()) {
    const double d = value_->get<double>();
    // A whole number written with a decimal point or an exponent ("version": 1.0), or an integer
    // too large for 64 bits (2^64), which parses as a double: say which, not "a fraction".
    if (std::fabs(d) < 9.2e18) {
      fail(
          fmt::format("{} is not an integer: write it without a decimal point or exponent ({:.0f})",
                      value_->dump(), d));
    }
    fail(fmt::format("{:.0f} is out of range ({})", d, range_text(min, max)));
  } else {
    fail(fmt::format("expected an integer, found {}", type_name(*value_)));
  }
  if (v < min || v > max) fail(fmt::format("{} is out of range ({})", v, range_text(min, max)));
  return v;
}

double JsonReader::as_number() const {
  if (!value_->is_number()) fail(fmt::format("expected a number, found {}", type_name(*value_)));
  const auto v = value_->get<double>();
  if (!std::isfinite(v)) fail("expected a finite number");
  return v;
}

bool JsonReader::as_bool() const {
  if (!value_->is_boolean())
    fail(fmt::format("expected true or false, found {}", type_name(*value_)));
  return value_->get<bool>();
}

}  // namespace memplan::sim
