#pragma once
// How much memory this process can still take from the machine it runs on: what a request that
// grows with its flags (a zoo model of a million layers, a host-backend device of the step's
// peak) is held to before it starts taking it, so that it is refused in one line instead of ending
// in std::bad_alloc or the kernel's OOM killer.
#include "core/units.hpp"

namespace memplan::sim {

/// The least of: the kernel's estimate of memory available without swapping (MemAvailable in
/// /proc/meminfo), what the process's cgroup (v2 memory.max, v1 memory.limit_in_bytes) leaves,
/// and what RLIMIT_AS leaves of the address space (`ulimit -v`). A limit that cannot be read is
/// not counted; with none readable, the largest Bytes.
[[nodiscard]] Bytes available_host_memory();

/// How many bytes hold_memory_reserve keeps back.
inline constexpr Bytes kMemoryReserve = Bytes{64} << 20;

/// Running out of memory as a std::bad_alloc that reaches whoever catches it: installs a
/// std::new_handler that, when an allocation fails, releases a reserve of kMemoryReserve bytes
/// (address space, never touched) taken for this moment and throws std::bad_alloc, so that what
/// runs while it unwinds (destructors that allocate: nlohmann's frees a DOM with a stack of its
/// own; an atomic write removes its temporary) finds memory instead of throwing from a noexcept
/// destructor into std::terminate. Called again after a release, takes the reserve again. The CLI
/// calls it at start, the Python bindings at import and after each MemoryError.
void hold_memory_reserve();

}  // namespace memplan::sim
