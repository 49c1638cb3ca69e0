// io/input_stream.hpp and the streamed JSON reading over it (#40 item 2): inputs are read a
// bounded buffer at a time, gunzipped when gzip'd, and refused in one line at the limit they
// pass (a gzip bomb, a flood of values), at a NUL byte (a trace followed by a NUL and garbage was
// accepted; `memplan info /dev/zero` grew until memory ran out) or at trailing bytes.
#include <zlib.h>

#include <chrono>
#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "io/input_stream.hpp"
#include "io/json_reader.hpp"
#include "io/trace_io.hpp"
#include "tests/support/run_command.hpp"

namespace {

using memplan::sim::Content;
using memplan::sim::InputError;
using memplan::sim::InputLimits;
using memplan::sim::InputStream;

// `text` gzip'd in memory (one member).
std::string gzip(const std::string& text) {
  z_stream z{};
  REQUIRE(deflateInit2(&z, Z_BEST_COMPRESSION, Z_DEFLATED, 16 + MAX_WBITS, 8, Z_DEFAULT_STRATEGY) ==
          Z_OK);
  std::string out(deflateBound(&z, static_cast<uLong>(text.size())), '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(text.data()));
  z.avail_in = static_cast<uInt>(text.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  REQUIRE(deflate(&z, Z_FINISH) == Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string read(const std::string& data, Content content = Content::kJson,
                 InputLimits limits = {}) {
  InputStream input(data, "in.json", content, limits);
  return memplan::sim::read_all(input);
}

std::string error_of(const std::string& data, Content content = Content::kJson,
                     InputLimits limits = {}) {
  try {
    (void)read(data, content, limits);
  } catch (const InputError& e) {
    return e.what();
  }
  return "(no error)";
}

std::string write_file(const std::string& name, const std::string& data) {
  const std::string path = memplan::test::temp_dir() + "/" + name;
  std::ofstream(path, std::ios::binary) << data;
  return path;
}

}  // namespace

TEST_CASE("plain and gzip'd inputs read the same bytes", "[io][input]") {
  std::string text;
  for (int i = 0; i < 300000; ++i) text += "{\"i\": " + std::to_string(i) + "}\n";  // > 1 chunk
  CHECK(read(text) == text);
  CHECK(read(gzip(text)) == text);
  // Concatenated gzip members are one input (gzip's own rule).
  CHECK(read(gzip(text) + gzip("tail")) == text + "tail");
  const std::string path = write_file("big.json.gz", gzip(text));
  CHECK(memplan::sim::read_file(path) == text);
  InputStream file(path, Content::kJson);
  CHECK(file.gzip());
}

TEST_CASE("a broken gzip input is one line naming it", "[io][input][bad_input]") {
  const std::string gz = gzip(std::string(100000, 'x'));
  CHECK(error_of(gz.substr(0, gz.size() / 2)) ==
        "in.json: truncated gzip data (the file ends in the middle of the stream)");
  std::string bad = gz;
  for (std::size_t i = 12; i < 40; ++i) bad[i] = static_cast<char>(bad[i] ^ 0x5a);
  CHECK(error_of(bad).rfind("in.json: corrupt gzip data: ", 0) == 0);
  CHECK(error_of(gz + "garbage").rfind("in.json: corrupt gzip data: ", 0) == 0);
}

TEST_CASE("an input past the size limit is refused where it passes it", "[io][input][bad_input]") {
  // A gzip bomb: 64 MiB of zeros in 64 KiB, read with a 1 MiB limit.
  const std::string bomb = gzip(std::string(std::size_t{64} << 20, '0'));
  REQUIRE(bomb.size() < (std::size_t{1} << 17));
  const InputLimits small{std::uint64_t{1} << 20, 1000};
  CHECK(error_of(bomb, Content::kJson, small) ==
        "in.json: larger than 1.00 MiB once decompressed (memplan's input limit: raise it with "
        "--max-input-size, or memplan.set_input_limits in Python)");
  CHECK(error_of(std::string((1 << 20) + 1, ' '), Content::kJson, small)
            .find("larger than 1.00 MiB (memplan's input limit") != std::string::npos);
  CHECK(read(std::string(1 << 20, 'x'), Content::kBinary, small).size() == (1u << 20));
}

TEST_CASE("a NUL byte ends no text input", "[io][input][bad_input]") {
  const std::string trace = R"({"format": "memplan-trace", "version": 1})";
  CHECK(error_of(trace + std::string(1, '\0') + "garbage") ==
        "in.json: a NUL byte at byte 41: not a text file");
  CHECK(error_of(gzip(trace + std::string(1, '\0'))) ==
        "in.json: a NUL byte at byte 41 of the decompressed data: not a text file");
  // Binary inputs (a memory snapshot's pickle) hold any byte.
  CHECK(read(trace + std::string(1, '\0'), Content::kBinary).size() == trace.size() + 1);
  // /dev/zero is refused at its first byte, not read until memory runs out.
  const auto start = std::chrono::steady_clock::now();
  try {
    (void)memplan::sim::read_json("/dev/zero");
    FAIL("read /dev/zero");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == "/dev/zero: a NUL byte at byte 0: not a text file");
  }
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(5));
}

TEST_CASE("what is not a readable file", "[io][input][bad_input]") {
  const std::string dir = memplan::test::temp_dir();
  try {
    InputStream input(dir, Content::kJson);
    FAIL("opened a folder");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == dir + ": is a directory, not a file");
  }
  try {
    InputStream input(dir + "/nope.json", Content::kJson);
    FAIL("opened a missing file");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) == dir + "/nope.json: cannot open for reading (does it exist?)");
  }
}

