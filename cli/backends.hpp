#pragma once
// The one place that maps a `--backend` name to a runtime::Backend.
#include <memory>
#include <string_view>

#include "runtime/backend.hpp"

namespace memplan::cli {

/// The backend called `name` ("host", "cuda"); throws sim::InputError naming `--backend` (and the
/// known names) for any other.
std::unique_ptr<runtime::Backend> make_backend(std::string_view name);

/// The memory of the device the backend `name` runs on: the GPU's (cuda), the machine's physical
/// memory (host, whose device is a region of it). What `record` writes as the trace's device
/// memory unless --memory is given.
sim::Bytes device_memory_bytes(std::string_view name);

}  // namespace memplan::cli
