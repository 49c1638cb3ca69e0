#pragma once
// The flags that shape a zoo model (--batch, --input, --depth and the transformer's), shared by
// `zoo` (which models the step) and `record` (which runs it on a backend) and parsed the same way.
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

#include "zoo/models.hpp"

namespace memplan::cli {

struct ModelFlags {
  std::int64_t batch = 0;
  std::string input;
  std::int64_t depth = 0;
  zoo::TransformerShape decoder;  // each field read only where its flag was given
};

void add_model_flags(CLI::App& command, ModelFlags& flags);

/// The model options the flags give (--depth only when it was given). Throws InputError naming
/// --input when the extents are not HxW or TxHxW, and the flag when `model` does not take it (a
/// decoder's flag on an image model, --input on a decoder).
zoo::ModelOptions model_options_from_flags(const CLI::App& command, const ModelFlags& flags,
                                           const zoo::ModelInfo& model);

}  // namespace memplan::cli