TEST_CASE("JSON is parsed as it streams, its values counted", "[io][input][json]") {
  InputLimits limits{std::uint64_t{1} << 20, 10};
  // [0,...,0]: the array and its 9 numbers are 10 values; one more is refused.
  InputStream ten("[0,0,0,0,0,0,0,0,0]", "ten.json", Content::kJson, limits);
  CHECK(memplan::sim::parse_json(ten).size() == 9);
  InputStream eleven("[0,0,0,0,0,0,0,0,0,0]", "eleven.json", Content::kJson, limits);
  try {
    (void)memplan::sim::parse_json(eleven);
    FAIL("read 11 values under a limit of 10");
  } catch (const InputError& e) {
    CHECK(std::string(e.what()) ==
          "eleven.json: holds more than 10 JSON values (memplan's input limit: raise it with "
          "--max-input-values, or memplan.set_input_limits in Python)");
  }
  // Bytes after the document are refused, as is a document cut short.
  CHECK_THROWS_WITH(memplan::sim::parse_json(R"({"a": 1} {"b": 2})", "two.json"),
                    Catch::Contains("two.json: not valid JSON (parse error at line 1, column 10") &&
                        Catch::Contains("expected end of input"));
  CHECK_THROWS_WITH(memplan::sim::parse_json(R"({"a": [1, 2)", "cut.json"),
                    Catch::Contains("cut.json: not valid JSON (parse error at line 1, column 12") &&
                        Catch::Contains("unexpected end of input"));
  // The elements of a streamed array are handed over one at a time and not kept; top-level keys
  // are shown as they are read.
  memplan::sim::JsonStreaming streaming;
  std::vector<nlohmann::json> seen;
  std::vector<std::string> keys;
  streaming.element = [&](nlohmann::json& e) { seen.push_back(e); };
  streaming.streamed_key = "events";
  streaming.top_key = [&](const std::string& key) { keys.push_back(key); };
  const nlohmann::json kept = memplan::sim::parse_json(
      R"({"a": [1], "events": [{"x": [1, {"y": 2}]}, 3, [4, [5]]], "b": {"events": [6]}})",
      "s.json", streaming);
  CHECK(kept == nlohmann::json::parse(R"({"a": [1], "events": [], "b": {"events": [6]}})"));
  CHECK(seen == std::vector<nlohmann::json>{nlohmann::json::parse(R"({"x": [1, {"y": 2}]})"), 3,
                                            nlohmann::json::parse("[4, [5]]")});
  CHECK(keys == std::vector<std::string>{"a", "events", "b"});
  // A top-level array streams its elements.
  seen.clear();
  CHECK(memplan::sim::parse_json("[{}, 1]", "r.json", streaming) == nlohmann::json::array());
  CHECK(seen == std::vector<nlohmann::json>{nlohmann::json::object(), 1});
}

