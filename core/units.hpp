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

/// The longest time the simulator represents, about 146 years. Every duration it computes (a
/// copy at a crawling link, a sum of op times) saturates here instead of overflowing: saturated
/// sums stay below INT64_MAX, so times are in range by construction. Only absurd inputs reach it
/// (a link of 1 B/s moving a PiB), and a run that does has no time to report: the engine marks it
/// saturated and not feasible (Timeline::saturated in sim/timeline.hpp), and says why.
inline constexpr Nanoseconds kMaxNanoseconds = Nanoseconds{1} << 62;

/// a + b for non-negative a and b, saturating at kMaxNanoseconds.
constexpr Nanoseconds add_ns(Nanoseconds a, Nanoseconds b) {
  return a >= kMaxNanoseconds - b ? kMaxNanoseconds : a + b;
}

/// ceil(bytes / bytes_per_s) in nanoseconds, saturating at kMaxNanoseconds (also for a bandwidth
/// of zero, a denormal or NaN). `bytes` is non-negative.
Nanoseconds transfer_ns(Bytes bytes, BytesPerSecond bytes_per_s);

/// Seconds as a double, for printing and JSON output only; the simulator never computes in it.
constexpr double to_seconds(Nanoseconds ns) {
  return static_cast<double>(ns) * 1e-9;
}

/// Milliseconds as a double, for printing and JSON output only.
constexpr double to_milliseconds(Nanoseconds ns) {
  return static_cast<double>(ns) * 1e-6;
}

// The unit grammar of every size, bandwidth and time a user writes (README, "Units"): a decimal
// number, optional spaces, then a unit, matched without regard to case except for the b/B of a
// bandwidth. A bare number is refused (with a hint), so that `--memory 16` is never 16 bytes.
//   size       B; kB MB GB TB PB EB (powers of 1000; the B may be left out: 16G); KiB MiB GiB
//              TiB PiB EiB (powers of 1024; 16Gi is 16GiB). At most kMaxBytes.
//   bandwidth  a size unit with /s or ps: GB/s, GBps, GiB/s are bytes per second; a lowercase b
//              is bits: Gb/s, Gbps, Mbit/s (divided by 8). From 1 B/s to 1 EB/s.
//   duration   ns, us (or µs), ms, s, min, h. At most kMaxParsedDuration.
// Each throws InputError naming `where` with what was wrong and an example that is right.

/// The largest size a flag takes: 1 EiB (so that sums of a few of them stay in range).
inline constexpr Bytes kMaxBytes = Bytes{1} << 60;
/// The longest duration a flag takes: one day.
inline constexpr Nanoseconds kMaxParsedDuration = Nanoseconds{86'400} * kNanosecondsPerSecond;

/// "16GiB", "12GB", "512 MiB", "1.5gib" (bytes, rounded to the nearest byte).
Bytes parse_bytes(std::string_view text, std::string_view where);
/// "12.5GB/s", "900MBps", "100Gb/s" (bits), "16GiB/s": bytes per second.
BytesPerSecond parse_bandwidth(std::string_view text, std::string_view where);
/// "10us", "1.5ms", "2s", "300ns" (rounded to the nearest nanosecond).
Nanoseconds parse_duration(std::string_view text, std::string_view where);

/// "1.50 GiB", "512 B": a short human-readable size.
std::string format_bytes(Bytes bytes);

}  // namespace memplan::sim
