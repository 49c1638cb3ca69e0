#pragma once
// JsonReader: typed access to a JSON document that remembers where it is, so that every error
// names the source and the JSON path ("trace.json: $.ops[3].inputs[1]: expected an integer").
// Shared by the trace reader and the plan reader.
// A reader holds the value and the document's root, not its path: the path is found only when
// an error is reported (a search of the document for the value), so reading a valid document
// formats no strings (a ResNet-1517 trace: 30,000 tensors and 10,000 ops, each read field was a
// formatted path, a fifth of the read).
// Documents are parsed as they stream from an InputStream (io/input_stream.hpp), their values
// counted against the input limit; the elements of one array may be handed over one at a time
// instead of kept (a profiler trace's events, never held together).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace memplan::sim {

class InputStream;

/// What a document's reader wants as it streams (io/json_reader.cpp's Note [Streamed JSON]).
struct JsonStreaming {
  /// Called with each member name of the top-level object as it is read (may throw: a reader
  /// that refuses a file as soon as it shows what it is).
  std::function<void(const std::string& key)> top_key;
  /// When set, the elements of the top-level array, or of the array under the top-level member
  /// `streamed_key`, are handed to it one at a time as each completes, and not kept.
  std::function<void(nlohmann::json& element)> element;
  std::string streamed_key;
};

/// Parses the JSON document `input` holds as it streams. Any failure (truncated or corrupt text,
/// a number too large for any JSON number type, trailing bytes, more values than the input limit)
/// becomes an InputError naming the source and, where known, the line; the callbacks' own
/// InputErrors pass through.
nlohmann::json parse_json(InputStream& input, const JsonStreaming& streaming = {});
/// parse_json of the file at `path` (which may be gzip'd).
nlohmann::json read_json(const std::filesystem::path& path, const JsonStreaming& streaming = {});
/// parse_json of `text`; `source` names it in errors.
nlohmann::json parse_json(std::string_view text, std::string_view source,
                          const JsonStreaming& streaming = {});

class JsonReader {
 public:
  /// A reader of a whole document (its path is "$").
  JsonReader(const nlohmann::json& document, std::string_view source)
      : value_(&document), root_(&document), source_(source) {}

  /// The JSON path of this value in its document: "$", then ".key" and "[index]" steps.
  [[nodiscard]] std::string path() const;
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
  /// The reader of `value`, which must be inside this reader's document (an element or member
  /// reached through value()).
  [[nodiscard]] JsonReader inside(const nlohmann::json& value) const;
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
  JsonReader(const nlohmann::json& value, const nlohmann::json& root, std::string_view source)
      : value_(&value), root_(&root), source_(source) {}

  const nlohmann::json* value_;
  const nlohmann::json* root_;
  std::string_view source_;
};

}  // namespace memplan::sim
