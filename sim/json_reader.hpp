#pragma once
// JsonReader: typed access to a JSON document that remembers where it is, so that every error
// names the source and the JSON path ("trace.json: $.ops[3].inputs[1]: expected an integer").
// Shared by the trace reader and the plan reader.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::sim {

/// Parses a whole JSON document. Any failure (truncated or corrupt text, a number too large for
/// any JSON number type) becomes an InputError naming `source` and, where known, the line.
nlohmann::json parse_json(std::string_view text, std::string_view source);

class JsonReader {
 public:
  JsonReader(const nlohmann::json& value, std::string_view source, std::string path = "$")
      : value_(&value), source_(source), path_(std::move(path)) {}

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] std::string_view source() const { return source_; }
  [[nodiscard]] const nlohmann::json& value() const { return *value_; }

  /// Throws InputError at this reader's path.
  [[noreturn]] void fail(const std::string& problem) const;

  /// This value must be an object; returns the reader of a required member.
  [[nodiscard]] JsonReader at(std::string_view key) const;
  /// The reader of an optional member (absent or null gives nullopt).
  [[nodiscard]] std::optional<JsonReader> find(std::string_view key) const;
  /// This value must be an array; readers of its elements.
  [[nodiscard]] std::vector<JsonReader> elements() const;
  /// Fails on members of this object that are not in `known`, naming the first one.
  void reject_unknown_keys(std::initializer_list<std::string_view> known) const;

  [[nodiscard]] bool is_null() const { return value_->is_null(); }
  [[nodiscard]] std::string as_string() const;
  /// An integer within [min, max].
  [[nodiscard]] std::int64_t as_int(std::int64_t min, std::int64_t max) const;
  /// A finite number (integer or floating point).
  [[nodiscard]] double as_number() const;
  [[nodiscard]] bool as_bool() const;

 private:
  const nlohmann::json* value_;
  std::string_view source_;
  std::string path_;
};

}  // namespace memplan::sim