TEST_CASE("a memplan trace may be gzip'd, a profiler trace is refused as soon as it shows",
          "[io][input]") {
  const std::string text = memplan::sim::read_file(MEMPLAN_SOURCE_DIR "/traces/mlp4.json");
  const std::string gz = write_file("mlp4.json.gz", gzip(text));
  CHECK(memplan::sim::read_trace(gz) ==
        memplan::sim::read_trace(MEMPLAN_SOURCE_DIR "/traces/mlp4.json"));
  // The refusal comes at the `traceEvents` key: the rest (here not JSON at all) is never read.
  const std::string profiler = write_file("p.json", R"({"traceEvents": [{"ph": "X"}, !!!)");
  CHECK_THROWS_WITH(memplan::sim::read_trace(profiler),
                    Catch::Contains("a profiler (Chrome) trace, not a memplan trace"));
  // A bare array of events is refused once read.
  const std::string bare = write_file("b.json", R"([{"ph": "X", "cat": "cpu_op", "name": "a"}])");
  CHECK_THROWS_WITH(memplan::sim::read_job(bare),
                    Catch::Contains("a profiler (Chrome) trace, not a memplan trace"));
}

TEST_CASE("400,000 small objects in one array parse in linear time", "[io][input][json]") {
  // Found by scripts/fuzz-cli: nlohmann's parser callback scanned the whole array after each
  // object it completed, and 400,000 {"a":1} took minutes. Now about a second.
  std::string text = "[";
  for (int i = 0; i < 400000; ++i) text += R"({"a":1},)";
  text += "0]";
  const auto start = std::chrono::steady_clock::now();
  CHECK(memplan::sim::parse_json(text, "flood.json").size() == 400001);
  CHECK(std::chrono::steady_clock::now() - start < std::chrono::seconds(20));
}

TEST_CASE("a document nested without end is refused at 1000 levels", "[io][input][json]") {
  // Found by scripts/fuzz-cli: arrays opened and never closed grew nlohmann's DOM until memory ran
  // out, and its destructor's std::bad_alloc aborted the Python interpreter.
  CHECK(memplan::sim::parse_json(std::string(1000, '[') + std::string(1000, ']'), "ok.json")
            .is_array());
  std::string open;
  for (int i = 0; i < 100000; ++i) open += R"([1,2,{"a":"\u001b"},)";
  CHECK_THROWS_WITH(memplan::sim::parse_json(open, "deep.json"),
                    "deep.json: nested more than 1000 deep: not a file memplan reads");
}

TEST_CASE("whitespace between tokens is cut past a run of 4 KiB, never inside a string",
          "[io][input][json]") {
  // nlohmann's lexer keeps every byte between two tokens: a gzip of 4 GB of spaces was 4 GB held.
  const std::string run(std::size_t{1} << 20, ' ');
  const std::string text = "[1," + run + "\"" + run + "\"," + run + "2]" + run;
  const std::string read_back = read(text);
  CHECK(read_back == "[1," + std::string(memplan::sim::kMaxWhitespaceRun, ' ') + "\"" + run +
                         "\"," + std::string(memplan::sim::kMaxWhitespaceRun, ' ') + "2]" +
                         std::string(memplan::sim::kMaxWhitespaceRun, ' '));
  // An escaped quote does not end the string; the string's spaces are all kept.
  const std::string escaped = "[\"a\\\"" + run + "\"]";
  CHECK(read(escaped) == escaped);
  CHECK(memplan::sim::parse_json(text, "t.json").at(1).get<std::string>() == run);
}
