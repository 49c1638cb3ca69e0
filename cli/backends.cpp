#include "cli/backends.hpp"

#include <unistd.h>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "host_backend/host_backend.hpp"
#ifdef MEMPLAN_WITH_CUDA_BACKEND
#include "cuda_backend/cuda_backend.hpp"
#include "cuda_backend/cuda_environment.hpp"
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

sim::Bytes device_memory_bytes(std::string_view name) {
#ifdef MEMPLAN_WITH_CUDA_BACKEND
  if (name == "cuda") return cuda_backend::probe_cuda().device_memory_bytes;
#endif
  (void)name;
  return static_cast<sim::Bytes>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
}

}  // namespace memplan::cli
