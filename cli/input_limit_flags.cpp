#include "cli/input_limit_flags.hpp"

#include <cstdint>
#include <memory>
#include <string>

#include "cli/flag_checks.hpp"
#include "core/units.hpp"
#include "io/input_stream.hpp"

namespace memplan::cli {
namespace {

struct Limits {
  std::string size;
  std::int64_t values = 0;
};

// The flags on `app` when `here`, and on every command below it that has no subcommands.
void add_flags(CLI::App& app, const std::shared_ptr<Limits>& limits, bool here) {
  if (here) {
    app.add_option("--max-input-size", limits->size,
                   "the most bytes one input file may hold once decompressed (default 4GiB)")
        ->check(size_value())
        ->group("Input limits");
    app.add_option("--max-input-values", limits->values,
                   "the most JSON values one input file may hold (default 100000000)")
        ->check(integer_in(1, std::int64_t{1} << 50))
        ->group("Input limits");
  }
  for (CLI::App* sub : app.get_subcommands({}))
    add_flags(*sub, limits, sub->get_subcommands({}).empty());
}

}  // namespace

void add_input_limit_flags(CLI::App& app) {
  auto limits = std::make_shared<Limits>();
  add_flags(app, limits, /*here=*/true);
  // Runs once the whole line is parsed, before any command's callback.
  app.parse_complete_callback([limits] {
    sim::InputLimits set = sim::input_limits();
    if (!limits->size.empty())
      set.bytes = static_cast<std::uint64_t>(sim::parse_bytes(limits->size, "--max-input-size"));
    if (limits->values > 0) set.values = static_cast<std::uint64_t>(limits->values);
    sim::set_input_limits(set);
  });
}

}  // namespace memplan::cli
