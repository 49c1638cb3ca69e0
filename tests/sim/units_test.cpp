#include <catch2/catch.hpp>

#include "sim/input_error.hpp"
#include "sim/units.hpp"

using namespace memplan::sim;

TEST_CASE("sizes, bandwidths and durations parse with their units", "[sim][units]") {
  CHECK(parse_bytes("16GiB", "--memory") == 16LL * 1024 * 1024 * 1024);
  CHECK(parse_bytes("12GB", "--memory") == 12'000'000'000LL);
  CHECK(parse_bytes("512 MiB", "--memory") == 512LL * 1024 * 1024);
  CHECK(parse_bytes("4096", "--memory") == 4096);
  CHECK(parse_bandwidth("12.5GB/s", "--h2d") == 12.5e9);
  CHECK(parse_duration("10us", "--latency") == 10'000);
  CHECK(parse_duration("1.5ms", "--latency") == 1'500'000);
  CHECK_THROWS_WITH(parse_bytes("16 parsecs", "--memory"),
                    Catch::Contains("--memory") && Catch::Contains("unknown unit"));
  CHECK_THROWS_AS(parse_bytes("-5GB", "--memory"), InputError);
  CHECK_THROWS_AS(parse_bandwidth("0GB/s", "--h2d"), InputError);
  CHECK_THROWS_AS(parse_bytes("1e30", "--memory"), InputError);
  CHECK_THROWS_AS(parse_duration("fast", "--latency"), InputError);
}

TEST_CASE("format_bytes is short and exact for small values", "[sim][units]") {
  CHECK(format_bytes(512) == "512 B");
  CHECK(format_bytes(1536) == "1.50 KiB");
  CHECK(format_bytes(16LL << 30) == "16.00 GiB");
}
