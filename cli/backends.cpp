#include "cli/backends.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <filesystem>
#include <string>

#include <fmt/core.h>

#include "core/input_error.hpp"
#include "cuda_backend/cuda_module.hpp"
#include "host_backend/host_backend.hpp"

namespace memplan::cli {
namespace {

// The CUDA backend's module (cuda_backend/cuda_module.hpp), loaded on first use: lib/memplan/
// beside the binary's bin/ (in the build folder and where it is installed). Throws InputError
// naming `--backend cuda` when this build has none or it cannot be loaded (CUDA's libraries
// missing).
const cuda_backend::Module& cuda_module() {
#ifndef MEMPLAN_CUDA_MODULE
  throw sim::InputError("--backend cuda",
                        "this build has no CUDA backend (nvcc was not found when it was "
                        "configured, or MEMPLAN_WITH_CUDA=OFF)");
#else
  static const cuda_backend::Module* module = nullptr;
  if (module != nullptr) return *module;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::canonical("/proc/self/exe", ec);
  const std::filesystem::path path =
      exe.parent_path().parent_path() / "lib" / "memplan" / MEMPLAN_CUDA_MODULE;
  void* handle = ::dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = ::dlerror();
    throw sim::InputError("--backend cuda", fmt::format("cannot load the CUDA backend: {}",
                                                        why != nullptr ? why : path.string()));
  }
  using Entry = const cuda_backend::Module* (*)();
  const auto entry = reinterpret_cast<Entry>(::dlsym(handle, cuda_backend::kModuleEntry));
  const cuda_backend::Module* loaded = entry != nullptr ? entry() : nullptr;
  if (loaded == nullptr || loaded->version != cuda_backend::kModuleVersion) {
    throw sim::InputError(
        "--backend cuda",
        fmt::format("{} is not this memplan's CUDA backend (another build's?)", path.string()));
  }
  module = loaded;  // the handle stays open for the process's life
  return *module;
#endif
}

}  // namespace

std::unique_ptr<runtime::Backend> make_backend(std::string_view name) {
  if (name == "host") return std::make_unique<host_backend::HostBackend>();
  // InputError "no CUDA device: ..." without one.
  if (name == "cuda") return cuda_module().make_backend();
  throw sim::InputError("--backend", fmt::format("unknown backend '{}' (known: host, cuda)", name));
}

sim::Bytes device_memory_bytes(std::string_view name) {
  if (name == "cuda") return cuda_module().probe().device_memory_bytes;
  return static_cast<sim::Bytes>(::sysconf(_SC_PHYS_PAGES)) * ::sysconf(_SC_PAGESIZE);
}

}  // namespace memplan::cli
