#include "cli/input_limit_flags.hpp"

#include <cstdint>
#include <string>

#include "cli/flag_checks.hpp"
#include "core/units.hpp"
#include "io/input_stream.hpp"

namespace memplan::cli {

void add_input_limit_flags(CLI::App& command) {
  command
      .add_option_function<std::string>(
          "--max-input-size",
          [](const std::string& size) {
            sim::InputLimits limits = sim::input_limits();
            limits.bytes = static_cast<std::uint64_t>(sim::parse_bytes(size, "--max-input-size"));
            sim::set_input_limits(limits);
          },
          "the most bytes one input file may hold once decompressed (default 4GiB)")
      ->check(size_value())
      ->group("Input limits");
  command
      .add_option_function<std::int64_t>(
          "--max-input-values",
          [](std::int64_t values) {
            sim::InputLimits limits = sim::input_limits();
            limits.values = static_cast<std::uint64_t>(values);
            sim::set_input_limits(limits);
          },
          "the most JSON values one input file may hold (default 100000000)")
      ->check(integer_in(1, std::int64_t{1} << 50))
      ->group("Input limits");
}

}  // namespace memplan::cli
