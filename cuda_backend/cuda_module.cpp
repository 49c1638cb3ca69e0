#include "cuda_backend/cuda_module.hpp"

#include "cuda_backend/cuda_backend.hpp"

extern "C" __attribute__((visibility("default"))) const memplan::cuda_backend::Module*
memplan_cuda_module() {
  static const memplan::cuda_backend::Module module{memplan::cuda_backend::kModuleVersion,
                                                    &memplan::cuda_backend::make_cuda_backend,
                                                    &memplan::cuda_backend::probe_cuda};
  return &module;
}
