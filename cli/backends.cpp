#include "cli/backends.hpp"

#include <fmt/core.h>

#include "host_backend/host_backend.hpp"
#include "sim/input_error.hpp"
#ifdef MEMPLAN_WITH_CUDA_BACKEND
#include "cuda_backend/cuda_backend.hpp"
#endif

namespace memplan::cli {

std::unique_ptr<runtime::Backend> make_backend(std::string_view name) {
  if (name == "host") return std::make_unique<host_backend::HostBackend>();
  if (name == "cuda") {
#ifdef MEMPLAN_WITH_CUDA_BACKEND
    return cuda_backend::make_cuda_backend();  // InputError "no CUDA device: ..." without one
#else
    throw sim::InputError("--backend cuda",
                          "this build has no CUDA backend (nvcc was not found when it was "
                          "configured, or MEMPLAN_WITH_CUDA=OFF)");
#endif
  }
  throw sim::InputError("--backend", fmt::format("unknown backend '{}' (known: host, cuda)", name));
}

}  // namespace memplan::cli
