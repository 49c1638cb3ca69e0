#include "cli/model_flags.hpp"

#include <exception>
#include <tuple>
#include <vector>

#include <fmt/core.h>

#include "cli/flag_checks.hpp"
#include "core/input_error.hpp"

namespace memplan::cli {
namespace {

// "224x224" or "16x112x112" → extents. Throws InputError naming --input.
std::vector<std::int64_t> parse_extents(const std::string& text) {
  std::vector<std::int64_t> out;
  std::size_t start = 0;
  while (true) {
    const std::size_t x = text.find('x', start);
    const std::string part =
        text.substr(start, x == std::string::npos ? std::string::npos : x - start);
    std::size_t used = 0;
    long long value = 0;
    try {
      value = std::stoll(part, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (part.empty() || used != part.size()) {
      throw sim::InputError("--input", fmt::format("'{}' is not HxW or TxHxW", text));
    }
    out.push_back(value);
    if (x == std::string::npos) break;
    start = x + 1;
  }
  return out;
}

}  // namespace

void add_model_flags(CLI::App& command, ModelFlags& flags) {
  constexpr std::int64_t kMaxExtent = 1 << 20;
  // --batch is checked by the zoo (at least 1; every tensor it makes under 1 PiB).
  command.add_option("--batch", flags.batch, "batch size");
  command.add_option("--input", flags.input, "input extents, HxW (images) or TxHxW (clips)");
  command.add_option("--depth", flags.depth, "depth of the deep residual family ('resnet')")
      ->check(integer_in(1, kMaxExtent));
  for (const auto& [name, value, help] :
       {std::tuple{"--layers", &flags.transformer.layers, "transformer layers (gpt)"},
        {"--hidden", &flags.transformer.hidden, "transformer hidden size (gpt)"},
        {"--heads", &flags.transformer.heads, "attention heads (gpt)"},
        {"--seq", &flags.transformer.sequence, "sequence length (gpt)"},
        {"--vocab", &flags.transformer.vocab, "vocabulary size (gpt)"}}) {
    command.add_option(name, *value, help)->check(integer_in(1, kMaxExtent));
  }
}

zoo::ModelOptions model_options_from_flags(const CLI::App& command, const ModelFlags& flags,
                                           const zoo::ModelInfo& model) {
  // A flag the model does not take is refused, not ignored (a transformer's --layers on a CNN).
  const bool transformer = model.input_dims == 0;
  for (const char* name : {"--layers", "--hidden", "--heads", "--seq", "--vocab"}) {
    if (!transformer && command.count(name) != 0) {
      throw sim::InputError(
          name, fmt::format("{} is not a transformer: {} is for gpt", model.name, name));
    }
  }
  if (transformer && !flags.input.empty()) {
    throw sim::InputError("--input", fmt::format("{} takes tokens: give --seq", model.name));
  }
  zoo::ModelOptions options;
  options.batch = flags.batch;
  if (!flags.input.empty()) options.input = parse_extents(flags.input);
  if (command.count("--depth") != 0) options.depth = flags.depth;
  options.transformer = flags.transformer;
  return options;
}

}  // namespace memplan::cli
