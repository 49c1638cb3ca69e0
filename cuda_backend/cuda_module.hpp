#pragma once
// The CUDA backend as a module (lib/memplan/libmemplan_cuda.so, beside the binary's bin/) that the
// memplan binary loads only when `--backend cuda` asks for it (cli/backends.cpp): every other run
// maps no CUDA runtime, cuBLAS or cuDNN (220 MB of a run's memory before), and one build starts on
// a machine without CUDA's libraries, saying so only when the GPU is asked for. The module holds
// its own copy of the libraries it needs, its symbols hidden but memplan_cuda_module(); what
// crosses is the Backend it makes (virtual calls on the types both sides compile from the same
// headers) and the probe's CudaEnvironment.
#include <memory>

#include "cuda_backend/cuda_environment.hpp"
#include "runtime/backend.hpp"

namespace memplan::cuda_backend {

/// Raised whenever Module changes; the binary refuses a module of another version.
inline constexpr int kModuleVersion = 1;

struct Module {
  int version;
  /// make_cuda_backend(): throws InputError("--backend cuda", ...) without a device.
  std::unique_ptr<runtime::Backend> (*make_backend)();
  /// probe_cuda().
  CudaEnvironment (*probe)();
};

/// The name the module's entry point is looked up by.
inline constexpr const char* kModuleEntry = "memplan_cuda_module";

}  // namespace memplan::cuda_backend

/// The module's one exported symbol.
extern "C" const memplan::cuda_backend::Module* memplan_cuda_module();
