#include "sim/units.hpp"

#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <string>

#include <fmt/core.h>

#include "sim/input_error.hpp"

namespace memplan::sim {
namespace {

struct Suffix {
  std::string_view name;
  double factor;
};

// Splits "12.5GB/s" into 12.5 and "GB/s"; throws when the number part is missing or malformed.
std::pair<double, std::string_view> split_number(std::string_view text, std::string_view where,
                                                 std::string_view what) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  double value = 0;
  const auto* begin = text.data();
  const auto* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (ec != std::errc{} || ptr == begin) {
    throw InputError(std::string(where), fmt::format("'{}' is not a {}", text, what));
  }
  std::string_view rest(ptr, static_cast<std::size_t>(end - ptr));
  while (!rest.empty() && std::isspace(static_cast<unsigned char>(rest.front())))
    rest.remove_prefix(1);
  if (!std::isfinite(value) || value < 0) {
    throw InputError(std::string(where), fmt::format("'{}' is not a non-negative {}", text, what));
  }
  return {value, rest};
}

template <std::size_t N>
double apply_suffix(std::string_view text, std::string_view where, std::string_view what,
                    const std::array<Suffix, N>& suffixes, std::string_view examples) {
  auto [value, rest] = split_number(text, where, what);
  for (const auto& s : suffixes) {
    if (rest == s.name) return value * s.factor;
  }
  throw InputError(std::string(where), fmt::format("'{}': unknown unit '{}' for a {} (use {})",
                                                   text, rest, what, examples));
}

std::int64_t to_integer(double value, std::string_view text, std::string_view where,
                        std::string_view what) {
  if (value > 9.0e18) {
    throw InputError(std::string(where), fmt::format("'{}' is too large for a {}", text, what));
  }
  return static_cast<std::int64_t>(std::llround(value));
}

}  // namespace

Bytes parse_bytes(std::string_view text, std::string_view where) {
  static constexpr std::array<Suffix, 12> kSuffixes{{{"", 1.0},
                                                     {"B", 1.0},
                                                     {"KB", 1e3},
                                                     {"MB", 1e6},
                                                     {"GB", 1e9},
                                                     {"TB", 1e12},
                                                     {"KiB", 1024.0},
                                                     {"MiB", 1024.0 * 1024},
                                                     {"GiB", 1024.0 * 1024 * 1024},
                                                     {"TiB", 1024.0 * 1024 * 1024 * 1024},
                                                     {"k", 1e3},
                                                     {"G", 1e9}}};
  return to_integer(apply_suffix(text, where, "size", kSuffixes, "B, KB, MB, GB, KiB, MiB, GiB"),
                    text, where, "size");
}

BytesPerSecond parse_bandwidth(std::string_view text, std::string_view where) {
  static constexpr std::array<Suffix, 9> kSuffixes{{{"", 1.0},
                                                    {"B/s", 1.0},
                                                    {"KB/s", 1e3},
                                                    {"MB/s", 1e6},
                                                    {"GB/s", 1e9},
                                                    {"TB/s", 1e12},
                                                    {"KiB/s", 1024.0},
                                                    {"MiB/s", 1024.0 * 1024},
                                                    {"GiB/s", 1024.0 * 1024 * 1024}}};
  const double value = apply_suffix(text, where, "bandwidth", kSuffixes, "B/s, MB/s, GB/s, GiB/s");
  if (value <= 0)
    throw InputError(std::string(where), fmt::format("'{}': bandwidth must be positive", text));
  return value;
}

Nanoseconds parse_duration(std::string_view text, std::string_view where) {
  static constexpr std::array<Suffix, 6> kSuffixes{
      {{"ns", 1.0}, {"us", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"µs", 1e3}, {"min", 60e9}}};
  return to_integer(apply_suffix(text, where, "duration", kSuffixes, "ns, us, ms, s"), text, where,
                    "duration");
}

std::string format_bytes(Bytes bytes) {
  static constexpr std::array<std::string_view, 5> kUnits{"B", "KiB", "MiB", "GiB", "TiB"};
  auto value = static_cast<double>(bytes);
  std::size_t unit = 0;
  while (std::abs(value) >= 1024.0 && unit + 1 < kUnits.size()) {
    value /= 1024.0;
    ++unit;
  }
  if (unit == 0) return fmt::format("{} B", bytes);
  return fmt::format("{:.2f} {}", value, kUnits[unit]);
}

}  // namespace memplan::sim
