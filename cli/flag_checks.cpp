#include "cli/flag_checks.hpp"

#include <charconv>
#include <cmath>
#include <limits>
#include <string>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "core/units.hpp"
#include "requests/machine_request.hpp"

namespace memplan::cli {
namespace {

// The parse's own message (CLI11 names the flag itself).
template <typename Parse>
CLI::Validator unit_validator(Parse parse, std::string description) {
  return CLI::Validator(
      [parse](std::string& text) -> std::string {
        try {
          parse(text);
          return {};
        } catch (const sim::InputError& e) {
          return e.problem();
        }
      },
      std::move(description));
}

}  // namespace

void refuse_empty_values(CLI::App& app) {
  const CLI::Validator non_empty(
      [](std::string& text) -> std::string {
        return text.empty() ? "an empty value: give one, or leave the flag out" : std::string();
      },
      "");
  for (CLI::Option* option : app.get_options()) {
    if (option->get_type_size_max() > 0) option->check(non_empty);  // flags take no value
  }
  for (CLI::App* command : app.get_subcommands([](CLI::App*) { return true; })) {
    refuse_empty_values(*command);
  }
}

CLI::Validator integer_in(std::int64_t lo, std::int64_t hi) {
  return CLI::Validator(
      [lo, hi](std::string& text) -> std::string {
        std::int64_t value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec == std::errc{} && ptr == end && value >= lo && value <= hi) return {};
        return fmt::format("'{}' is not a whole number from {} to {}", text, lo, hi);
      },
      hi == std::numeric_limits<std::int64_t>::max() ? fmt::format("[{}, 2^63)", lo)
                                                     : fmt::format("[{}, {}]", lo, hi));
}

CLI::Validator seconds_up_to(double hi) {
  return CLI::Validator(
      [hi](std::string& text) -> std::string {
        double value = 0;
        const char* end = text.data() + text.size();
        const auto [ptr, ec] = std::from_chars(text.data(), end, value);
        if (ec == std::errc{} && ptr == end && std::isfinite(value) && value > 0 && value <= hi) {
          return {};
        }
        return fmt::format("'{}' is not a number of seconds above 0 and at most {:g}", text, hi);
      },
      fmt::format("(0, {:g}]", hi));
}

CLI::Validator size_value() {
  return unit_validator([](const std::string& t) { sim::parse_bytes(t, ""); }, "SIZE");
}
CLI::Validator budget_value() {
  return unit_validator(
      [](const std::string& t) {
        if (requests::is_share(requests::Quantity{t})) {
          (void)requests::share_percent(t, "");
        } else {
          sim::parse_bytes(t, "");
        }
      },
      "SIZE|N%");
}
CLI::Validator bandwidth_value() {
  return unit_validator([](const std::string& t) { sim::parse_bandwidth(t, ""); }, "BANDWIDTH");
}
CLI::Validator gap_value() {
  return unit_validator(
      [](const std::string& t) { (void)requests::gap_of(requests::Quantity{t}, ""); }, "GAP");
}
CLI::Validator duration_value() {
  return unit_validator([](const std::string& t) { sim::parse_duration(t, ""); }, "DURATION");
}

}  // namespace memplan::cli
