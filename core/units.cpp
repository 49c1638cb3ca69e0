#include "core/units.hpp"

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include <fmt/core.h>

#include "core/input_error.hpp"

namespace memplan::sim {
namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front())))
    text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back())))
    text.remove_suffix(1);
  return text;
}

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

// A quantity as written: its number and its unit (spaces around either removed).
struct Quantity {
  double number = 0;
  std::string_view unit;
};

// Splits "12.5 GB/s" into 12.5 and "GB/s". Throws when the number is missing, malformed, not
// finite or negative, and when the unit is missing (`example` shows the right form).
Quantity split(std::string_view text, std::string_view where, std::string_view what,
               std::string_view example) {
  text = trim(text);
  Quantity q;
  const char* end = text.data() + text.size();
  const auto [ptr, ec] = std::from_chars(text.data(), end, q.number);
  if (ec == std::errc::result_out_of_range) {  // 1e400 overflows, 1e-400 underflows to 0
    const std::string number(text.data(), ptr);
    const bool tiny = std::fabs(std::strtod(number.c_str(), nullptr)) < 1;
    throw InputError(std::string(where), fmt::format("'{}' is too {} for a {}", text,
                                                     tiny ? "small (it is 0)" : "large", what));
  }
  if (ec != std::errc{} || ptr == text.data() || !std::isfinite(q.number)) {
    throw InputError(std::string(where),
                     fmt::format("'{}' is not a {} (write it like {})", text, what, example));
  }
  if (q.number < 0) {
    throw InputError(std::string(where), fmt::format("'{}': a {} is not negative", text, what));
  }
  q.unit = trim(std::string_view(ptr, static_cast<std::size_t>(end - ptr)));
  if (q.unit.empty()) {
    throw InputError(std::string(where),
                     fmt::format("'{}' has no unit (write it like {})", text, example));
  }
  return q;
}

// The factor of a size unit ("GiB", "gb", "G", "B"), case-insensitive; none for anything else.
std::optional<double> size_factor(std::string_view unit) {
  static constexpr std::array<std::string_view, 7> kPrefixes{"", "k", "m", "g", "t", "p", "e"};
  for (std::size_t p = 0; p < kPrefixes.size(); ++p) {
    const double decimal = std::pow(1000.0, static_cast<double>(p));
    const double binary = std::pow(1024.0, static_cast<double>(p));
    const std::string prefix(kPrefixes[p]);
    if (iequals(unit, prefix + "b")) return decimal;
    if (p > 0 && iequals(unit, prefix)) return decimal;
    if (p > 0 && (iequals(unit, prefix + "ib") || iequals(unit, prefix + "i"))) return binary;
  }
  return std::nullopt;
}

bool iends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && iequals(text.substr(text.size() - suffix.size()), suffix);
}

// The bytes per second of a bandwidth unit: a size unit then /s or ps. Its last letter before
// that is case-sensitive: B (bytes: GB/s, GiB/s, GBps) or b / bit (bits: Gb/s, Gbps, Gbit/s).
std::optional<double> bandwidth_factor(std::string_view unit) {
  if (!iends_with(unit, "/s") && !iends_with(unit, "ps")) return std::nullopt;
  unit.remove_suffix(2);
  bool bits = true;
  if (iends_with(unit, "bit")) {
    unit.remove_suffix(3);
  } else if (unit.ends_with('b')) {
    unit.remove_suffix(1);
  } else if (unit.ends_with('B')) {
    unit.remove_suffix(1);
    bits = false;
  } else {
    return std::nullopt;
  }
  const std::optional<double> factor = size_factor(std::string(unit) + "B");
  if (!factor) return std::nullopt;
  return bits ? *factor / 8 : *factor;
}

[[noreturn]] void unknown_unit(std::string_view text, std::string_view unit, std::string_view where,
                               std::string_view what, std::string_view known) {
  throw InputError(std::string(where), fmt::format("'{}': unknown unit '{}' for a {} (units: {})",
                                                   text, unit, what, known));
}

double in_range(double value, double min, double max, std::string_view text, std::string_view where,
                std::string_view what, std::string_view range) {
  if (value < min || value > max) {
    throw InputError(std::string(where),
                     fmt::format("'{}' is out of range for a {} ({})", text, what, range));
  }
  return value;
}

}  // namespace

Nanoseconds transfer_ns(Bytes bytes, BytesPerSecond bytes_per_s) {
  const double ns = std::ceil(static_cast<double>(bytes) * 1e9 / bytes_per_s);
  // `!(ns < max)` is also true for NaN (0 / 0) and infinity (a zero or denormal bandwidth).
  if (!(ns < static_cast<double>(kMaxNanoseconds))) return kMaxNanoseconds;
  return std::max<Nanoseconds>(static_cast<Nanoseconds>(ns), 0);
}

Bytes parse_bytes(std::string_view text, std::string_view where) {
  const Quantity q = split(text, where, "size", "16GiB or 512MB");
  const std::optional<double> factor = size_factor(q.unit);
  if (!factor) unknown_unit(text, q.unit, where, "size", "B, kB, MB, GB, TB, PB, EB, KiB ... EiB");
  const double bytes = in_range(q.number * *factor, 0, static_cast<double>(kMaxBytes), text, where,
                                "size", "at most 1 EiB");
  return static_cast<Bytes>(std::llround(bytes));
}

BytesPerSecond parse_bandwidth(std::string_view text, std::string_view where) {
  const Quantity q = split(text, where, "bandwidth", "12.5GB/s or 100Gb/s");
  const std::optional<double> factor = bandwidth_factor(q.unit);
  if (!factor) {
    unknown_unit(text, q.unit, where, "bandwidth",
                 "B/s, MB/s, GB/s, GiB/s, GBps (bytes); Mb/s, Gb/s, Gbps, Gbit/s (bits)");
  }
  return in_range(q.number * *factor, 1.0, 1e18, text, where, "bandwidth", "from 1 B/s to 1 EB/s");
}

Nanoseconds parse_duration(std::string_view text, std::string_view where) {
  struct Unit {
    std::string_view name;
    double ns;
  };
  static constexpr std::array<Unit, 7> kUnits{
      {{"ns", 1}, {"us", 1e3}, {"µs", 1e3}, {"ms", 1e6}, {"s", 1e9}, {"min", 60e9}, {"h", 3600e9}}};
  const Quantity q = split(text, where, "duration", "10us or 1.5ms");
  const auto unit = std::find_if(kUnits.begin(), kUnits.end(),
                                 [&](const Unit& u) { return iequals(q.unit, u.name); });
  if (unit == kUnits.end()) unknown_unit(text, q.unit, where, "duration", "ns, us, ms, s, min, h");
  const double ns = in_range(q.number * unit->ns, 0, static_cast<double>(kMaxParsedDuration), text,
                             where, "duration", "at most 1 day");
  return static_cast<Nanoseconds>(std::llround(ns));
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
