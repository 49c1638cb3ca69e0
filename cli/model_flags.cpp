#include "cli/model_flags.hpp"

#include <exception>
#include <vector>

#include <fmt/core.h>

#include "sim/input_error.hpp"

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
  command.add_option("--batch", flags.batch, "batch size");
  command.add_option("--input", flags.input, "input extents, HxW (images) or TxHxW (clips)");
  command.add_option("--depth", flags.depth, "depth of the deep residual family ('resnet')");
  command.add_option("--layers", flags.transformer.layers, "transformer layers (gpt)");
  command.add_option("--hidden", flags.transformer.hidden, "transformer hidden size (gpt)");
  command.add_option("--heads", flags.transformer.heads, "attention heads (gpt)");
  command.add_option("--seq", flags.transformer.sequence, "sequence length (gpt)");
  command.add_option("--vocab", flags.transformer.vocab, "vocabulary size (gpt)");
}

zoo::ModelOptions model_options_from_flags(const CLI::App& command, const ModelFlags& flags) {
  zoo::ModelOptions options;
  options.batch = flags.batch;
  if (!flags.input.empty()) options.input = parse_extents(flags.input);
  if (command.count("--depth") != 0) options.depth = flags.depth;
  options.transformer = flags.transformer;
  return options;
}

}  // namespace memplan::cli
