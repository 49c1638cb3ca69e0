#include "io/json_reader.hpp"

#include <cmath>
#include <istream>
#include <limits>
#include <memory>
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

// Note [Streamed JSON]
// ~~~~~~~~~~~~~~~~~~~~
// A document is parsed by nlohmann's SAX interface into nlohmann's own DOM builder
// (json_sax_dom_parser), through StreamingSax, which counts every value against the input limit,
// shows each top-level key as it is read, and builds each element of the streamed array (a
// profiler trace's `traceEvents`) with a DOM builder of its own, hands it over when it completes
// and drops it. (nlohmann's parser callback, which can drop values too, scans the whole parent
// after each object it completes: 400,000 small objects in one array took minutes.)
namespace {

using Json = nlohmann::json;
using DomBuilder = nlohmann::detail::json_sax_dom_parser<Json>;

constexpr int kMaxJsonDepth = 1000;
// What one value held in nlohmann's DOM costs, measured (memplan info, peak RSS): 108 bytes per
// value for 2 M objects of 3 members (`{"name":"aten::mm","ts":1,"dur":3.5}`), 53 for 5 M
// one-element arrays.
constexpr std::uint64_t kBytesPerJsonValue = 112;

class StreamingSax {
 public:
  StreamingSax(Json& document, const JsonStreaming& streaming, const InputStream& input)
      : document_(document, true),
        streaming_(streaming),
        input_(input),
        budget_(value_budget(input.limits(), kBytesPerJsonValue)) {}

  bool null() {
    return scalar([](DomBuilder& b) { return b.null(); });
  }
  bool boolean(bool v) {
    return scalar([v](DomBuilder& b) { return b.boolean(v); });
  }
  bool number_integer(Json::number_integer_t v) {
    return scalar([v](DomBuilder& b) { return b.number_integer(v); });
  }
  bool number_unsigned(Json::number_unsigned_t v) {
    return scalar([v](DomBuilder& b) { return b.number_unsigned(v); });
  }
  bool number_float(Json::number_float_t v, const Json::string_t& text) {
    return scalar([&](DomBuilder& b) { return b.number_float(v, text); });
  }
  bool string(Json::string_t& v) {
    return scalar([&](DomBuilder& b) { return b.string(v); });
  }
  bool binary(Json::binary_t& v) {
    return scalar([&](DomBuilder& b) { return b.binary(v); });
  }
  bool start_object(std::size_t n) {
    count();
    deeper();
    begin_element();
    ++depth_;
    return builder().start_object(n);
  }
  bool key(Json::string_t& k) {
    if (depth_ == 1 && element_builder_ == nullptr) {
      if (streaming_.top_key) streaming_.top_key(k);
      streamed_key_ =
          streaming_.element && !streaming_.streamed_key.empty() && k == streaming_.streamed_key;
    }
    return builder().key(k);
  }
  bool end_object() {
    const bool ok = builder().end_object();
    --depth_;
    end_element();
    return ok;
  }
  bool start_array(std::size_t n) {
    count();
    deeper();
    const bool streamed = streaming_.element && element_builder_ == nullptr &&
                          (depth_ == 0 || (depth_ == 1 && streamed_key_));
    begin_element();
    ++depth_;
    if (streamed) elements_depth_ = depth_;
    return builder().start_array(n);
  }
  bool end_array() {
    if (depth_ == elements_depth_ && element_builder_ == nullptr) elements_depth_ = -1;
    const bool ok = builder().end_array();
    --depth_;
    end_element();
    return ok;
  }
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& e) {
    return document_.parse_error(position, token, e);
  }

 private:
  DomBuilder& builder() { return element_builder_ != nullptr ? *element_builder_ : document_; }

  // Every value counts against the limit; those held at once (not in a streamed element already
  // handed over) against what the machine's memory holds too.
  void count() {
    ++values_;
    if (values_ > input_.limits().values) {
      ValueBudget{.values = input_.limits().values}.refuse(input_.source(), "JSON values");
    }
    if (values_ - dropped_ > budget_.values) budget_.refuse(input_.source(), "JSON values");
  }
  // No file memplan reads nests more than a few levels; a document nested without end (arrays
  // opened and never closed) is refused before nlohmann's DOM of it grows past what memory holds.
  void deeper() const {
    if (depth_ >= kMaxJsonDepth) {
      throw InputError(
          input_.source(),
          fmt::format("nested more than {} deep: not a file memplan reads", kMaxJsonDepth));
    }
  }
  // An element of the streamed array starts here: it is built on its own.
  void begin_element() {
    if (depth_ != elements_depth_ || element_builder_ != nullptr) return;
    element_ = Json();
    element_builder_ = std::make_unique<DomBuilder>(element_, true);
    element_first_value_ = values_;
  }
  // It is whole when the depth is back at the array's: handed over, then dropped.
  void end_element() {
    if (depth_ != elements_depth_ || element_builder_ == nullptr) return;
    element_builder_.reset();
    streaming_.element(element_);
    element_ = Json();
    dropped_ += values_ - element_first_value_ + 1;
  }
  template <typename Build>
  bool scalar(Build build) {
    count();
    if (depth_ == elements_depth_ && element_builder_ == nullptr) {
      Json value;
      DomBuilder single(value, true);
      build(single);
      streaming_.element(value);
      ++dropped_;
      return true;
    }
    return build(builder());
  }

  DomBuilder document_;
  const JsonStreaming& streaming_;
  const InputStream& input_;
  ValueBudget budget_;
  std::uint64_t values_ = 0;               // values read
  std::uint64_t dropped_ = 0;              // of which in streamed elements handed over and dropped
  std::uint64_t element_first_value_ = 0;  // values_ at the start of the element being built
  int depth_ = 0;                          // how deep the parser is: 1 inside the top-level value
  int elements_depth_ = -1;    // the depth of the streamed array's elements, while inside it
  bool streamed_key_ = false;  // the top-level member being read is the streamed array's
  Json element_;
  std::unique_ptr<DomBuilder> element_builder_;
};

}  // namespace

nlohmann::json parse_json(InputStream& input, const JsonStreaming& streaming) {
  std::istream stream(&input);
  nlohmann::json document;
  StreamingSax sax(document, streaming, input);
  try {
    nlohmann::json::sax_parse(stream, &sax);
  } catch (const nlohmann::json::exception& e) {
    // nlohmann's message names the line and column; strip its "[json.exception...] " prefix.
    std::string message = e.what();
    if (auto pos = message.find("] "); pos != std::string::npos) message = message.substr(pos + 2);
    throw InputError(input.source(), fmt::format("not valid JSON ({})", message));
  }
  return document;
}

nlohmann::json read_json(const std::filesystem::path& path, const JsonStreaming& streaming) {
  InputStream input(path, Content::kJson);
  return parse_json(input, streaming);
}

nlohmann::json parse_json(std::string_view text, std::string_view source,
                          const JsonStreaming& streaming) {
  InputStream input(text, std::string(source), Content::kJson);
  return parse_json(input, streaming);
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
