#pragma once
// Units of the simulator: time is an integer count of nanoseconds, sizes an integer count of bytes.
// Field names carry the unit (`duration_ns`, `bytes`, `h2d_bytes_per_s`); these aliases make the
// intent visible in signatures. Parsing of human-written quantities ("16GiB", "12.5GB/s", "10us")
// lives here too, so every command reads them the same way.
#include <cstdint>
#include <string_view>

namespace memplan::sim {

using Nanoseconds = std::int64_t;
using Bytes = std::int64_t;
/// Bandwidth in bytes per second (decimal units, as link vendors quote them).
using BytesPerSecond = double;

inline constexpr Nanoseconds kNanosecondsPerSecond = 1'000'000'000;

/// Seconds as a double, for printing and JSON output only; the simulator never computes in it.
constexpr double to_seconds(Nanoseconds ns) {
  return static_cast<double>(ns) * 1e-9;
}

/// "16GiB", "12GB", "512MiB", "4096" (bytes), "1.5GiB". Throws InputError naming `where`.
Bytes parse_bytes(std::string_view text, std::string_view where);
/// "12.5GB/s", "900MB/s", "1e9" (bytes per second). Throws InputError naming `where`.
BytesPerSecond parse_bandwidth(std::string_view text, std::string_view where);
/// "10us", "1.5ms", "2s", "300ns". Throws InputError naming `where`.
Nanoseconds parse_duration(std::string_view text, std::string_view where);

/// "1.50 GiB", "512 B": a short human-readable size.
std::string format_bytes(Bytes bytes);

}  // namespace memplan::sim
