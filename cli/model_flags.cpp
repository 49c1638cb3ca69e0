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
       {std::tuple{"--layers", &flags.decoder.layers, "decoder layers (gpt, llama)"},
        {"--hidden", &flags.decoder.hidden, "decoder hidden size (gpt, llama)"},
        {"--heads", &flags.decoder.heads, "attention heads (gpt, llama)"},
        {"--seq", &flags.decoder.sequence, "sequence length (gpt, llama)"},
        {"--vocab", &flags.decoder.vocab, "vocabulary size (gpt, llama)"},
        {"--intermediate", &flags.decoder.intermediate,
         "MLP width (gpt: 4 x hidden; llama: 2/3 of 4 x hidden rounded up to a multiple of 256)"},
        {"--kv-heads", &flags.decoder.kv_heads,
         "key/value heads, dividing --heads: grouped-query attention (llama; default --heads)"}}) {
    command.add_option(name, *value, help)->check(integer_in(1, kMaxExtent));
  }
}

zoo::ModelOptions model_options_from_flags(const CLI::App& command, const ModelFlags& flags,
                                           const zoo::ModelInfo& model) {
  // A flag the model does not take is refused, not ignored (a decoder's --layers on a CNN).
  const bool decoder = model.input_dims == 0;
  zoo::ModelOptions options;
  zoo::TransformerOptions& shape = options.transformer;
  for (const auto& [name, value, field] :
       {std::tuple{"--layers", flags.decoder.layers, &shape.layers},
        {"--hidden", flags.decoder.hidden, &shape.hidden},
        {"--heads", flags.decoder.heads, &shape.heads},
        {"--seq", flags.decoder.sequence, &shape.sequence},
        {"--vocab", flags.decoder.vocab, &shape.vocab},
        {"--intermediate", flags.decoder.intermediate, &shape.intermediate},
        {"--kv-heads", flags.decoder.kv_heads, &shape.kv_heads}}) {
    if (command.count(name) == 0) continue;
    if (!decoder) {
      throw sim::InputError(
          name, fmt::format("{} is not a decoder: {} is for gpt and llama", model.name, name));
    }
    *field = value;
  }
  if (decoder && !flags.input.empty()) {
    throw sim::InputError("--input", fmt::format("{} takes tokens: give --seq", model.name));
  }
  options.batch = flags.batch;
  if (!flags.input.empty()) options.input = parse_extents(flags.input);
  if (command.count("--depth") != 0) options.depth = flags.depth;
  return options;
}

}  // namespace memplan::cli
