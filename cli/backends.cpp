#include "cli/backends.hpp"

#include <fmt/core.h>

#include "host_backend/host_backend.hpp"
#include "sim/input_error.hpp"

namespace memplan::cli {

std::unique_ptr<runtime::Backend> make_backend(std::string_view name) {
  if (name == "host") return std::make_unique<host_backend::HostBackend>();
  throw sim::InputError("--backend", fmt::format("unknown backend '{}' (known: host)", name));
}

}  // namespace memplan::cli
