// Every kind of bad trace input gets an InputError naming the file, the JSON path and the problem.
// tests/cli/info_command_test.cpp runs the same cases through the binary (one line, exit 2).
#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "core/input_error.hpp"
#include "io/trace_io.hpp"
#include "tests/io/bad_traces.hpp"

using namespace memplan::sim;

TEST_CASE("every bad trace is rejected with the place and the problem",
          "[sim][trace_io][bad_input]") {
  for (const auto& bad : memplan::test::bad_traces()) {
    CAPTURE(bad.name);
    try {
      parse_trace(bad.text, "bad.json");
      FAIL("accepted a bad trace: " << bad.name);
    } catch (const InputError& e) {
      const std::string message = e.what();
      CAPTURE(message);
      CHECK(message.rfind("bad.json", 0) == 0);
      CHECK(message.find(bad.where) != std::string::npos);
      CHECK(message.find(bad.problem) != std::string::npos);
      CHECK(message.find('\n') == std::string::npos);
    }
  }
}

TEST_CASE("the valid base of the bad-trace cases is accepted", "[sim][trace_io][bad_input]") {
  CHECK_NOTHROW(parse_trace(memplan::test::valid_small_trace().dump(), "good.json"));
}
